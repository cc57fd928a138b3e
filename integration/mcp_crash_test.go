package integration

import (
	"context"
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
	"github.com/jetloop/jetloop/tools/mcp"
	"github.com/jetloop/jetloop/tools/mcp/mcptest"
)

// mcpStdioCrashDef calls srv.slow of a stdio MCP server (this test binary)
// that starts a child of its own; the catalog is recorded as apply does.
func mcpStdioCrashDef(t *testing.T, events string) policies.Definition {
	t.Helper()
	def := policies.Definition{
		Name: "mcpcrash",
		Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{
			{Text: "Running.", ToolCalls: []policies.ScriptToolCall{{Name: "srv.slow", Args: map[string]any{}}}},
			{Text: "Done."},
		}},
		MCPServers: []policies.MCPServer{{Name: "srv", Command: mcptest.Spawning(mcptest.Command("srv", events, "", "")), Tools: []string{"slow"}}},
	}
	c, err := policies.Compile(def)
	if err != nil {
		t.Fatal(err)
	}
	p, err := mcp.NewPool(mcp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.Admit(ctx, c, "mcpcrash.yaml"); err != nil {
		t.Fatal(err)
	}
	return c.Definition
}

// serverPids are the pids of the stdio server that serves the call, and
// of the child it started: the last start event before the call.
func serverPids(t *testing.T, events string) []int {
	t.Helper()
	var pids []int
	natstest.WaitFor(t, time.Minute, func() error {
		pids = pids[:0]
		called := false
		for _, e := range mcptest.ReadEvents(events) {
			switch {
			case e.Kind == "start":
				pids = pids[:0]
				for _, f := range strings.Fields(e.Text) {
					p, err := strconv.Atoi(f)
					if err != nil {
						return err
					}
					pids = append(pids, p)
				}
			case e.Kind == "call" && e.Tool == "slow":
				called = true
			}
		}
		if !called || len(pids) != 2 {
			return fmt.Errorf("slow not called yet by a server with a child (pids %v)", pids)
		}
		return nil
	})
	return pids
}

// A stdio MCP server never outlives its worker, as a shell call's
// processes do not: kill -9 of the worker stops it and what it started at
// once, and when the tree's reaper died with the worker, the worker that
// starts next kills what is left before it recovers the session. The call
// (not replay-safe) is settled "interrupted; may or may not have run".
func TestMCPStdioServerDiesWithItsWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts workers and MCP servers as subprocesses")
	}
	for _, withReaper := range []bool{false, true} {
		name := "kill -9 of the worker"
		if withReaper {
			name += " and its reaper"
		}
		t.Run(name, func(t *testing.T) {
			e := newCrashEnv(t)
			events := filepath.Join(t.TempDir(), "events")
			def := mcpStdioCrashDef(t, events)
			spec := e.spec("w1", def, false, nil).withShell() // the worker's process trees, recorded
			first := startChild(t, spec)
			ref := e.send(t, def.Name, "s1", "go")
			pids := serverPids(t, events)
			for _, p := range pids {
				if !procAlive(p) {
					t.Fatalf("process %d of the MCP server is not running", p)
				}
			}
			if withReaper {
				recs, err := filepath.Glob(filepath.Join(spec.WorkDir, ".trees", "*.json"))
				if err != nil || len(recs) != 1 {
					t.Fatalf("tree records: %v, %v", recs, err)
				}
				rec, err := proctree.ReadRecord(recs[0])
				if err != nil {
					t.Fatal(err)
				}
				_ = first.cmd.Process.Signal(syscall.SIGSTOP)
				_ = syscall.Kill(rec.Reaper.Pid, syscall.SIGKILL)
				first.kill()
				natstest.WaitFor(t, 10*time.Second, func() error {
					if procAlive(rec.Reaper.Pid) {
						return fmt.Errorf("reaper %d still runs", rec.Reaper.Pid)
					}
					return nil
				})
				// The server's child runs on, with nobody to stop it but
				// the next worker.
				if !procAlive(pids[1]) {
					t.Fatal("nothing of the MCP server outlived worker and reaper: the test shows nothing")
				}
			} else {
				first.kill()
				natstest.WaitFor(t, 10*time.Second, func() error {
					for _, p := range pids {
						if procAlive(p) {
							return fmt.Errorf("process %d of the MCP server outlived its worker", p)
						}
					}
					return nil
				})
			}
			second := startChild(t, e.spec("w2", def, false, nil).withShell())
			tr := e.waitDone(t, ref, first, second)
			for _, p := range pids {
				if procAlive(p) {
					t.Errorf("process %d of the MCP server still runs after its session was recovered:\n%s", p, second.output())
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
			if n := mcptest.CountEvents(events, "done", "slow"); n != 0 {
				t.Errorf("slow ran to its end %d times", n)
			}
			_ = os.Remove(events)
		})
	}
}
