package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
)

// jetloopCmd runs a client verb of bin and returns its stdout.
func jetloopCmd(t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("jetloop %s: %w\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// putAgent stores a definition in jl_agents, as `jetloop apply` does.
func putAgent(t *testing.T, url string, def policies.Definition) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	store, err := policies.NewStore(context.Background(), js, streams.Default())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Put(context.Background(), def); err != nil {
		t.Fatal(err)
	}
}

// showJSON is `jetloop show --json` as a script reads it.
type showJSON struct {
	Agent             string `json:"agent"`
	Session           string `json:"session"`
	Status            string `json:"status"`
	DefinitionVersion uint64 `json:"definition_version"`
	Budget            struct {
		Limits map[string]any `json:"limits"`
		Usage  map[string]any `json:"usage"`
	} `json:"budget"`
	Transcript []map[string]any `json:"transcript"`
}

func show(t *testing.T, bin, url, ref string) (showJSON, error) {
	t.Helper()
	out, err := jetloopCmd(t, bin, "show", "--server", url, "--json", ref)
	if err != nil {
		return showJSON{}, err
	}
	var s showJSON
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		return showJSON{}, fmt.Errorf("show --json: %w\n%s", err, out)
	}
	return s, nil
}

// TestDevRunsExampleAndSurvivesKill is the worker's acceptance on
// `jetloop dev`: `jetloop send` to the example agent, whose scripted model
// calls shell and then answers, runs to done and `jetloop show --json` has
// the whole transcript; then kill -9 of `jetloop dev` while a replay-unsafe
// shell call runs, and a restart: the call is not run again, it gets the
// synthetic error result, the session finishes.
func TestDevRunsExampleAndSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop")
	}
	bin := buildJetloop(t)
	data, work := t.TempDir(), t.TempDir()
	t.Setenv("JETLOOP_WORK_DIR", work)
	t.Setenv("JETLOOP_LEASE_TTL", "2s")
	t.Setenv("JETLOOP_ACK_WAIT", "2s")

	p := startProc(t, bin, devArgs(data)...)
	url := p.waitReady(time.Minute)["nats"]

	demo, err := policies.LoadFile("../examples/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	putAgent(t, url, demo.Definition)
	out, err := jetloopCmd(t, bin, "send", "--server", url, "--wait", "--timeout", "1m", "demo", "s1", "hello")
	if err != nil {
		t.Fatalf("%v\ndev stderr:\n%s", err, p.Stderr())
	}
	if !strings.HasPrefix(out, "demo/s1 done") {
		t.Fatalf("send --wait printed %q", out)
	}
	s, err := show(t, bin, url, "demo/s1")
	if err != nil {
		t.Fatal(err)
	}
	var ks []string
	for _, e := range s.Transcript {
		for _, f := range []string{"id", "kind", "turn", "time"} {
			if _, ok := e[f]; !ok {
				t.Errorf("entry %v lacks %q", e, f)
			}
		}
		ks = append(ks, e["kind"].(string))
		if e["kind"] == "tool_result" && (e["is_error"] != false || !strings.Contains(e["result"].(string), "noted")) {
			t.Errorf("shell result %v", e)
		}
	}
	if s.Agent != "demo" || s.Session != "s1" || s.Status != "done" || s.DefinitionVersion == 0 ||
		s.Budget.Limits["max_turns"] != float64(8) || s.Budget.Usage["turns"] != float64(2) ||
		strings.Join(ks, ",") != "user,assistant,tool_call,tool_result,assistant" {
		t.Fatalf("show --json = %+v", s)
	}

	// A replay-unsafe call in flight when dev is killed.
	putAgent(t, url, policies.Definition{
		Name: "slow", Tools: []string{"shell"},
		Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{
			{Text: "Working.", ToolCalls: []policies.ScriptToolCall{{Name: "shell", Args: map[string]any{
				"command": "echo start >> ledger.txt; sleep 20; echo end >> ledger.txt"}}}},
			{Text: "Finished."},
		}},
	})
	if _, err := jetloopCmd(t, bin, "send", "--server", url, "slow", "s1", "go"); err != nil {
		t.Fatal(err)
	}
	ledgerPath := filepath.Join(work, "slow", "s1", "ledger.txt")
	natstest.WaitFor(t, time.Minute, func() error {
		b, err := os.ReadFile(ledgerPath)
		if err != nil || !strings.Contains(string(b), "start") {
			return fmt.Errorf("ledger %q: %v", b, err)
		}
		return nil
	})
	_ = p.cmd.Process.Kill()
	_ = p.wait(time.Minute)

	p = startProc(t, bin, devArgs(data)...)
	url = p.waitReady(time.Minute)["nats"]
	var slow showJSON
	natstest.WaitFor(t, time.Minute, func() error {
		var err error
		slow, err = show(t, bin, url, "slow/s1")
		if err != nil {
			return err
		}
		if slow.Status != "done" {
			return fmt.Errorf("status %s", slow.Status)
		}
		return nil
	})
	results := 0
	for _, e := range slow.Transcript {
		if e["kind"] == "tool_result" {
			results++
			if e["is_error"] != true || e["result"] != "interrupted; may or may not have run" {
				t.Errorf("interrupted shell call's result: %v", e)
			}
		}
	}
	if results != 1 {
		t.Errorf("%d results, want 1: %v", results, slow.Transcript)
	}
	b, _ := os.ReadFile(ledgerPath)
	if got := strings.Count(string(b), "start"); got != 1 {
		t.Errorf("shell call ran %d times (ledger %q)", got, b)
	}
}
