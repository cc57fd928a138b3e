package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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
// The command runs in its own process group, so that everything it starts
// can be signalled at once. When the call's context ends (cancel or
// timeout) the group gets SIGTERM, then SIGKILL once the grace period has
// passed. When the command exits, whatever it left running in its group is
// killed: a call's processes do not outlive the call.
type shell struct{ cfg BuiltinConfig }

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
	if r.signal != "" {
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

// run starts the command and waits for it, stopping its process group when
// ctx ends. Every kill of the group happens while the shell is an
// unreaped zombie, so its pid, which is the group id, cannot have been
// reused by an unrelated process.
func (s *shell) run(ctx context.Context, call Call, command string) (shellRun, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return shellRun{}, fmt.Errorf("shell: output pipe: %w", err)
	}
	defer pr.Close()
	cmd := exec.Command(s.cfg.Shell, "-c", command)
	cmd.Dir = call.WorkDir
	cmd.Env = s.env(call)
	// One *os.File for both: the child writes to the pipe directly, in
	// order, and Wait does not wait for anything but the process.
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	pw.Close() // the child holds its own copy
	if err != nil {
		return shellRun{}, fmt.Errorf("shell: start %s: %w", s.cfg.Shell, err)
	}
	pgid := cmd.Process.Pid

	out := &capped{max: s.cfg.ShellMaxOutput}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		_, _ = io.Copy(out, pr)
	}()
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		waitExited(pgid)
	}()

	var run shellRun
	select {
	case <-exited:
	case <-ctx.Done():
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		grace := time.NewTimer(s.cfg.ShellGrace)
		defer grace.Stop()
		run.stopped = fmt.Sprintf("stopped: %v; sent SIGTERM to the process group", context.Cause(ctx))
		select {
		case <-exited:
			// Give the rest of the group the remaining grace to finish:
			// the pipe closes when the last writer exits.
			select {
			case <-readDone:
			case <-grace.C:
			}
		case <-grace.C:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			run.stopped = fmt.Sprintf("stopped: %v; sent SIGTERM, then SIGKILL after %v", context.Cause(ctx), s.cfg.ShellGrace)
			<-exited
		}
	}
	// Nothing of the call outlives it.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	werr := cmd.Wait()

	// A process that left the group (setsid) may still hold the pipe; do
	// not wait for it beyond the grace period.
	_ = pr.SetReadDeadline(time.Now().Add(s.cfg.ShellGrace))
	<-readDone

	st := cmd.ProcessState
	if st == nil {
		return shellRun{}, fmt.Errorf("shell: wait: %w", werr)
	}
	run.out = out
	run.exitCode = st.ExitCode()
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		run.signal = unix.SignalName(ws.Signal())
		if run.signal == "" {
			run.signal = ws.Signal().String()
		}
	}
	return run, nil
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
