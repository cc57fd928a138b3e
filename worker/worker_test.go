package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetloop/jetloop/internal/logtest"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
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
	if cfg.Log == nil {
		// Every line is held to one attribute a key.
		h := logtest.New(t, nil, slog.LevelDebug)
		t.Cleanup(h.Stop)
		cfg.Log = slog.New(h)
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
func (e *env) waitStatus(t *testing.T, ref streams.SessionRef, want record.Status) record.Transcript {
	t.Helper()
	var tr record.Transcript
	natstest.WaitFor(t, 30*time.Second, func() error {
		var err error
		tr, err = record.Show(context.Background(), e.js, e.names, ref)
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

func kinds(tr record.Transcript) string {
	var ks []string
	for _, e := range tr.Transcript {
		ks = append(ks, string(e.Kind))
	}
	return strings.Join(ks, ",")
}

// checkCalls asserts every tool call has exactly one result.
func checkCalls(t *testing.T, tr record.Transcript) {
	t.Helper()
	results := map[string]int{}
	for _, e := range tr.Transcript {
		if e.Kind == record.KindToolResult {
			results[e.CallID]++
		}
	}
	for _, e := range tr.Transcript {
		if e.Kind == record.KindToolCall && results[e.CallID] != 1 {
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
	tr := e.waitStatus(t, ref, record.StatusDone)
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
		tr, _ = record.Show(context.Background(), e.js, e.names, ref)
		if tr.Status != record.StatusDone || len(tr.Transcript) < 7 {
			return fmt.Errorf("status %s with %d entries", tr.Status, len(tr.Transcript))
		}
		return nil
	})
	list, err := record.List(context.Background(), e.js, e.names)
	if err != nil || len(list) != 1 || list[0].Session != "octo/repo#1" || list[0].Turns != 3 {
		t.Fatalf("list = %+v, %v", list, err)
	}
}

// gated wraps a model so a test can hold a call in flight.
type gated struct {
	inner   model.Model
	calling chan struct{} // receives when a call starts
	release chan struct{} // a call returns once this is closed
	calls   atomic.Int64  // calls made
}

func (g *gated) Complete(ctx context.Context, req model.Request) (model.Response, error) {
	g.calls.Add(1)
	select {
	case g.calling <- struct{}{}:
	default:
	}
	select {
	case <-g.release:
	case <-ctx.Done():
		return model.Response{}, ctx.Err()
	}
	return g.inner.Complete(ctx, req)
}

func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// TestStaleWorkerFenced takes a session away from a worker while its model
// call is in flight, as a successor would after the worker's lease lapsed:
// the worker's state write is refused (it is fenced); the answer it
// created under the reserved id belongs to no transcript until the
// session comes back and recovery finds it stored whole and adopts it:
// the call is not made (nor paid for) again.
func TestStaleWorkerFenced(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	g := &gated{calling: make(chan struct{}, 1), release: make(chan struct{})}
	def := policies.Definition{Name: "demo", Model: scripted(policies.ScriptEntry{Text: "hi"})}
	reg := prometheus.NewRegistry()
	m := worker.NewMetrics()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	e.start(t, worker.Config{Definitions: defs{"demo": def}, Agents: []string{"demo"}, Metrics: m,
		Models: func(spec policies.Model) (model.Model, error) {
			inner, err := model.NewScripted(spec)
			g.inner = inner
			return g, err
		}})
	ref := e.ref(t, "demo", "s1")
	e.send(t, ref, "hello")
	<-g.calling

	// A successor takes the lease and claims the state.
	leases, _ := e.js.KeyValue(ctx, e.names.BucketLeases())
	sessions, _ := e.js.KeyValue(ctx, e.names.BucketSessions())
	if err := leases.Purge(ctx, e.names.LeaseKey(ref)); err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Create(ctx, e.names.LeaseKey(ref), []byte(`{"owner":"successor"}`), jetstream.KeyTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	kve, err := sessions.Get(ctx, e.names.StateKey(ref))
	if err != nil {
		t.Fatal(err)
	}
	var st record.State
	if err := json.Unmarshal(kve.Value(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Pending == nil || st.Pending.Kind != record.StepModel {
		t.Fatalf("state during the call has no model intent: %+v", st)
	}
	st.Owner, st.Epoch = "successor", st.Epoch+1
	b, _ := json.Marshal(st)
	claimed, err := sessions.Update(ctx, e.names.StateKey(ref), b, kve.Revision())
	if err != nil {
		t.Fatal(err)
	}

	close(g.release)
	natstest.WaitFor(t, 30*time.Second, func() error {
		if v := metricValue(t, reg, "jetloop_worker_fenced_total"); v != 1 {
			return fmt.Errorf("fenced_total %v", v)
		}
		return nil
	})
	// The fenced worker's state write lost.
	kve, err = sessions.Get(ctx, e.names.StateKey(ref))
	if err != nil || kve.Revision() != claimed {
		t.Fatalf("state revision %d after the fenced settlement, want %d (err %v)", kve.Revision(), claimed, err)
	}

	// The successor goes away; the session comes back and is recovered.
	if err := leases.Purge(ctx, e.names.LeaseKey(ref)); err != nil {
		t.Fatal(err)
	}
	tr := e.waitStatus(t, ref, record.StatusDone)
	if got, want := kinds(tr), "user,assistant"; got != want {
		t.Fatalf("transcript %s, want %s", got, want)
	}
	if tr.Budget.Usage.UnknownUsageCalls != 0 || tr.Budget.Usage.Turns != 1 || g.calls.Load() != 1 {
		t.Fatalf("usage %+v after %d model calls: want the stored answer adopted, one call", tr.Budget.Usage, g.calls.Load())
	}
	if v := metricValue(t, reg, "jetloop_worker_recoveries_total"); v != 1 {
		t.Errorf("recoveries_total %v, want 1 (adopt)", v)
	}
}

// TestLoopingAgentStopsAtTurnCeiling runs an agent whose model calls a
// tool forever: the run ends as budget_exceeded at max_turns, every call
// answered; the session is not over: a later event starts a run with a
// fresh budget, which stops at the ceiling again.
func TestLoopingAgentStopsAtTurnCeiling(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	led := &ledger{path: filepath.Join(t.TempDir(), "ledger")}
	loop := callLedger("again")
	def := policies.Definition{Name: "looper", Tools: []string{"ledger"}, Budget: policies.Budget{MaxTurns: 3},
		Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{loop}, Then: &loop}}
	statuses, err := e.js.Conn().SubscribeSync(e.names.StatusAll())
	if err != nil {
		t.Fatal(err)
	}
	e.start(t, worker.Config{Definitions: defs{"looper": def}, Tools: worker.ToolMap{"ledger": led}, Agents: []string{"looper"}})
	ref := e.ref(t, "looper", "s1")
	e.send(t, ref, "go")
	tr := e.waitStatus(t, ref, record.StatusBudgetExceeded)
	if !strings.Contains(tr.Reason, "max_turns 3") || tr.Budget.Usage.Turns != 3 || tr.Budget.Run.Turns != 3 {
		t.Fatalf("reason %q, turns %d, run turns %d", tr.Reason, tr.Budget.Usage.Turns, tr.Budget.Run.Turns)
	}
	checkCalls(t, tr)
	if n := len(led.lines(t)); n != 3 {
		t.Fatalf("tool ran %d times, want 3", n)
	}
	nextStatus := func() string {
		t.Helper()
		m, err := statuses.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("status message: %v", err)
		}
		var ch worker.StatusChange
		if err := json.Unmarshal(m.Data, &ch); err != nil {
			t.Fatal(err)
		}
		return string(ch.Status)
	}
	if seen := nextStatus() + "," + nextStatus(); seen != "working,budget_exceeded" {
		t.Fatalf("status messages %v", seen)
	}

	// A new event runs again, with a budget of its own.
	e.send(t, ref, "more")
	if seen := nextStatus() + "," + nextStatus(); seen != "working,budget_exceeded" {
		t.Fatalf("status messages of the second run %v", seen)
	}
	tr, err = record.Show(ctx, e.js, e.names, ref)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Budget.Usage.Turns != 6 || tr.Budget.Run.Turns != 3 || tr.Status != record.StatusBudgetExceeded {
		t.Fatalf("after the second run: %s, lifetime turns %d, run turns %d", tr.Status, tr.Budget.Usage.Turns, tr.Budget.Run.Turns)
	}
	checkCalls(t, tr)
	if n := len(led.lines(t)); n != 6 {
		t.Fatalf("tool ran %d times, want 6", n)
	}
	audit, err := e.js.Stream(ctx, e.names.StreamAudit())
	if err != nil {
		t.Fatal(err)
	}
	info, err := audit.Info(ctx)
	if err != nil || info.State.Msgs != 4 {
		t.Fatalf("audit records: %+v %v", info.State, err)
	}
}

// TestBudgetIsPerRun sends three messages to one session whose runs each
// take two turns and 200 tokens, under a budget of 2 turns and 250
// tokens: every run finishes, though the session's totals pass both
// limits; status and show report both the totals and the last run.
func TestBudgetIsPerRun(t *testing.T) {
	e := setup(t)
	led := &ledger{path: filepath.Join(t.TempDir(), "ledger")}
	use := policies.Usage{InputTokens: 90, OutputTokens: 10}
	call := callLedger("Noting.")
	call.Usage = use
	answer := policies.ScriptEntry{Text: "Noted.", Usage: use}
	def := policies.Definition{Name: "demo", Tools: []string{"ledger"}, Budget: policies.Budget{MaxTurns: 2, MaxTokens: 250},
		Model: scripted(call, answer, call, answer, call, answer)}
	e.start(t, worker.Config{Definitions: defs{"demo": def}, Tools: worker.ToolMap{"ledger": led}, Agents: []string{"demo"}})
	ref := e.ref(t, "demo", "s1")
	for i := range 3 {
		e.send(t, ref, fmt.Sprintf("message %d", i+1))
		natstest.WaitFor(t, 30*time.Second, func() error {
			tr, err := record.Show(context.Background(), e.js, e.names, ref)
			if err != nil {
				return err
			}
			if tr.Status == record.StatusBudgetExceeded {
				t.Fatalf("run %d: %s", i+1, tr.Reason)
			}
			if tr.Status != record.StatusDone || tr.Budget.Usage.Turns != 2*(i+1) {
				return fmt.Errorf("status %s after %d turns", tr.Status, tr.Budget.Usage.Turns)
			}
			return nil
		})
	}
	tr, err := record.Show(context.Background(), e.js, e.names, ref)
	if err != nil {
		t.Fatal(err)
	}
	if u, r := tr.Budget.Usage, tr.Budget.Run; u.Tokens != 600 || r.Turns != 2 || r.Tokens != 200 || r.Started.IsZero() {
		t.Fatalf("usage %+v, run %+v", u, r)
	}
	list, err := record.List(context.Background(), e.js, e.names)
	if err != nil || len(list) != 1 || list[0].Turns != 6 || list[0].Tokens != 600 || list[0].RunTurns != 2 || list[0].RunTokens != 200 {
		t.Fatalf("status list %+v, %v", list, err)
	}
}

// asker blocks the session with a question, as ask_human does.
type asker struct{}

func (asker) Spec() tools.Spec {
	return tools.Spec{Name: "ask", Description: "ask a person", Schema: json.RawMessage(`{"type":"object"}`), ReplaySafe: true, State: tools.Stateless}
}

func (asker) Call(_ context.Context, c tools.Call) (tools.Result, error) {
	var a struct{ Question string }
	_ = json.Unmarshal(c.Args, &a)
	return tools.Result{Content: a.Question, Block: true}, nil
}

// TestBlockedSessionWaitsForHuman parks a session on a question: status
// blocked with what it waits for, no result for the call yet, and nothing
// held by the worker; a later event joins the transcript without a run.
func TestBlockedSessionWaitsForHuman(t *testing.T) {
	e := setup(t)
	def := policies.Definition{Name: "asker", Tools: []string{"ask"}, Model: scripted(
		policies.ScriptEntry{Text: "Let me ask.", ToolCalls: []policies.ScriptToolCall{{Name: "ask", Args: map[string]any{"question": "Deploy to prod?"}}}},
		policies.ScriptEntry{Text: "Deployed."},
	)}
	e.start(t, worker.Config{Definitions: defs{"asker": def}, Tools: worker.ToolMap{"ask": asker{}}, Agents: []string{"asker"}})
	ref := e.ref(t, "asker", "s1")
	e.send(t, ref, "ship it")
	tr := e.waitStatus(t, ref, record.StatusBlocked)
	if tr.WaitingFor != "Deploy to prod?" || kinds(tr) != "user,assistant,tool_call,system" {
		t.Fatalf("blocked session: waiting for %q, transcript %s", tr.WaitingFor, kinds(tr))
	}
	list, err := record.List(context.Background(), e.js, e.names)
	if err != nil || len(list) != 1 || list[0].WaitingFor != "Deploy to prod?" || list[0].Status != record.StatusBlocked {
		t.Fatalf("status list %+v %v", list, err)
	}
	e.send(t, ref, "also: today")
	natstest.WaitFor(t, 30*time.Second, func() error {
		tr, _ = record.Show(context.Background(), e.js, e.names, ref)
		if kinds(tr) != "user,assistant,tool_call,system,user" || tr.Status != record.StatusBlocked {
			return fmt.Errorf("status %s transcript %s", tr.Status, kinds(tr))
		}
		return nil
	})
}

// TestDeadlineStopsRun ends a run whose model call outlasts the deadline.
func TestDeadlineStopsRun(t *testing.T) {
	e := setup(t)
	slow := policies.ScriptEntry{Text: "slow", Delay: policies.Duration(time.Minute)}
	def := policies.Definition{Name: "slow", Budget: policies.Budget{Deadline: policies.Duration(300 * time.Millisecond)}, Model: scripted(slow)}
	e.start(t, worker.Config{Definitions: defs{"slow": def}, Agents: []string{"slow"}})
	ref := e.ref(t, "slow", "s1")
	e.send(t, ref, "hurry")
	tr := e.waitStatus(t, ref, record.StatusBudgetExceeded)
	if !strings.Contains(tr.Reason, "deadline 300ms") || tr.Pending != nil || kinds(tr) != "user,system" {
		t.Fatalf("reason %q, pending %+v, transcript %s", tr.Reason, tr.Pending, kinds(tr))
	}
}

// fixedCalls is a model whose first answer makes the given tool calls
// and whose later answers end the run.
type fixedCalls struct {
	mu    sync.Mutex
	calls []model.ToolCall
	n     int
}

func (f *fixedCalls) Complete(context.Context, model.Request) (model.Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if f.n == 1 {
		return model.Response{Text: "Several.", ToolCalls: f.calls}, nil
	}
	return model.Response{Text: "Done."}, nil
}

// TestDuplicateCallIDsInOneAnswer runs an answer whose tool calls share
// an id, and one whose id is what the worker would generate for another:
// every call gets an id of its own and exactly one result.
func TestDuplicateCallIDsInOneAnswer(t *testing.T) {
	e := setup(t)
	led := &ledger{path: filepath.Join(t.TempDir(), "ledger")}
	// Entries: 1 user, 2 assistant, 3-5 the calls: call_4 is the id the
	// second call would be given.
	m := &fixedCalls{calls: []model.ToolCall{
		{ID: "dup", Name: "ledger", Args: json.RawMessage(`{"n":1}`)},
		{ID: "dup", Name: "ledger", Args: json.RawMessage(`{"n":2}`)},
		{ID: "call_4", Name: "ledger", Args: json.RawMessage(`{"n":3}`)},
	}}
	def := policies.Definition{Name: "demo", Tools: []string{"ledger"}, Model: scripted(policies.ScriptEntry{Text: "unused"})}
	e.start(t, worker.Config{Definitions: defs{"demo": def}, Tools: worker.ToolMap{"ledger": led}, Agents: []string{"demo"},
		Models: func(policies.Model) (model.Model, error) { return m, nil }})
	ref := e.ref(t, "demo", "s1")
	e.send(t, ref, "go")
	tr := e.waitStatus(t, ref, record.StatusDone)
	checkCalls(t, tr)
	seen := map[string]bool{}
	for _, en := range tr.Transcript {
		if en.Kind != record.KindToolCall {
			continue
		}
		if seen[en.CallID] {
			t.Errorf("call id %s used twice: %s", en.CallID, kinds(tr))
		}
		seen[en.CallID] = true
	}
	if len(seen) != 3 || !seen["dup"] || !seen["call_4"] {
		t.Errorf("call ids %v", seen)
	}
	if n := len(led.lines(t)); n != 3 {
		t.Errorf("tool ran %d times, want 3", n)
	}
}
