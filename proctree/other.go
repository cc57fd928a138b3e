//go:build unix && !linux

package proctree

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// errNotLinux is why a tree here is only a process group: no child
// subreaper, parent-death signal, cgroup or pidfd outside Linux.
var errNotLinux = errors.New("proctree: process trees need Linux: here a tree is its process group")

// Starter starts process trees for one process. Outside Linux a tree is
// the command's process group: what leaves it (setsid, a new group)
// escapes Kill, and nothing dies with this process. It is safe for
// concurrent use.
type Starter struct {
	cfg Config
}

// New returns a starter.
func New(cfg Config) (*Starter, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Log.Warn("tool processes run as process groups only: what leaves its group outlives its call and this process", "why", errNotLinux)
	return &Starter{cfg: cfg}, nil
}

// Dir is the folder of the records of running trees: none here.
func (s *Starter) Dir() string { return "" }

// Cgroups says why there are no cgroups here.
func (s *Starter) Cgroups() (string, error) { return "", errNotLinux }

// Orphans says why this process takes in nothing trees leave here.
func (s *Starter) Orphans() error { return errNotLinux }

// Sweep finds nothing here: no records are kept.
func (s *Starter) Sweep(ctx context.Context) ([]Swept, error) { return nil, ctx.Err() }

// Self is the calling process (no start time here).
func Self() (Proc, error) { return Proc{Pid: os.Getpid()}, nil }

// Alive reports whether a process with p's pid runs (pid reuse is not
// told apart here).
func (p Proc) Alive() bool { return p.Pid > 0 && syscall.Kill(p.Pid, 0) == nil }

// Tree is a running command and its process group.
type Tree struct {
	s      *Starter
	cmd    *exec.Cmd
	label  string
	done   chan struct{}
	status Status
	err    error
	killed atomic.Bool
}

// Start starts c in a process group of its own, with MarkerEnv in its
// environment; what it leaves in the group when it exits is killed.
func (s *Starter) Start(c Command) (*Tree, error) {
	path := c.Path
	if !strings.Contains(path, "/") {
		lp, err := exec.LookPath(path)
		if err != nil {
			return nil, fmt.Errorf("proctree: %w", err)
		}
		path = lp
	}
	args := c.Args
	if len(args) == 0 {
		args = []string{c.Path}
	}
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("proctree: marker: %w", err)
	}
	env := c.Env
	if env == nil {
		env = os.Environ()
	}
	t := &Tree{s: s, label: c.Label, done: make(chan struct{})}
	t.cmd = &exec.Cmd{Path: path, Args: args, Env: append(withoutMarker(env), MarkerEnv+"="+hex.EncodeToString(raw)),
		Dir: c.Dir, Stdin: c.Stdin, Stdout: c.Stdout, Stderr: c.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true}, WaitDelay: time.Second}
	if err := t.cmd.Start(); err != nil {
		return nil, fmt.Errorf("proctree: start %s: %w", path, err)
	}
	go t.watch()
	return t, nil
}

func (t *Tree) watch() {
	defer close(t.done)
	err := t.cmd.Wait()
	_ = syscall.Kill(-t.cmd.Process.Pid, syscall.SIGKILL) // what it left in its group
	ps := t.cmd.ProcessState
	if ps == nil {
		t.status, t.err = Status{ExitCode: -1}, fmt.Errorf("proctree: %s: %w", t.label, err)
		return
	}
	ws, _ := ps.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		t.status = Status{ExitCode: -1, Signal: ws.Signal()}
	} else {
		t.status = Status{ExitCode: ws.ExitStatus()}
	}
}

// Pid is the main process's pid.
func (t *Tree) Pid() int { return t.cmd.Process.Pid }

// Running reports whether the main process still runs.
func (t *Tree) Running() bool {
	select {
	case <-t.done:
		return false
	default:
		return true
	}
}

// Done is closed once the main process has exited and its group was
// killed.
func (t *Tree) Done() <-chan struct{} { return t.done }

// Terminate sends SIGTERM to the tree's process group.
func (t *Tree) Terminate() error {
	if err := syscall.Kill(-t.cmd.Process.Pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("proctree: terminate %s: %w", t.label, err)
	}
	return nil
}

// Kill kills the tree's process group and waits for the main process, at
// most the starter's KillTimeout.
func (t *Tree) Kill() error {
	t.killed.Store(true)
	if err := syscall.Kill(-t.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("proctree: kill %s: %w", t.label, err)
	}
	select {
	case <-t.done:
		return nil
	case <-time.After(t.s.cfg.KillTimeout):
		return fmt.Errorf("proctree: %s: still running %s after the kill", t.label, t.s.cfg.KillTimeout)
	}
}

// Wait waits until the tree is gone and returns how the main process
// ended.
func (t *Tree) Wait() (Status, error) {
	<-t.done
	return t.status, t.err
}
