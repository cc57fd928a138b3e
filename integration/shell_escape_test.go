package integration

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/proctree"
)

// A shell call whose command starts a child in a session of its own and
// without JETLOOP_PROCESS_TREE in its environment (env -i), then kills
// the reaper of its tree, leaves nothing running once the call has its
// result, in a worker that runs on (trees without cgroups here: the
// worker is their child subreaper and kills what they leave).
func TestShellEscapeAfterKillingItsReaper(t *testing.T) {
	e := newCrashEnv(t)
	dir := t.TempDir()
	script := fmt.Sprintf(`setsid env -i sh -c 'echo $$ >> %[1]s/pids; sleep 1000; echo ran >> %[1]s/after' </dev/null >/dev/null 2>&1 &
p=$!
while grep -q %[2]s= /proc/$p/environ 2>/dev/null; do :; done
kill -9 $PPID; sleep 1000`, dir, proctree.MarkerEnv)
	def := policies.Definition{
		Name:  "escape",
		Tools: []string{"shell"},
		Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{
			{Text: "Running.", ToolCalls: []policies.ScriptToolCall{{Name: "shell", Args: map[string]any{"command": script}}}},
			{Text: "Done."},
		}},
	}
	w := startChild(t, e.spec("w1", def, false, nil).withShell())
	ref := e.send(t, def.Name, "s1", "go")
	pids := readPids(t, filepath.Join(dir, "pids"), 1)
	t.Cleanup(func() {
		for _, p := range pids {
			if procAlive(p) {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
	})
	tr := e.waitDone(t, ref, w)
	results := checkOneResult(t, tr)
	if len(results) != 1 {
		t.Fatalf("%d results", len(results))
	}
	for _, r := range results {
		if !r.IsError {
			t.Errorf("result %q of a call whose reaper was killed: not an error", r.Result)
		}
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		for _, p := range pids {
			if procAlive(p) {
				return fmt.Errorf("process %d of the call runs on after its result:\n%s", p, w.output())
			}
		}
		return nil
	})
	if !procAlive(w.cmd.Process.Pid) {
		t.Fatalf("the worker ended:\n%s", w.output())
	}
}
