package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
)

// statusJSON is one row of `jetloop status --json`.
type statusJSON struct {
	Agent      string    `json:"agent"`
	Session    string    `json:"session"`
	Status     string    `json:"status"`
	Since      time.Time `json:"since"`
	WaitingFor string    `json:"waiting_for"`
	Parent     string    `json:"parent"`
}

// waitBlocked waits until `jetloop status --json` shows ref blocked and
// returns its row.
func waitBlocked(t *testing.T, bin, url, agent, session string) statusJSON {
	t.Helper()
	var row statusJSON
	natstest.WaitFor(t, time.Minute, func() error {
		out, err := jetloopCmd(t, bin, "status", "--server", url, "--json", "--agent", agent)
		if err != nil {
			return err
		}
		var rows []statusJSON
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			return fmt.Errorf("status --json: %w\n%s", err, out)
		}
		for _, r := range rows {
			if r.Session == session {
				row = r
				if r.Status != "blocked" {
					return fmt.Errorf("%s/%s is %s", agent, session, r.Status)
				}
				return nil
			}
		}
		return fmt.Errorf("no %s/%s in %s", agent, session, out)
	})
	return row
}

func waitShow(t *testing.T, bin, url, ref, status string) showJSON {
	t.Helper()
	var s showJSON
	natstest.WaitFor(t, time.Minute, func() error {
		var err error
		if s, err = show(t, bin, url, ref); err != nil {
			return err
		}
		if s.Status != status {
			return fmt.Errorf("%s is %s, want %s", ref, s.Status, status)
		}
		return nil
	})
	return s
}

// TestDevApprovalGateAndFork is issue 5's third acceptance point, and
// fork through the CLI: an approval gate blocks a shell call until
// `jetloop approve`, then the call runs exactly once, and `jetloop status
// --json` shows waiting_for meanwhile; `jetloop fork --at 0` starts a new
// session from the first message, which records its parent, meets the
// gate again, and is answered by `jetloop deny`.
func TestDevApprovalGateAndFork(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop")
	}
	bin := buildJetloop(t)
	data, work := t.TempDir(), t.TempDir()
	t.Setenv("JETLOOP_WORK_DIR", work)
	p := startProc(t, bin, devArgs(data)...)
	url := p.waitReady(time.Minute)["nats"]
	putAgent(t, url, policies.Definition{
		Name: "gated", Tools: []string{"shell"},
		Approvals: []policies.Approval{{Name: "shell", When: `tool.name == "shell"`}},
		Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{
			{Text: "Writing.", ToolCalls: []policies.ScriptToolCall{{Name: "shell", Args: map[string]any{"command": "echo ran >> ledger.txt"}}}},
			{Text: "Done."},
		}},
	})
	if _, err := jetloopCmd(t, bin, "send", "--server", url, "gated", "s1", "write it"); err != nil {
		t.Fatal(err)
	}
	row := waitBlocked(t, bin, url, "gated", "s1")
	if row.WaitingFor == "" || row.Since.IsZero() {
		t.Fatalf("status row %+v", row)
	}
	ledger := filepath.Join(work, "gated", "s1", "ledger.txt")
	if _, err := os.Stat(ledger); !os.IsNotExist(err) {
		t.Fatalf("the gated call ran before approval: %v", err)
	}
	if _, err := jetloopCmd(t, bin, "approve", "--server", url, "gated/s1", row.WaitingFor); err != nil {
		t.Fatal(err)
	}
	waitShow(t, bin, url, "gated/s1", "done")
	if b, err := os.ReadFile(ledger); err != nil || strings.Count(string(b), "ran") != 1 {
		t.Fatalf("ledger %q, %v: want one run", b, err)
	}

	if _, err := jetloopCmd(t, bin, "fork", "--server", url, "gated/s1", "--at", "0", "--as", "s1-again"); err != nil {
		t.Fatal(err)
	}
	child := waitBlocked(t, bin, url, "gated", "s1-again")
	if child.Parent != "s1" {
		t.Fatalf("forked session's row %+v", child)
	}
	if _, err := jetloopCmd(t, bin, "deny", "--server", url, "gated/s1-again", child.WaitingFor, "not twice"); err != nil {
		t.Fatal(err)
	}
	s := waitShow(t, bin, url, "gated/s1-again", "done")
	var raw map[string]any
	out, err := jetloopCmd(t, bin, "show", "--server", url, "--json", "gated/s1-again")
	if err != nil || json.Unmarshal([]byte(out), &raw) != nil || raw["parent"] != "s1" {
		t.Fatalf("show --json of the fork: parent %v (%v)", raw["parent"], err)
	}
	denied := 0
	for _, e := range s.Transcript {
		if e["kind"] == "tool_result" && e["is_error"] == true && strings.Contains(fmt.Sprint(e["result"]), "denied: not twice") {
			denied++
		}
	}
	if denied != 1 {
		t.Fatalf("fork transcript has %d denials: %v", denied, s.Transcript)
	}
	if _, err := os.Stat(filepath.Join(work, "gated", "s1-again", "ledger.txt")); !os.IsNotExist(err) {
		t.Fatalf("the denied call ran: %v", err)
	}
	// The original is as it was.
	orig := waitShow(t, bin, url, "gated/s1", "done")
	if len(orig.Transcript) != 7 {
		t.Fatalf("original transcript changed: %v", orig.Transcript)
	}
}
