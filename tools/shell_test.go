package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/internal/proctreehook"
	"github.com/jetloop/jetloop/tools"
)

// shellRegistry registers the built-ins with cfg.
func shellRegistry(t *testing.T, cfg tools.BuiltinConfig) *tools.Registry {
	t.Helper()
	r, err := tools.NewRegistry(tools.RegistryOptions{}, tools.Builtins(cfg)...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func shellCall(t *testing.T, dir, command string) tools.Call {
	t.Helper()
	args, err := json.Marshal(map[string]string{"command": command})
	if err != nil {
		t.Fatal(err)
	}
	c := call(string(args))
	c.WorkDir = dir
	return c
}

func TestShell(t *testing.T) {
	t.Setenv("JETLOOP_TEST_SECRET", "sk-do-not-leak")
	r := shellRegistry(t, tools.BuiltinConfig{ShellMaxOutput: 1000})
	tests := []struct {
		name    string
		command string
		isError bool
		want    []string
	}{
		{name: "output and exit code", command: "echo hello; echo oops >&2", want: []string{"hello\noops\n", "[exit code 0]"}},
		{name: "non-zero exit is an error", command: "echo failing; exit 3", isError: true, want: []string{"failing", "[exit code 3]"}},
		{name: "runs in the work folder", command: "pwd; echo x > here.txt; cat here.txt", want: []string{"/work/sess\n", "x\n"}},
		{name: "call identity in env", command: `echo "$JETLOOP_AGENT $JETLOOP_SESSION $JETLOOP_CALL_ID"`, want: []string{"pr-reviewer octo/repo#12 call-1"}},
		{name: "worker env not passed", command: `echo "secret=${JETLOOP_TEST_SECRET-unset}"`, want: []string{"secret=unset"}},
		{name: "output capped", command: "yes | head -c 300000", want: []string{"[output truncated: 299000 more bytes dropped]", "[exit code 0]"}},
		{name: "no trailing newline", command: "printf abc", want: []string{"abc\n[exit code 0]"}},
		{name: "killed by a signal", command: "kill -9 $$", isError: true, want: []string{"[killed by SIGKILL]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "work", "sess") // created by the tool
			res, err := r.Run(t.Context(), "shell", shellCall(t, dir, tt.command))
			if err != nil {
				t.Fatal(err)
			}
			if res.IsError != tt.isError {
				t.Fatalf("IsError = %v, want %v: %s", res.IsError, tt.isError, res.Content)
			}
			for _, w := range tt.want {
				if !strings.Contains(res.Content, w) {
					t.Fatalf("content %q lacks %q", res.Content, w)
				}
			}
		})
	}
}

// TestShellCommandThatKilledItsReaper runs a command that kills the
// process watching it before that process reported its start: the call
// is not said to have failed to start, since the command ran; its result
// says it may have run, is an error, and holds what it wrote.
func TestShellCommandThatKilledItsReaper(t *testing.T) {
	defer proctreehook.SetStartDelay(time.Minute)()
	r := shellRegistry(t, tools.BuiltinConfig{})
	dir := filepath.Join(t.TempDir(), "work", "sess")
	res, err := r.Run(t.Context(), "shell", shellCall(t, dir, "echo ran; kill -9 $PPID"))
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.HasPrefix(res.Content, "ran\n") || !strings.Contains(res.Content, "may have run") {
		t.Fatalf("result %+v: want an error that holds the output and says the command may have run", res)
	}
}

func TestShellWithoutWorkDir(t *testing.T) {
	r := shellRegistry(t, tools.BuiltinConfig{})
	res, err := r.Run(t.Context(), "shell", shellCall(t, "", "true"))
	if err == nil || !res.IsError {
		t.Fatalf("Run without a work folder = %+v, %v; want a runtime error", res, err)
	}
}

// pids waits until the script has written n pids to file, and returns them.
func pids(t *testing.T, file string, n int) []int {
	t.Helper()
	var got []int
	natstest.WaitFor(t, 10*time.Second, func() error {
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		got = got[:0]
		for _, f := range strings.Fields(string(b)) {
			p, err := strconv.Atoi(f)
			if err != nil {
				return err
			}
			got = append(got, p)
		}
		if len(got) < n {
			return fmt.Errorf("%d of %d pids written", len(got), n)
		}
		return nil
	})
	return got
}

// alive reports whether pid is a live process: it exists and is not a
// zombie waiting for a parent (an orphan's parent may be slow to reap it).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// Field 3, after "(comm)", is the state.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func waitGone(t *testing.T, ps []int) {
	t.Helper()
	natstest.WaitFor(t, 5*time.Second, func() error {
		for _, p := range ps {
			if alive(p) {
				return fmt.Errorf("process %d still runs", p)
			}
		}
		return nil
	})
}

// A cancel (or the tool's timeout) stops every process of the command,
// also those that left its process group.
func TestShellCancelKillsTheWholeTree(t *testing.T) {
	tests := []struct {
		name    string
		script  string // writes its pids to pids.txt
		npids   int
		want    string
		timeout bool // stopped by the tool timeout instead of a cancel
	}{
		{
			name:   "sleep",
			script: `echo $$ > pids.txt; exec sleep 30`,
			npids:  1, want: "sent SIGTERM to every process of the command",
		},
		{
			name:   "child in background",
			script: `sh -c 'echo $$ >> pids.txt; sleep 30 & echo $! >> pids.txt; wait' & wait`,
			npids:  2, want: "sent SIGTERM to every process of the command",
		},
		{
			name:   "SIGTERM ignored, so SIGKILL after the grace",
			script: `trap '' TERM; sleep 30 & echo $$ $! > pids.txt; wait`,
			npids:  2, want: "then SIGKILL after 200ms",
		},
		{
			name:   "setsid child",
			script: `setsid sh -c 'echo $$ >> pids.txt; sleep 30' & wait`,
			npids:  1, want: "sent SIGTERM to every process of the command",
		},
		{
			name:   "double fork that left the group",
			script: `sh -c 'setsid sh -c "sleep 30 & echo \$! >> pids.txt; wait" &'; sleep 30`,
			npids:  1, want: "sent SIGTERM to every process of the command",
		},
		{
			name:   "setsid child ignoring SIGTERM, so SIGKILL after the grace",
			script: `trap '' TERM; setsid sh -c 'trap "" TERM; echo $$ >> pids.txt; while :; do sleep 1; done' & wait`,
			npids:  1, want: "then SIGKILL after 200ms",
		},
		{
			name:   "timeout",
			script: `echo $$ > pids.txt; sleep 30`,
			npids:  1, want: "timed out", timeout: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tools.BuiltinConfig{ShellGrace: 200 * time.Millisecond}
			if tt.timeout {
				cfg.ShellTimeout = 300 * time.Millisecond
			}
			r := shellRegistry(t, cfg)
			dir := t.TempDir()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			type outcome struct {
				res tools.Result
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := r.Run(ctx, "shell", shellCall(t, dir, tt.script))
				done <- outcome{res, err}
			}()
			ps := pids(t, filepath.Join(dir, "pids.txt"), tt.npids)
			if !tt.timeout {
				cancel()
			}
			got := <-done
			if tt.timeout && got.err != nil {
				t.Fatalf("a timeout is a result, not an error: %v", got.err)
			}
			if !tt.timeout && !errors.Is(got.err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", got.err)
			}
			if !got.res.IsError || !strings.Contains(got.res.Content, tt.want) {
				t.Fatalf("result %q, want an error result with %q", got.res.Content, tt.want)
			}
			waitGone(t, ps)
		})
	}
}

func TestShellKillsWhatTheCommandLeftRunning(t *testing.T) {
	r := shellRegistry(t, tools.BuiltinConfig{})
	dir := t.TempDir()
	res, err := r.Run(t.Context(), "shell", shellCall(t, dir, `sleep 30 & echo $! > pids.txt; setsid sleep 30 & echo $! >> pids.txt; echo started`))
	if err != nil || res.IsError || !strings.Contains(res.Content, "started") {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	waitGone(t, pids(t, filepath.Join(dir, "pids.txt"), 2))
}
