package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/internal/natstest"
	jlledger "github.com/jetloop/jetloop/ledger"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/schedule"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/worker"
)

// holder is a tool whose calls in a session wait until the test lets
// that session go; every result is 20 KB, so it goes to jl_blobs.
type holder struct {
	mu   sync.Mutex
	held map[string]chan struct{}
}

func (h *holder) gate(session string) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held == nil {
		h.held = map[string]chan struct{}{}
	}
	c, ok := h.held[session]
	if !ok {
		c = make(chan struct{})
		h.held[session] = c
	}
	return c
}

func (h *holder) Spec() tools.Spec {
	return tools.Spec{Name: "hold", Description: "wait", Schema: json.RawMessage(`{"type":"object"}`), ReplaySafe: true, State: tools.Stateless}
}

func (h *holder) Call(ctx context.Context, c tools.Call) (tools.Result, error) {
	select {
	case <-h.gate(c.Session):
	case <-ctx.Done():
		return tools.Result{}, ctx.Err()
	}
	return tools.Result{Content: strings.Repeat("measured; ", 2048)}, nil
}

func (h *holder) release(session string) { close(h.gate(session)) }

// sessionKeys lists a session's keys in jl_sessions.
func sessionKeys(t *testing.T, kv jetstream.KeyValue, ref streams.SessionRef) []string {
	t.Helper()
	ks, err := kv.ListKeysFiltered(context.Background(), streams.Default().SessionKeys(ref))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for k := range ks.Keys() {
		out = append(out, k)
	}
	return out
}

// Retention removes sessions at rest past max_age or beyond max_count,
// with every record they have, and never touches one that is working,
// blocked or paused, or that has input it has not consumed.
func TestRetentionNeverTouchesRunningOrWaitingSessions(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	kv, err := e.js.KeyValue(ctx, e.names.BucketSessions())
	if err != nil {
		t.Fatal(err)
	}
	obs, err := e.js.ObjectStore(ctx, e.names.ObjectBlobs())
	if err != nil {
		t.Fatal(err)
	}
	h := &holder{}
	reg, err := tools.NewRegistry(tools.RegistryOptions{Blobs: obs}, append(tools.Builtins(tools.BuiltinConfig{Blobs: obs, Sessions: kv}), h)...)
	if err != nil {
		t.Fatal(err)
	}
	hold := policies.ScriptToolCall{Name: "hold"}
	ask := policies.ScriptToolCall{Name: "ask_human", Args: map[string]any{"question": "go on?"}}
	d := defs{
		"ret": {Name: "ret", Tools: []string{"hold", "ask_human"}, Model: scripted(
			policies.ScriptEntry{Text: "measuring", ToolCalls: []policies.ScriptToolCall{hold}},
			policies.ScriptEntry{Text: "asking", ToolCalls: []policies.ScriptToolCall{ask}},
			policies.ScriptEntry{Text: "done"},
		), Retention: &policies.Retention{MaxAge: policies.Duration(time.Hour)}},
		"cnt": {Name: "cnt", Model: scripted(policies.ScriptEntry{Text: "ok"}), Retention: &policies.Retention{MaxCount: 2}},
	}
	cfg := worker.Config{Definitions: d, Tools: worker.RegistryTools(reg), Agents: []string{"ret", "cnt"}, RetentionInterval: -1, ShutdownGrace: 200 * time.Millisecond}
	runCtx, stopRun := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	cfg.ID, cfg.WorkDir = "w1", t.TempDir()
	w1, err := worker.New(ctx, e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	go func() { runDone <- w1.Run(runCtx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopRun()
			if err := <-runDone; err != nil {
				t.Errorf("worker: %v", err)
			}
		}
	}
	t.Cleanup(stop)

	ref := func(s string) streams.SessionRef { return e.ref(t, "ret", s) }
	// done: measured, asked, answered.
	for _, s := range []string{"done", "done-later", "blocked", "cancelled"} {
		h.release(s)
		e.send(t, ref(s), "check")
		e.waitStatus(t, ref(s), record.StatusBlocked)
	}
	for _, s := range []string{"done", "done-later"} {
		publish(t, e, ref(s), control.Message{Verb: control.Resume, Text: "yes"})
		e.waitStatus(t, ref(s), record.StatusDone)
	}
	publish(t, e, ref("cancelled"), control.Message{Verb: control.Cancel})
	e.waitStatus(t, ref("cancelled"), record.StatusCancelled)
	// paused: interrupted while its tool runs.
	e.send(t, ref("paused"), "check")
	waitPending(t, e, ref("paused"))
	publish(t, e, ref("paused"), control.Message{Verb: control.Interrupt})
	h.release("paused")
	e.waitStatus(t, ref("paused"), record.StatusPaused)
	// working: its tool runs on.
	e.send(t, ref("working"), "check")
	waitPending(t, e, ref("working"))
	// Notes, a blob and a lease-free resting state for the one to remove.
	notes, _ := reg.Get("notes_write")
	if res, err := notes.Call(ctx, tools.Call{ID: "n1", Agent: "ret", Session: "done", Args: json.RawMessage(`{"text":"remember"}`)}); err != nil || res.IsError {
		t.Fatalf("notes: %+v %v", res, err)
	}
	done := ref("done")
	before := sessionKeys(t, kv, done)
	// The result's name holds a digest of its content: find it by its
	// call's prefix.
	var blobName string
	if infos, err := obs.List(ctx); err == nil {
		for _, in := range infos {
			if strings.HasPrefix(in.Name, done.Key()+".result.call_0_0.") {
				blobName = in.Name
			}
		}
	}
	if _, err := obs.GetInfo(ctx, blobName); err != nil || len(before) < 8 || !slices.Contains(before, e.names.NotesKey(done)) {
		t.Fatalf("before: blob %s %v, keys %v", blobName, err, before)
	}
	for _, s := range []string{"c1", "c2", "c3"} {
		e.send(t, e.ref(t, "cnt", s), "hi")
		e.waitStatus(t, e.ref(t, "cnt", s), record.StatusDone)
	}

	// A second worker applies retention as of two hours from now, while
	// the first runs "working".
	cfg2 := cfg
	cfg2.ID = "w2"
	w2, err := worker.New(ctx, e.js, cfg2)
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(2 * time.Hour)
	res, err := w2.Retain(ctx, "ret", later)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(res.Removed)
	if !slices.Equal(res.Removed, []string{"cancelled", "done", "done-later"}) || res.Examined != 6 {
		t.Fatalf("removed %v of %d", res.Removed, res.Examined)
	}
	for _, s := range []string{"blocked", "paused", "working"} {
		if _, err := record.Show(ctx, e.js, e.names, ref(s)); err != nil {
			t.Fatalf("%s was touched: %v", s, err)
		}
	}
	if keys := sessionKeys(t, kv, done); len(keys) != 0 {
		t.Fatalf("keys left of a removed session: %v", keys)
	}
	if _, err := obs.GetInfo(ctx, blobName); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Fatalf("blob %s: %v", blobName, err)
	}
	in, _ := e.js.Stream(ctx, e.names.StreamIn())
	if _, err := in.GetLastMsgForSubject(ctx, e.names.In(done)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("events of a removed session: %v", err)
	}
	lkv, _ := e.js.KeyValue(ctx, e.names.BucketLeases())
	if _, err := lkv.Get(ctx, e.names.LeaseKey(done)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("lease of a removed session: %v", err)
	}
	// max_count keeps the two that rested last, whatever their age.
	cres, err := w2.Retain(ctx, "cnt", time.Now())
	if err != nil || !slices.Equal(cres.Removed, []string{"c1"}) {
		t.Fatalf("count: %+v %v", cres, err)
	}

	// The worker stops with "working" mid-call: its intent stays, and so
	// does the session. An event for a resting session that no worker has
	// consumed keeps that one too.
	h.release("working")
	e.waitStatus(t, ref("working"), record.StatusBlocked)
	publish(t, e, ref("working"), control.Message{Verb: control.Resume, Text: "yes"})
	e.waitStatus(t, ref("working"), record.StatusDone)
	stop()
	e.send(t, ref("working"), "again")
	res, err = w2.Retain(ctx, "ret", later)
	if err != nil || len(res.Removed) != 0 || res.Kept != 1 {
		t.Fatalf("with input left: %+v %v", res, err)
	}
	// A removed session's name starts afresh with its next event.
	e.start(t, worker.Config{ID: "w3", Definitions: d, Tools: worker.RegistryTools(reg), Agents: []string{"ret"}, RetentionInterval: -1})
	e.send(t, done, "back")
	tr := e.waitStatus(t, done, record.StatusBlocked)
	if tr.Transcript[0].Text != "back" {
		t.Fatalf("a new session's first entry: %+v", tr.Transcript[0])
	}
}

// waitPending waits until a session has a tool step in flight.
func waitPending(t *testing.T, e *env, ref streams.SessionRef) {
	t.Helper()
	natstest.WaitFor(t, 30*time.Second, func() error {
		st, _, err := loadState(e, ref)
		if err != nil {
			return err
		}
		if st.Pending == nil || st.Pending.Kind != record.StepTool {
			return fmt.Errorf("no tool step in flight (status %s)", st.Status)
		}
		return nil
	})
}

// An ephemeral schedule's sessions (one per tick) are kept to the
// retention's count by the workers' own passes; the schedule's routing
// session and the agent's other sessions are left alone.
func TestRetentionOfEphemeralTicks(t *testing.T) {
	e := setup(t)
	def := monitorDef(policies.Schedule{Name: "drift", Cron: "@every 1s", Session: schedule.Ephemeral}, policies.ScriptEntry{Text: "digest"})
	def.Retention = &policies.Retention{MaxCount: 2, Sessions: policies.RetainEphemeral}
	d := scheduleDefs{defs{def.Name: def}}
	r, err := schedule.NewReconciler(context.Background(), schedule.Config{Names: e.names}, e.js, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	metrics := worker.NewMetrics()
	reg := prometheus.NewRegistry()
	if err := metrics.Register(reg); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"w1", "w2"} {
		e.start(t, worker.Config{ID: id, Definitions: d, Agents: []string{"mon"}, RetentionInterval: 300 * time.Millisecond, Metrics: metrics})
	}
	e.send(t, e.ref(t, "mon", "by-hand"), "hello")
	natstest.WaitFor(t, 60*time.Second, func() error {
		removed := gathered(t, reg, "jetloop_worker_retention_removed_total")
		if removed < 3 {
			return fmt.Errorf("%v removed", removed)
		}
		return nil
	})
	sums, err := record.List(context.Background(), e.js, e.names)
	if err != nil {
		t.Fatal(err)
	}
	var ticks []string
	var others []string
	for _, s := range sums {
		if strings.HasPrefix(s.Session, "drift") && s.Session != "drift" {
			ticks = append(ticks, s.Session)
		} else {
			others = append(others, s.Session)
		}
	}
	// Two kept, perhaps one more that a tick started since the last pass.
	if len(ticks) > 3 || !slices.Contains(others, "drift") || !slices.Contains(others, "by-hand") {
		t.Fatalf("tick sessions %v, others %v", ticks, others)
	}
}

// gathered is the value of a counter in reg, 0 when it has none.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			v := 0.0
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue()
			}
			return v
		}
	}
	return 0
}

// A session at rest that still owes something is kept: a delegated run's
// answer to its parent, the cancels of its children, the result of its
// tick. The worker that runs it next settles the debt; retention takes it
// afterwards.
func TestRetentionKeepsSessionsThatOweSomething(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	store, err := record.Open(ctx, e.js, e.names)
	if err != nil {
		t.Fatal(err)
	}
	rested := time.Now().Add(-2 * time.Hour)
	for name, owe := range map[string]func(*record.State){
		"settled": func(*record.State) {},
		"owes-answer": func(st *record.State) {
			st.Delegation = &record.Delegation{Parent: "ret/parent", CallID: "c1", Event: "ev1", Seq: 1}
			st.InSeq = 1
		},
		"owes-cancels": func(st *record.State) {
			st.Children = []record.Child{{CallID: "c1", Session: "ret/child", Cancel: "the run ended"}}
		},
		"owes-tick-result": func(st *record.State) {
			st.Tick = &record.TickRun{ID: "t1", Schedule: "drift"}
		},
	} {
		st := record.NewState("ret", name, rested)
		st.SetStatus(record.StatusDone, "", rested)
		st.RunEnded, st.Updated = rested, rested
		owe(&st)
		if _, err := store.Create(ctx, e.ref(t, "ret", name), st); err != nil {
			t.Fatal(err)
		}
	}
	d := defs{"ret": {Name: "ret", Model: scripted(policies.ScriptEntry{Text: "ok"}), Retention: &policies.Retention{MaxAge: policies.Duration(time.Hour)}}}
	w, err := worker.New(ctx, e.js, worker.Config{ID: "w1", Definitions: d, Agents: []string{"ret"}, RetentionInterval: -1, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.Retain(ctx, "ret", time.Now())
	if err != nil || !slices.Equal(res.Removed, []string{"settled"}) || res.Examined != 4 {
		t.Fatalf("removed %+v, %v; want only the session that owes nothing", res, err)
	}
}

// A pass decides on the states it read: a session that ran again since
// (an event came while the pass worked) is not removed with the run it
// just made, and a session forked from stays while its forks do, whose
// transcripts hold its handles.
func TestRetentionDecidesOnWhatItRead(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	d := defs{"ret": {Name: "ret", Model: scripted(policies.ScriptEntry{Text: "ok"}), Retention: &policies.Retention{MaxAge: policies.Duration(time.Hour)}}}
	cfg := worker.Config{Definitions: d, Agents: []string{"ret"}, RetentionInterval: -1}
	e.start(t, cfg)
	busy := e.ref(t, "ret", "busy")
	e.send(t, busy, "first")
	e.waitStatus(t, busy, record.StatusDone)
	store, err := record.Open(ctx, e.js, e.names)
	if err != nil {
		t.Fatal(err)
	}
	rested := time.Now().Add(-2 * time.Hour)
	for name, parent := range map[string]string{"parent": "", "fork": "parent", "lonely": ""} {
		st := record.NewState("ret", name, rested)
		st.SetStatus(record.StatusDone, "", rested)
		st.RunEnded, st.Updated, st.Parent = rested, rested, parent
		if name == "fork" {
			// It waits for a person: never removed.
			st.SetStatus(record.StatusBlocked, "waiting", rested)
		}
		if _, err := store.Create(ctx, e.ref(t, "ret", name), st); err != nil {
			t.Fatal(err)
		}
	}
	// The pass reads busy at rest; then an event runs it again.
	lkv, err := e.js.KeyValue(ctx, e.names.BucketLeases())
	if err != nil {
		t.Fatal(err)
	}
	worker.OnRetentionListed(t, func(string) {
		e.send(t, busy, "second")
		e.waitStatusTurns(t, busy, record.StatusDone, 2)
		natstest.WaitFor(t, 30*time.Second, func() error {
			if _, err := lkv.Get(ctx, e.names.LeaseKey(busy)); !errors.Is(err, jetstream.ErrKeyNotFound) {
				return fmt.Errorf("lease of busy: %v", err)
			}
			return nil
		})
	})
	cfg2 := cfg
	cfg2.ID, cfg2.WorkDir = "w2", t.TempDir()
	w2, err := worker.New(ctx, e.js, cfg2)
	if err != nil {
		t.Fatal(err)
	}
	res, err := w2.Retain(ctx, "ret", time.Now().Add(90*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(res.Removed)
	if !slices.Equal(res.Removed, []string{"lonely"}) || res.Kept != 1 {
		t.Fatalf("removed %v, kept %d; want lonely removed, busy kept for the next pass, parent kept for its fork", res.Removed, res.Kept)
	}
	tr, err := record.Show(ctx, e.js, e.names, busy)
	if err != nil || len(tr.Transcript) != 4 {
		t.Fatalf("busy after the pass: %v, %d entries", err, len(tr.Transcript))
	}
}

// A removal cut short right after it purged a session's records (the
// worker died, or its context ended) leaves nothing behind that no pass
// would find again: no status index entry for the session, no ledger
// account, none of its consumed events.
func TestRetentionCutShortLeavesNoStrays(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	d := defs{"ret": {Name: "ret", Model: scripted(policies.ScriptEntry{Text: "ok"}), Retention: &policies.Retention{MaxAge: policies.Duration(time.Hour)}}}
	cfg := worker.Config{Definitions: d, Agents: []string{"ret"}, RetentionInterval: -1}
	e.start(t, cfg)
	ref := e.ref(t, "ret", "old")
	e.send(t, ref, "hello")
	e.waitStatus(t, ref, record.StatusDone)
	skv, err := e.js.KeyValue(ctx, e.names.BucketStatus())
	if err != nil {
		t.Fatal(err)
	}
	indexed := func() []string {
		ks, err := skv.ListKeysFiltered(ctx, "*."+ref.Key())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for k := range ks.Keys() {
			out = append(out, k)
		}
		return out
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if len(indexed()) == 0 {
			return errors.New("not indexed yet")
		}
		return nil
	})
	// Its run's delegation account.
	led, err := jlledger.Open(ctx, e.js, e.names)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := led.OpenAccount(ctx, ref, "run-1", jlledger.Ceiling{}, jlledger.Part{}); err != nil {
		t.Fatal(err)
	}
	pctx, cut := context.WithCancel(ctx)
	defer cut()
	worker.OnRetentionPurged(t, func(streams.SessionRef) { cut() })
	cfg2 := cfg
	cfg2.ID, cfg2.WorkDir = "w2", t.TempDir()
	w2, err := worker.New(ctx, e.js, cfg2)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w2.Retain(pctx, "ret", time.Now().Add(2*time.Hour))
	if _, _, err := loadState(e, ref); !errors.Is(err, worker.ErrNotFound) {
		t.Fatalf("the state after the purge: %v", err)
	}
	if ks := indexed(); len(ks) != 0 {
		t.Fatalf("the status index still lists the removed session: %v", ks)
	}
	if _, err := led.Get(ctx, ref); !errors.Is(err, jlledger.ErrNotFound) {
		t.Fatalf("the removed session's ledger account: %v", err)
	}
	in, err := e.js.Stream(ctx, e.names.StreamIn())
	if err != nil {
		t.Fatal(err)
	}
	info, err := in.Info(ctx, jetstream.WithSubjectFilter(e.names.In(ref)))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(info.State.Subjects); n != 0 {
		t.Fatalf("JL_IN still holds the removed session's consumed events: %v", info.State.Subjects)
	}
}
