package chaos

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/natstest"
)

// Kinds of processes.
const (
	kindNATS   = "nats"
	kindIngest = "ingest"
	kindWorker = "worker"
	kindCron   = "cron"
)

// process is one subprocess of the harness, restartable with the same
// command line: a NATS node or a jetloop component. Its output goes to a
// log file in the run's folder, appended across restarts.
type process struct {
	name, kind string
	bin        string
	args, env  []string
	logPath    string
	// addr is the client address of a node, the HTTP address of a
	// component: what answers once the process is up.
	addr string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	paused  bool
	expect  bool // the harness is killing or stopping it
	starts  int
	exits   []string // unexpected exits, with their status
	waiters sync.WaitGroup
}

// start runs the process; it must not be running.
func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	logf, err := os.OpenFile(p.logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	p.starts++
	fmt.Fprintf(logf, "==== chaos: start %d of %s at %s\n", p.starts, p.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.paused, p.expect = cmd, done, false, false
	p.waiters.Go(func() {
		err := cmd.Wait()
		p.mu.Lock()
		if !p.expect {
			p.exits = append(p.exits, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), err))
		}
		p.mu.Unlock()
		fmt.Fprintf(logf, "==== chaos: %s exited at %s: %v\n", p.name, time.Now().Format(time.RFC3339Nano), err)
		logf.Close()
		close(done)
	})
	return nil
}

// running reports whether the process is alive (stopped or not).
func (p *process) running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// isPaused reports whether the process is stopped by SIGSTOP.
func (p *process) isPaused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// signal sends sig to a running process.
func (p *process) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return fmt.Errorf("%s is not started", p.name)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	case syscall.SIGKILL, syscall.SIGTERM:
		p.expect = true
	}
	return p.cmd.Process.Signal(sig)
}

// kill9 kills the process with SIGKILL and waits until it is gone.
func (p *process) kill9() {
	if !p.running() {
		return
	}
	_ = p.signal(syscall.SIGKILL)
	p.wait(30 * time.Second)
}

// stop ends the process cleanly (SIGCONT, SIGTERM), or with SIGKILL after
// grace.
func (p *process) stop(grace time.Duration) {
	if !p.running() {
		return
	}
	_ = p.signal(syscall.SIGCONT)
	_ = p.signal(syscall.SIGTERM)
	if !p.wait(grace) {
		p.kill9()
	}
}

// wait waits up to timeout for the process to exit.
func (p *process) wait(timeout time.Duration) bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// unexpectedExits returns the exits the harness did not cause.
func (p *process) unexpectedExits() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.exits...)
}

// up reports whether the process answers: a node accepts a TCP connection,
// a component's /readyz answers 200.
func (p *process) up(ctx context.Context) error {
	if !p.running() {
		return fmt.Errorf("%s is not running", p.name)
	}
	if p.kind == kindNATS {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", p.addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: /readyz answers %d", p.name, resp.StatusCode)
	}
	return nil
}

// waitUp waits until the process answers.
func (p *process) waitUp(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		err := p.up(actx)
		acancel()
		if err == nil {
			return nil
		}
		if !p.running() {
			return fmt.Errorf("%s exited before it was up; its log:\n%s", p.name, p.tail(30))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not up within %s: %v; its log:\n%s", p.name, timeout, err, p.tail(30))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// tail returns the last n lines of the process's log.
func (p *process) tail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// build compiles a main package into dir and returns the binary's path.
// It builds without the race detector whatever the test binary uses: the
// processes under test must run at their own speed on two cores.
func build(t *testing.T, dir, pkg, name string) string {
	t.Helper()
	bin := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// freePorts finds n free loopback ports that stay free for a process
// restarted on them: outside the kernel's ephemeral range, where no
// reconnect's outgoing connection can take one while the process is down
// (natstest.FreePorts).
func freePorts(t *testing.T, n int) []int { return natstest.FreePorts(t, n) }
