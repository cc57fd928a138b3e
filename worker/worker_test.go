package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/worker"
)

// defs is a fixed set of definitions.
type defs map[string]policies.Definition

func (d defs) Get(_ context.Context, agent string) (policies.Definition, error) {
	def, ok := d[agent]
	if !ok {
		return policies.Definition{}, fmt.Errorf("agent %q: %w", agent, worker.ErrNotFound)
	}
	if def.Version == 0 {
		def.Version = 1
	}
	return def, nil
}

// ledger is a tool that appends its call id to a file: it shows how often
// each call ran.
type ledger struct {
	path       string
	replaySafe bool
	mu         sync.Mutex
}

func (l *ledger) Spec() tools.Spec {
	return tools.Spec{Name: "ledger", Description: "append a line", Schema: json.RawMessage(`{"type":"object"}`), ReplaySafe: l.replaySafe, State: tools.Resource}
}

func (l *ledger) Call(_ context.Context, c tools.Call) (tools.Result, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.OpenFile(l.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return tools.Result{}, err
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, c.ID); err != nil {
		return tools.Result{}, err
	}
	return tools.Result{Content: "appended " + c.ID}, nil
}

func (l *ledger) lines(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(l.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// env is a provisioned server and a connection to it.
type env struct {
	url   string
	js    jetstream.JetStream
	names streams.Names
}

func setup(t *testing.T) *env {
	t.Helper()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	return &env{url: srv.ClientURL(), js: js, names: streams.Default()}
}

// start runs a worker until the test ends.
func (e *env) start(t *testing.T, cfg worker.Config) *worker.Worker {
	t.Helper()
	if cfg.ID == "" {
		cfg.ID = "w1"
	}
	if cfg.WorkDir == "" {
		cfg.WorkDir = t.TempDir()
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := worker.New(ctx, e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker %s: %v", cfg.ID, err)
		}
	})
	return w
}

func (e *env) ref(t *testing.T, agent, session string) streams.SessionRef {
	t.Helper()
	r, err := streams.NewSessionRef(agent, session)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (e *env) send(t *testing.T, ref streams.SessionRef, text string) uint64 {
	t.Helper()
	seq, err := worker.Send(context.Background(), e.js, e.names, ref, worker.Request{Text: text})
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// waitStatus waits until the session's state has status and returns its
// transcript.
func (e *env) waitStatus(t *testing.T, ref streams.SessionRef, want worker.Status) worker.Transcript {
	t.Helper()
	var tr worker.Transcript
	natstest.WaitFor(t, 30*time.Second, func() error {
		var err error
		tr, err = worker.Show(context.Background(), e.js, e.names, ref)
		if err != nil {
			return err
		}
		if tr.Status != want {
			return fmt.Errorf("status %s (%s), want %s", tr.Status, tr.Reason, want)
		}
		return nil
	})
	return tr
}

func scripted(script ...policies.ScriptEntry) policies.Model {
	return policies.Model{Provider: "scripted", Script: script}
}

func callLedger(text string) policies.ScriptEntry {
	return policies.ScriptEntry{Text: text, ToolCalls: []policies.ScriptToolCall{{Name: "ledger", Args: map[string]any{"note": text}}}}
}

func kinds(tr worker.Transcript) string {
	var ks []string
	for _, e := range tr.Transcript {
		ks = append(ks, string(e.Kind))
	}
	return strings.Join(ks, ",")
}

// checkCalls asserts every tool call has exactly one result.
func checkCalls(t *testing.T, tr worker.Transcript) {
	t.Helper()
	results := map[string]int{}
	for _, e := range tr.Transcript {
		if e.Kind == worker.KindToolResult {
			results[e.CallID]++
		}
	}
	for _, e := range tr.Transcript {
		if e.Kind == worker.KindToolCall && results[e.CallID] != 1 {
			t.Errorf("call %s has %d results", e.CallID, results[e.CallID])
		}
	}
}

func TestRunToDone(t *testing.T) {
	e := setup(t)
	led := &ledger{path: filepath.Join(t.TempDir(), "ledger")}
	d := defs{"demo": {Name: "demo", Tools: []string{"ledger"}, Model: scripted(
		callLedger("Looking."),
		policies.ScriptEntry{Text: "LGTM.", Usage: policies.Usage{InputTokens: 100, OutputTokens: 10}},
	)}}
	e.start(t, worker.Config{Definitions: d, Tools: worker.ToolMap{"ledger": led}, Agents: []string{"demo"}})
	ref := e.ref(t, "demo", "octo/repo#1")
	e.send(t, ref, "hello")
	tr := e.waitStatus(t, ref, worker.StatusDone)
	if got, want := kinds(tr), "user,assistant,tool_call,tool_result,assistant"; got != want {
		t.Fatalf("transcript kinds %s, want %s", got, want)
	}
	if tr.Transcript[0].Text != "hello" || tr.Transcript[4].Text != "LGTM." {
		t.Fatalf("transcript texts: %+v", tr.Transcript)
	}
	if tr.Budget.Usage.Turns != 2 || tr.Budget.Usage.Tokens != 110 {
		t.Fatalf("usage %+v", tr.Budget.Usage)
	}
	checkCalls(t, tr)
	if got := led.lines(t); len(got) != 1 {
		t.Fatalf("ledger %v, want one line", got)
	}

	// A second message continues the session with another run.
	e.send(t, ref, "again")
	natstest.WaitFor(t, 30*time.Second, func() error {
		tr, _ = worker.Show(context.Background(), e.js, e.names, ref)
		if tr.Status != worker.StatusDone || len(tr.Transcript) < 7 {
			return fmt.Errorf("status %s with %d entries", tr.Status, len(tr.Transcript))
		}
		return nil
	})
	list, err := worker.List(context.Background(), e.js, e.names)
	if err != nil || len(list) != 1 || list[0].Session != "octo/repo#1" || list[0].Turns != 3 {
		t.Fatalf("list = %+v, %v", list, err)
	}
}
