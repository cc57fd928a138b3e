package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jetloop/jetloop/proctree"
)

const shellSchema = `{
	"type": "object",
	"properties": {
		"command": {
			"type": "string",
			"minLength": 1,
			"maxLength": 65536,
			"description": "A POSIX shell command line, run with sh -c in the session's work folder."
		}
	},
	"required": ["command"],
	"additionalProperties": false
}`

// shell runs a command line with sh -c in the session's work folder.
//
// The command runs as a process tree (package proctree): everything it
// starts, also what leaves its process group with setsid or a double fork,
// can be signalled and killed at once, and dies with the worker. When the
// call's context ends (cancel or timeout) every process of the tree gets
// SIGTERM, then SIGKILL once the grace period has passed. When the command
// exits, whatever it left running is killed: a call's processes do not
// outlive the call.
type shell struct {
	cfg   BuiltinConfig
	once  sync.Once
	trees *proctree.Starter
	err   error
}

// starter is the configured starter, or one of the shell's own, made on
// first use.
func (s *shell) starter() (*proctree.Starter, error) {
	s.once.Do(func() {
		s.trees = s.cfg.Trees
		if s.trees == nil {
			s.trees, s.err = proctree.New(proctree.Config{})
		}
	})
	return s.trees, s.err
}

func (s *shell) Spec() Spec {
	return Spec{
		Name: "shell",
		Description: "Run a shell command (sh -c) in this session's work folder and return its combined stdout and stderr and its exit code. " +
			"Files written there persist between calls of the same session. Processes left running when the command exits are killed. " +
			fmt.Sprintf("Output beyond %d bytes is dropped; a non-zero exit code is reported as an error.", s.cfg.ShellMaxOutput),
		Schema:     json.RawMessage(shellSchema),
		ReplaySafe: false,
		State:      Resource,
		Timeout:    s.cfg.ShellTimeout,
	}
}

func (s *shell) Call(ctx context.Context, call Call) (Result, error) {
	var args struct {
		Command string `json:"command"`
	}
	if err := json.Unmarshal(call.Args, &args); err != nil {
		return Result{}, fmt.Errorf("shell: arguments: %w", err)
	}
	if call.WorkDir == "" {
		return Result{}, errors.New("shell: the call has no work folder")
	}
	if err := os.MkdirAll(call.WorkDir, 0o750); err != nil {
		return Result{}, fmt.Errorf("shell: work folder: %w", err)
	}
	run, err := s.run(ctx, call, args.Command)
	if err != nil {
		return Result{}, err
	}
	return run.result(), nil
}

// shellRun is what became of one command.
type shellRun struct {
	out      *capped
	exitCode int    // -1 when a signal ended it
	signal   string // the signal that ended it, if any
	stopped  string // how the runtime stopped it: "" or a note
	unknown  string // why its status is not known, if it is not
}

func (r shellRun) result() Result {
	var b strings.Builder
	b.Write(r.out.buf)
	if len(r.out.buf) > 0 && r.out.buf[len(r.out.buf)-1] != '\n' {
		b.WriteByte('\n')
	}
	if r.out.dropped > 0 {
		fmt.Fprintf(&b, "[output truncated: %d more bytes dropped]\n", r.out.dropped)
	}
	if r.stopped != "" {
		fmt.Fprintf(&b, "[%s]\n", r.stopped)
	}
	if r.unknown != "" {
		fmt.Fprintf(&b, "[%s]", r.unknown)
	} else if r.signal != "" {
		fmt.Fprintf(&b, "[killed by %s]", r.signal)
	} else {
		fmt.Fprintf(&b, "[exit code %d]", r.exitCode)
	}
	return Result{Content: b.String(), IsError: r.exitCode != 0}
}

func (s *shell) env(call Call) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	env := []string{
		"PATH=" + path,
		"HOME=" + call.WorkDir,
		"PWD=" + call.WorkDir,
		"LANG=C.UTF-8",
		"JETLOOP_AGENT=" + call.Agent,
		"JETLOOP_SESSION=" + call.Session,
		"JETLOOP_CALL_ID=" + call.ID,
	}
	return append(env, s.cfg.ShellEnv...)
}

// run starts the command as a process tree and waits until every process
// of it is gone, stopping the tree when ctx ends.
func (s *shell) run(ctx context.Context, call Call, command string) (shellRun, error) {
	trees, err := s.starter()
	if err != nil {
		return shellRun{}, fmt.Errorf("shell: %w", err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return shellRun{}, fmt.Errorf("shell: output pipe: %w", err)
	}
	defer pr.Close()
	// One *os.File for both: the child writes to the pipe directly, in
	// order, and nothing but the processes of the tree holds it open.
	tree, err := trees.Start(proctree.Command{Path: s.cfg.Shell, Args: []string{s.cfg.Shell, "-c", command},
		Dir: call.WorkDir, Env: s.env(call), Stdout: pw, Stderr: pw,
		Label: call.Agent + "/" + call.Session + " " + call.ID})
	pw.Close() // the tree holds its own copy
	if errors.Is(err, proctree.ErrReaperKilled) {
		return s.killedItsReaper(pr, err), nil
	}
	if err != nil {
		return shellRun{}, fmt.Errorf("shell: start %s: %w", s.cfg.Shell, err)
	}

	out := &capped{max: s.cfg.ShellMaxOutput}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		_, _ = io.Copy(out, pr)
	}()

	var run shellRun
	select {
	case <-tree.Done():
	case <-ctx.Done():
		_ = tree.Terminate()
		grace := time.NewTimer(s.cfg.ShellGrace)
		defer grace.Stop()
		run.stopped = fmt.Sprintf("stopped: %v; sent SIGTERM to every process of the command", context.Cause(ctx))
		select {
		case <-tree.Done():
		case <-grace.C:
			run.stopped = fmt.Sprintf("stopped: %v; sent SIGTERM, then SIGKILL after %v", context.Cause(ctx), s.cfg.ShellGrace)
			if err := tree.Kill(); err != nil {
				return shellRun{}, fmt.Errorf("shell: %w", err)
			}
		}
	}
	st, werr := tree.Wait()
	// Every writer of the pipe is gone with the tree; the deadline only
	// guards against a process that escaped it.
	_ = pr.SetReadDeadline(time.Now().Add(s.cfg.ShellGrace))
	<-readDone
	if werr != nil && st.ExitCode == 0 && st.Signal == 0 {
		return shellRun{}, fmt.Errorf("shell: %w", werr)
	}
	run.out = out
	run.exitCode = st.ExitCode
	if st.Signal != 0 {
		run.signal = unix.SignalName(st.Signal)
		if run.signal == "" {
			run.signal = st.Signal.String()
		}
	}
	return run, nil
}

// killedItsReaper is the run of a command whose watching process was
// killed before its start was reported, by the command or when the
// report was late (proctree.ErrReaperKilled): it ran, or may have, and
// nothing of it is left; what it wrote is in pr, whose writers are gone
// with it.
func (s *shell) killedItsReaper(pr *os.File, err error) shellRun {
	out := &capped{max: s.cfg.ShellMaxOutput}
	_ = pr.SetReadDeadline(time.Now().Add(s.cfg.ShellGrace))
	_, _ = io.Copy(out, pr)
	return shellRun{out: out, exitCode: -1, unknown: fmt.Sprintf("status unknown: the command may have run: %v", err)}
}

// capped keeps the first max bytes written to it and counts the rest.
type capped struct {
	max     int
	buf     []byte
	dropped int64
}

func (c *capped) Write(p []byte) (int, error) {
	keep := min(len(p), c.max-len(c.buf))
	c.buf = append(c.buf, p[:keep]...)
	c.dropped += int64(len(p) - keep)
	return len(p), nil
}
