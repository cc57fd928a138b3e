package cli_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/natstest"
)

// TestApplyStartsStdioServersAsRecordedTrees: the stdio MCP server apply
// starts to record its catalog runs as a process tree recorded under the
// work folder, like the workers' tool processes, so the next worker
// sweeps what it left if the process and the tree's reaper die with -9
// meanwhile.
func TestApplyStartsStdioServersAsRecordedTrees(t *testing.T) {
	work := t.TempDir()
	natsURL, _, _ := runDev(t, map[string]string{"JETLOOP_WORK_DIR": work})
	dir := t.TempDir()
	file := filepath.Join(dir, "agent.yaml")
	// A server that never answers initialize: admission waits for it
	// until its timeout.
	def := `name: slowmcp
model: {provider: scripted}
mcp_servers:
  - {name: srv, command: [sh, -c, "sleep 1000"], tools: [echo], timeout: 10s}
`
	if err := os.WriteFile(file, []byte(def), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	var out string
	go func() {
		code, o, e := run(t, nil, "apply", file, "--server", natsURL)
		out = o + e
		done <- code
	}()
	natstest.WaitFor(t, 30*time.Second, func() error {
		recs, err := filepath.Glob(filepath.Join(work, ".trees", "*.json"))
		if err != nil {
			return err
		}
		select {
		case code := <-done:
			done <- code
			return fmt.Errorf("apply ended (exit %d: %s) with no tree recorded under %s", code, out, work)
		default:
		}
		if len(recs) == 0 {
			return errors.New("no tree recorded yet")
		}
		return nil
	})
	select {
	case code := <-done:
		if code == 0 {
			t.Fatal("apply of a server that never answers succeeded")
		}
	case <-time.After(time.Minute):
		t.Fatal("apply did not end after the server's timeout")
	}
}
