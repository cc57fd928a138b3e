package mcp

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// process is a stdio server started in a process group of its own, so
// that it and everything it starts can be stopped together, as the shell
// tool stops a command.
type process struct {
	cmd    *exec.Cmd
	pgid   int
	grace  time.Duration
	stderr *tail
	exited chan struct{} // closed once the leader exited (not yet reaped)

	stopOnce sync.Once
	stopErr  error
}

// startProcess starts argv in dir with env, its stdin and stdout piped to
// the caller and its stderr's last bytes kept for errors.
func startProcess(argv []string, dir string, env []string, grace time.Duration) (*process, io.ReadCloser, io.WriteCloser, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	// Pdeathsig: a worker killed with -9 takes its servers' leaders with
	// it; their stdin closes too, which a well-behaved server takes as
	// its end.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	p := &process{cmd: cmd, grace: grace, stderr: &tail{max: 4 << 10}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	// A process that left the group may hold stderr open; Wait does not
	// wait for it beyond this.
	cmd.WaitDelay = grace
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	p.pgid = cmd.Process.Pid
	go func() {
		defer close(p.exited)
		waitExited(p.pgid)
	}()
	return p, stdout, stdin, nil
}

// stop ends the server once its stdin is closed: it gets the grace period
// to exit by itself, then SIGTERM for its group, then SIGKILL after
// another grace period. Whatever the leader left running in its group is
// killed while the leader is an unreaped zombie, so the group id cannot
// have been reused.
func (p *process) stop() error {
	p.stopOnce.Do(func() {
		t := time.NewTimer(p.grace)
		defer t.Stop()
		select {
		case <-p.exited:
		case <-t.C:
			_ = syscall.Kill(-p.pgid, syscall.SIGTERM)
			t.Reset(p.grace)
			select {
			case <-p.exited:
			case <-t.C:
				_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
				<-p.exited
			}
		}
		_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
		err := p.cmd.Wait()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			p.stopErr = err
		}
	})
	return p.stopErr
}

// running reports whether the server's leader has not exited, asking the
// kernel rather than waiting for the watcher: a call must not be sent to
// a server that is already gone.
func (p *process) running() bool {
	select {
	case <-p.exited:
		return false
	default:
	}
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, p.pgid, &info, unix.WEXITED|unix.WNOWAIT|unix.WNOHANG, nil)
	return err == nil && info.Signo == 0
}

// kill stops the group at once (a server that failed to start its
// session), then reaps it.
func (p *process) kill() {
	_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
	_ = p.stop()
}

// waitExited returns once process pid has exited, without reaping it.
func waitExited(pid int) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return
		}
	}
}

// stdinCloser is the server's stdin as the SDK's connection writes it:
// closing it ends the server (see process.stop).
type stdinCloser struct {
	io.WriteCloser
	p *process
}

func (s stdinCloser) Close() error {
	err := s.WriteCloser.Close()
	if serr := s.p.stop(); err == nil {
		err = serr
	}
	return err
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// minimalEnv is a stdio server's environment: not the worker's, which
// holds API keys.
func minimalEnv(workDir string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	return []string{"PATH=" + path, "HOME=" + workDir, "PWD=" + workDir, "LANG=C.UTF-8"}
}
