package mcp

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/jetloop/jetloop/proctree"
)

// process is a stdio server started as a process tree (package
// proctree), so that it and everything it starts, also what leaves its
// process group, is stopped together, as the shell tool stops a command,
// and dies with the worker.
type process struct {
	tree   *proctree.Tree
	grace  time.Duration
	stderr *tail

	stopOnce sync.Once
	stopErr  error
}

// startProcess starts argv in dir with env through trees, its stdin and
// stdout piped to the caller and its stderr's last bytes kept for errors.
func startProcess(trees *proctree.Starter, argv []string, dir string, env []string, grace time.Duration, label string) (*process, io.ReadCloser, io.WriteCloser, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, nil, nil, err
	}
	p := &process{grace: grace, stderr: &tail{max: 4 << 10}}
	p.tree, err = trees.Start(proctree.Command{Path: argv[0], Args: argv, Dir: dir, Env: env,
		Stdin: inR, Stdout: outW, Stderr: p.stderr, Label: label})
	inR.Close() // the tree holds its own copies
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, nil, nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	return p, outR, inW, nil
}

// stop ends the server once its stdin is closed: it gets the grace period
// to exit by itself, then SIGTERM for every process of its tree, then
// SIGKILL after another grace period. Whatever it left running is killed
// when it exits.
func (p *process) stop() error {
	p.stopOnce.Do(func() {
		t := time.NewTimer(p.grace)
		defer t.Stop()
		select {
		case <-p.tree.Done():
		case <-t.C:
			_ = p.tree.Terminate()
			t.Reset(p.grace)
			select {
			case <-p.tree.Done():
			case <-t.C:
				if err := p.tree.Kill(); err != nil {
					p.stopErr = err
					return
				}
			}
		}
		if _, err := p.tree.Wait(); err != nil {
			p.stopErr = err
		}
	})
	return p.stopErr
}

// running reports whether the server's tree still runs: a call must not
// be sent to a server that is already gone.
func (p *process) running() bool { return p.tree.Running() }

// kill stops the tree at once (a server that failed to start its
// session).
func (p *process) kill() {
	_ = p.tree.Kill()
	_ = p.stop()
}

// stdinCloser is the server's stdin as the SDK's connection writes it:
// closing it ends the server (see process.stop).
type stdinCloser struct {
	io.WriteCloser
	p     *process
	watch *cancelWatch
}

// Write writes one message (the SDK writes each in one Write), counting a
// notifications/cancelled.
func (s stdinCloser) Write(b []byte) (int, error) {
	n, err := s.WriteCloser.Write(b)
	if s.watch != nil && isCancelNotification(bytes.TrimSpace(b)) {
		s.watch.triedOne()
	}
	return n, err
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
