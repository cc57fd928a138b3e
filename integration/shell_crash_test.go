package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/proctree"
)

// shellCrashDef runs one shell call whose processes leave the shell's
// process group (a setsid child and a double fork), write their pids and
// would write "ran" once their sleep is over.
func shellCrashDef(dir string) policies.Definition {
	script := fmt.Sprintf(`setsid sh -c 'echo $$ >> %[1]s/pids; sleep 1000; echo ran >> %[1]s/after' &
sh -c 'sh -c "echo \$\$ >> %[1]s/pids; sleep 1000; echo ran >> %[1]s/after" &'
echo $$ >> %[1]s/pids; sleep 1000; echo ran >> %[1]s/after`, dir)
	return policies.Definition{
		Name:  "crash",
		Tools: []string{"shell"},
		Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{
			{Text: "Running.", ToolCalls: []policies.ScriptToolCall{{Name: "shell", Args: map[string]any{"command": script}}}},
			{Text: "Done."},
		}},
	}
}

// procAlive reports whether pid runs and is not a zombie.
func procAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z'
}

func readPids(t *testing.T, file string, n int) []int {
	t.Helper()
	var out []int
	natstest.WaitFor(t, 30*time.Second, func() error {
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		out = out[:0]
		for _, f := range strings.Fields(string(b)) {
			p, err := strconv.Atoi(f)
			if err != nil {
				return err
			}
			out = append(out, p)
		}
		if len(out) < n {
			return fmt.Errorf("%d of %d pids", len(out), n)
		}
		return nil
	})
	return out
}

// A shell call's processes never outlive their worker: kill -9 of the
// worker stops them at once (their reaper's parent-death signal), and when
// the reaper died with the worker, the worker that starts next kills them
// before it recovers the session. Either way the call is settled
// "interrupted; may or may not have run" only once nothing of it runs.
func TestShellProcessesDieWithTheirWorker(t *testing.T) {
	tests := []struct {
		name string
		// withReaper kills the tree's reaper together with the worker,
		// as kill -9 of their process group or the OOM killer would.
		withReaper bool
		// running: the worker that recovers the session runs already
		// (it started, and swept, while the first was alive).
		running bool
	}{
		{name: "kill -9 of the worker"},
		{name: "kill -9 of the worker and its reaper", withReaper: true},
		{name: "kill -9 of the worker and its reaper, another worker running", withReaper: true, running: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newCrashEnv(t)
			dir := t.TempDir()
			def := shellCrashDef(dir)
			spec := e.spec("w1", def, false, nil)
			spec.Shell = true
			first := startChild(t, spec)
			ref := e.send(t, def.Name, "s1", "go")
			pids := readPids(t, filepath.Join(dir, "pids"), 3)
			t.Cleanup(func() {
				for _, p := range pids {
					if procAlive(p) {
						_ = syscall.Kill(p, syscall.SIGKILL)
					}
				}
			})
			for _, p := range pids {
				if !procAlive(p) {
					t.Fatalf("process %d of the call is not running", p)
				}
			}
			var second *child
			if tt.running {
				second = startChild(t, e.spec("w2", def, false, nil).withShell())
				second.waitRunning(t)
			}
			if tt.withReaper {
				recs, err := filepath.Glob(filepath.Join(spec.WorkDir, ".trees", "*.json"))
				if err != nil || len(recs) != 1 {
					t.Fatalf("tree records: %v, %v", recs, err)
				}
				rec, err := proctree.ReadRecord(recs[0])
				if err != nil {
					t.Fatal(err)
				}
				// Stopped first, so that it cannot clean up in between.
				_ = first.cmd.Process.Signal(syscall.SIGSTOP)
				_ = syscall.Kill(rec.Reaper.Pid, syscall.SIGKILL)
				first.kill()
				natstest.WaitFor(t, 10*time.Second, func() error {
					if procAlive(rec.Reaper.Pid) {
						return fmt.Errorf("reaper %d still runs", rec.Reaper.Pid)
					}
					return nil
				})
				// What left the process group runs on, with nobody to stop
				// it but the next worker.
				alive := 0
				for _, p := range pids {
					if procAlive(p) {
						alive++
					}
				}
				if alive == 0 {
					t.Fatal("nothing of the call outlived worker and reaper: the test shows nothing")
				}
			} else {
				first.kill()
				natstest.WaitFor(t, 10*time.Second, func() error {
					for _, p := range pids {
						if procAlive(p) {
							return fmt.Errorf("process %d of the call outlived its worker", p)
						}
					}
					return nil
				})
			}
			if second == nil {
				second = startChild(t, e.spec("w2", def, false, nil).withShell())
			}
			tr := e.waitDone(t, ref, first, second)
			// Recovery came after the sweep: nothing of the call runs.
			for _, p := range pids {
				if procAlive(p) {
					t.Errorf("process %d of the call still runs after its session was recovered:\n%s", p, second.output())
				}
			}
			results := checkOneResult(t, tr)
			if len(results) != 1 {
				t.Fatalf("%d results", len(results))
			}
			for _, r := range results {
				if !r.IsError || r.Result != "interrupted; may or may not have run" {
					t.Errorf("result %q (is_error %v), want the synthetic interrupted result", r.Result, r.IsError)
				}
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "after")); len(b) > 0 {
				t.Errorf("the call's processes ran to their end: %q", b)
			}
		})
	}
}

func (s childSpec) withShell() childSpec {
	s.Shell = true
	return s
}
