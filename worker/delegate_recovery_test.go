package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/natsd"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/worker"
)

// stopAt is a Config.Trace that holds the step of session at phase of
// the delegate call's first attempt until its session ends (the worker
// stops): reached is closed when it gets there.
func stopAt(session string, phase worker.Phase) (trace func(context.Context, worker.TracePoint), reached chan struct{}) {
	reached = make(chan struct{})
	var once sync.Once
	return func(ctx context.Context, p worker.TracePoint) {
		if p.Session != session || p.Phase != phase || p.Tool != "delegate" || p.Recovery {
			return
		}
		once.Do(func() { close(reached) })
		<-ctx.Done()
	}, reached
}

// startStoppable runs a worker on a connection of its own until stop,
// which closes the connection first, as if the process had died.
func (e *env) startStoppable(t *testing.T, cfg worker.Config) (stop func()) {
	t.Helper()
	nc, js := natstest.Connect(t, e.url)
	if cfg.WorkDir == "" {
		cfg.WorkDir = t.TempDir()
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := worker.New(ctx, js, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			nc.Close()
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("worker %s did not stop", cfg.ID)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitAnswered waits until the delegated session child has a state that
// records its answer sent.
func waitAnswered(t *testing.T, e *env, child streams.SessionRef) {
	t.Helper()
	store, err := record.Open(context.Background(), e.js, e.names)
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		st, _, err := store.Load(context.Background(), child)
		if err != nil {
			return err
		}
		if st.Delegation == nil || !st.Delegation.Answered {
			return fmt.Errorf("%s has not answered", child)
		}
		return nil
	})
}

// TestDelegateRecoveryReplaysTheDelegation stops the parent's worker after
// its delegate call published the child's start and before the call
// settled. The child, with 500 of the run's 1000 tokens, spends most of
// them before the parent is recovered: the recovery must not judge the
// delegation again against what is left now (it was made), but settle
// the call as waiting for that child, whose answer is then the call's
// result, not a late answer. Whether what is left is less than the
// child's budget or nothing at all.
func TestDelegateRecoveryReplaysTheDelegation(t *testing.T) {
	tests := []struct {
		name  string
		spent int64 // by the child
		want  record.Status
	}{
		{name: "less left than the child's budget", spent: 450, want: record.StatusDone},
		// The child's one model call passes its budget; the parent's next
		// step finds its own spent.
		{name: "the run's tokens all spent", spent: 950, want: record.StatusBudgetExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := setup(t)
			lead := policies.Definition{Name: "lead", Tools: []string{"delegate"}, Budget: policies.Budget{MaxTokens: 1000},
				Model: scripted(
					policies.ScriptEntry{Text: "Delegating.", ToolCalls: []policies.ScriptToolCall{delegateCall("helper", "help", nil, map[string]any{"max_tokens": 500})},
						Usage: policies.Usage{InputTokens: 100}},
					policies.ScriptEntry{Text: "Lead done."})}
			helper := policies.Definition{Name: "helper", Model: scripted(policies.ScriptEntry{Text: "Helped.", Usage: policies.Usage{InputTokens: tt.spent}})}
			d := defs{"lead": lead, "helper": helper}
			ref := e.ref(t, "lead", "s1")
			trace, reached := stopAt(ref.Session, worker.PhaseSettle)
			stop := e.startStoppable(t, worker.Config{ID: "w1", Definitions: d, Tools: builtinTools(t, "delegate"), Agents: []string{"lead", "helper"},
				Admit: admitWith(t, e, d), Trace: trace, LeaseTTL: 2 * time.Second, AckWait: 2 * time.Second})
			e.send(t, ref, "go")
			select {
			case <-reached:
			case <-time.After(30 * time.Second):
				t.Fatal("the delegate call did not publish")
			}
			// The child runs and answers while its parent's call is open.
			cref := childRef(t, e, "helper", ref, "call_0_0")
			waitAnswered(t, e, cref)
			stop()

			e.start(t, worker.Config{ID: "w2", Definitions: d, Tools: builtinTools(t, "delegate"), Agents: []string{"lead", "helper"},
				Admit: admitWith(t, e, d), LeaseTTL: 2 * time.Second, AckWait: 2 * time.Second})
			tr := e.waitStatus(t, ref, tt.want)
			checkCalls(t, tr)
			res := delegateResults(tr)
			if len(res) != 1 || res[0].IsError || res[0].Result != "Helped." || res[0].Event == nil {
				t.Fatalf("the delegate call's result %+v: want the child's answer", res)
			}
			for _, en := range tr.Transcript {
				if en.Kind == record.KindSystem && strings.Contains(en.Text, "late answer") {
					t.Fatalf("the child's answer was taken as a late answer: %+v", en)
				}
			}
			if n := count(tr, record.KindAssistant, ""); tt.want == record.StatusDone && n != 2 {
				t.Fatalf("the parent answered %d times, want twice", n)
			}
			st := state(t, e, ref)
			if st.Delegated.Sessions != 1 || st.Delegated.Usage.Tokens() != tt.spent {
				t.Fatalf("the parent counts its tree %+v, want the child's %d tokens once", st.Delegated, tt.spent)
			}
			if n := held(t, e, e.names.In(cref)); n != 1 {
				t.Fatalf("%d delegate events for the child, want 1", n)
			}
			if cst := state(t, e, cref); cst.Delegation.Budget.MaxTokens != 500 {
				t.Fatalf("the child ran with budget %+v, want the 500 tokens asked", cst.Delegation.Budget)
			}
		})
	}
}

// A stale worker and its successor make the delegate event of one call
// at once: here the successor stores its event first (with another
// budget than the one the stale worker carves), and the stale worker,
// whose create-only write loses, publishes the successor's event, not its
// own: one event, one child, with the successor's budget and task.
func TestDelegateRacingWorkersPublishOneEvent(t *testing.T) {
	e := setup(t)
	lead := policies.Definition{Name: "lead", Tools: []string{"delegate"}, Budget: policies.Budget{MaxTokens: 1000},
		Model: scripted(
			policies.ScriptEntry{Text: "Delegating.", ToolCalls: []policies.ScriptToolCall{delegateCall("helper", "help", nil, map[string]any{"max_tokens": 500})}},
			policies.ScriptEntry{Text: "Lead done."})}
	helper := policies.Definition{Name: "helper", Model: scripted(policies.ScriptEntry{Text: "Helped."})}
	d := defs{"lead": lead, "helper": helper}
	ref := e.ref(t, "lead", "s1")
	store, err := record.Open(context.Background(), e.js, e.names)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := json.Marshal(delegationEvent(t, "the successor's", 321))
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	trace := func(ctx context.Context, p worker.TracePoint) {
		if p.Session != ref.Session || p.Phase != worker.PhaseEffect || p.Tool != "delegate" {
			return
		}
		once.Do(func() {
			if _, err := store.ReserveDelegation(ctx, ref, p.Step, theirs); err != nil {
				t.Errorf("the successor's event: %v", err)
			}
		})
	}
	e.start(t, worker.Config{Definitions: d, Tools: builtinTools(t, "delegate"), Agents: []string{"lead", "helper"},
		Admit: admitWith(t, e, d), Trace: trace})
	e.send(t, ref, "go")
	tr := e.waitStatus(t, ref, record.StatusDone)
	checkCalls(t, tr)
	if res := delegateResults(tr); len(res) != 1 || res[0].IsError || res[0].Result != "Helped." {
		t.Fatalf("the delegate call's result %+v", res)
	}
	cref := childRef(t, e, "helper", ref, "call_0_0")
	waitAnswered(t, e, cref)
	if st := state(t, e, cref); st.Delegation.Budget.MaxTokens != 321 || st.Delegation.Task != "the successor's" {
		t.Fatalf("the child ran from %+v, want the successor's event", st.Delegation)
	}
	if n := held(t, e, e.names.In(cref)); n != 1 {
		t.Fatalf("%d delegate events for the child, want 1", n)
	}
	list, err := record.List(context.Background(), e.js, e.names)
	if err != nil {
		t.Fatal(err)
	}
	helpers := 0
	for _, x := range list {
		if x.Agent == "helper" {
			helpers++
		}
	}
	if helpers != 1 {
		t.Fatalf("%d helper sessions, want 1", helpers)
	}
}

// A delegate call whose id was used before for another delegation (a
// session of the same name that existed earlier, say) meets a conflict
// in the pipeline (409): the call is answered with that error once, it is
// not published again and again, and the run goes on.
func TestDelegateIDUsedBeforeIsAnsweredOnce(t *testing.T) {
	e := setup(t)
	lead := policies.Definition{Name: "lead", Tools: []string{"delegate"},
		Model: scripted(
			policies.ScriptEntry{Text: "Delegating.", ToolCalls: []policies.ScriptToolCall{delegateCall("helper", "help", nil, nil)}},
			policies.ScriptEntry{Text: "Lead done."})}
	helper := policies.Definition{Name: "helper", Model: scripted(policies.ScriptEntry{Text: "Helped."})}
	d := defs{"lead": lead, "helper": helper}
	admit := admitWith(t, e, d)
	ctx := context.Background()
	if res, err := admit(ctx, delegationEvent(t, "an earlier task", 300)); err != nil || len(res.Admitted) != 1 {
		t.Fatalf("the earlier delegation: %+v, %v", res, err)
	}
	var admits atomic.Int32
	counted := func(ctx context.Context, ev event.Event) (worker.Admission, error) {
		admits.Add(1)
		return admit(ctx, ev)
	}
	// Only the lead runs: the earlier delegation's child is not the point.
	e.start(t, worker.Config{Definitions: d, Tools: builtinTools(t, "delegate"), Agents: []string{"lead"}, Admit: counted})
	ref := e.ref(t, "lead", "s1")
	e.send(t, ref, "go")
	tr := e.waitStatus(t, ref, record.StatusDone)
	checkCalls(t, tr)
	res := delegateResults(tr)
	if len(res) != 1 || !res[0].IsError || !strings.Contains(res[0].Result, "not started") || !strings.Contains(res[0].Result, "another delegation") || res[0].Attempt != 0 {
		t.Fatalf("the delegate call's result %+v, want the conflict, at the first attempt", res)
	}
	// The model is told of its tool call, not of an HTTP header it
	// cannot set.
	if !strings.Contains(res[0].Result, "new tool call") || strings.Contains(res[0].Result, "Idempotency-Key") {
		t.Fatalf("the delegate call's result %q, want advice to delegate in a new tool call", res[0].Result)
	}
	if n := admits.Load(); n != 1 {
		t.Fatalf("the delegate event went through admission %d times, want once", n)
	}
	if st := state(t, e, ref); len(st.Children) != 0 {
		t.Fatalf("the lead waits for %+v", st.Children)
	}
	if n := held(t, e, e.names.In(childRef(t, e, "helper", ref, "call_0_0"))); n != 1 {
		t.Fatalf("%d delegate events for the child, want the earlier one", n)
	}
}

// A child's answer published again after JL_IN's duplicate window (the
// server keeps both) is the same answer: the parent took it as its
// call's result, and does not count the child's usage a second time.
func TestDelegateAnswerTwiceIsCountedOnce(t *testing.T) {
	e := setup(t)
	lead := policies.Definition{Name: "lead", Tools: []string{"delegate"},
		Model: scripted(
			policies.ScriptEntry{Text: "Delegating.", ToolCalls: []policies.ScriptToolCall{delegateCall("helper", "help", nil, nil)}},
			policies.ScriptEntry{Text: "Lead done."})}
	helper := policies.Definition{Name: "helper", Model: scripted(policies.ScriptEntry{Text: "Helped.", Usage: policies.Usage{InputTokens: 70, OutputTokens: 7}})}
	d := defs{"lead": lead, "helper": helper}
	e.start(t, worker.Config{Definitions: d, Tools: builtinTools(t, "delegate"), Agents: []string{"lead", "helper"}, Admit: admitWith(t, e, d)})
	ref := e.ref(t, "lead", "s1")
	e.send(t, ref, "go")
	e.waitStatus(t, ref, record.StatusDone)
	cref := childRef(t, e, "helper", ref, "call_0_0")
	waitAnswerRead(t, e, cref, ref)

	// The answer again, as its publish made again past the window is
	// stored: under a message id the server has forgotten.
	ctx := context.Background()
	in, err := e.js.Stream(ctx, e.names.StreamIn())
	if err != nil {
		t.Fatal(err)
	}
	answer, err := in.GetLastMsgForSubject(ctx, e.names.In(ref))
	if err != nil {
		t.Fatal(err)
	}
	if answer.Header.Get("ce-type") != events.TypeDelegateResult {
		t.Fatalf("the last event of the lead is %q, want the child's answer", answer.Header.Get("ce-type"))
	}
	m := nats.NewMsg(answer.Subject)
	for k, v := range answer.Header {
		if !strings.HasPrefix(k, "Nats-") {
			m.Header[k] = v // the event's own headers, not the stored message's
		}
	}
	m.Header.Set(nats.MsgIdHdr, answer.Header.Get(nats.MsgIdHdr)+"-after-the-window")
	m.Data = answer.Data
	ack, err := e.js.PublishMsg(ctx, m)
	if err != nil || ack.Duplicate {
		t.Fatalf("publish the answer again: %+v, %v", ack, err)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if st := state(t, e, ref); st.InSeq < ack.Sequence {
			return fmt.Errorf("the lead read up to %d, the answer again is %d", st.InSeq, ack.Sequence)
		}
		return nil
	})
	st := state(t, e, ref)
	if st.Delegated.Sessions != 1 || st.Delegated.Usage.Tokens() != 77 || st.Delegated.Turns != 1 {
		t.Fatalf("the lead counts its tree %+v, want the child's 77 tokens once", st.Delegated)
	}
	tr := e.waitStatus(t, ref, record.StatusDone)
	checkCalls(t, tr)
	for _, en := range tr.Transcript {
		if en.Kind == record.KindSystem && strings.Contains(en.Text, "late answer") {
			t.Fatalf("the answer again was taken as a late answer: %+v", en)
		}
	}
}

// A delegate event the server's max payload cannot hold (its inputs
// inline, their text several times its size once JSON escapes it) cannot
// be stored before its first publish: the call is answered with why at
// its first attempt, not left to recovery, which would make it as large
// again until its attempts ran out.
func TestDelegateEventOverMaxPayloadIsRefused(t *testing.T) {
	srv := natstest.RunServer(t, func(c *natsd.Config) { c.MaxPayload = 256 << 10 })
	_, js := natstest.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	e := &env{url: srv.ClientURL(), js: js, names: streams.Default()}
	work := t.TempDir()
	dir := filepath.Join(work, "lead", "s1")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	// Six files of 16 KiB, each inline, each 96 KiB in the event.
	inputs := map[string]any{}
	for i := range 6 {
		name := fmt.Sprintf("page%d.html", i)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strings.Repeat("<", 16<<10)), 0o640); err != nil {
			t.Fatal(err)
		}
		inputs[fmt.Sprintf("page%d", i)] = map[string]any{"file": name}
	}
	lead := policies.Definition{Name: "lead", Tools: []string{"delegate"},
		Model: scripted(
			policies.ScriptEntry{Text: "Delegating.", ToolCalls: []policies.ScriptToolCall{delegateCall("helper", "read them", inputs, nil)}},
			policies.ScriptEntry{Text: "Lead done."})}
	helper := policies.Definition{Name: "helper", Reads: []string{"task", "page0", "page1", "page2", "page3", "page4", "page5"},
		Model: scripted(policies.ScriptEntry{Text: "Read."})}
	d := defs{"lead": lead, "helper": helper}
	e.start(t, worker.Config{Definitions: d, Tools: builtinTools(t, "delegate"), Agents: []string{"lead", "helper"},
		Admit: admitWith(t, e, d), WorkDir: work})
	ref := e.ref(t, "lead", "s1")
	e.send(t, ref, "go")
	tr := e.waitStatus(t, ref, record.StatusDone)
	checkCalls(t, tr)
	res := delegateResults(tr)
	if len(res) != 1 || !res[0].IsError || !strings.Contains(res[0].Result, "over the server's max payload 262144") || res[0].Attempt != 0 {
		t.Fatalf("the delegate call's result %+v, want the event refused as too large, at the first attempt", res)
	}
	if n := held(t, e, e.names.In(childRef(t, e, "helper", ref, "call_0_0"))); n != 0 {
		t.Fatalf("%d delegate events for the child, want none", n)
	}
}

// The second delegate call of a run is interrupted after its publish;
// its child spends past what the tree may use before the recovery, which
// finds the tree's budget reached (the run's ledger account counts both
// children). The delegation was made: its stored event is published
// again over the budget, the call waits for its child and takes its
// answer, and the run stops for its budget at its next step, not with
// the call refused and the child's answer late.
func TestDelegateRecoveryOverTheTreeBudget(t *testing.T) {
	e := setup(t)
	lead := policies.Definition{Name: "lead", Tools: []string{"delegate"}, Budget: policies.Budget{MaxTokens: 1000},
		Model: scripted(
			policies.ScriptEntry{Text: "Delegating.", ToolCalls: []policies.ScriptToolCall{
				delegateCall("helper", "help", nil, map[string]any{"max_tokens": 100}),
				delegateCall("spender", "spend", nil, map[string]any{"max_tokens": 500})},
				Usage: policies.Usage{InputTokens: 100}},
			policies.ScriptEntry{Text: "Lead done."})}
	helper := policies.Definition{Name: "helper", Model: scripted(policies.ScriptEntry{Text: "Helped.", Usage: policies.Usage{InputTokens: 50}})}
	spender := policies.Definition{Name: "spender", Model: scripted(policies.ScriptEntry{Text: "Spent.", Usage: policies.Usage{InputTokens: 950}})}
	d := defs{"lead": lead, "helper": helper, "spender": spender}
	ref := e.ref(t, "lead", "s1")
	reached := make(chan struct{})
	var once sync.Once
	trace := func(ctx context.Context, p worker.TracePoint) {
		if p.Session != ref.Session || p.Phase != worker.PhaseSettle || p.CallID != "call_0_1" || p.Recovery {
			return
		}
		once.Do(func() { close(reached) })
		<-ctx.Done()
	}
	agents := []string{"lead", "helper", "spender"}
	stop := e.startStoppable(t, worker.Config{ID: "w1", Definitions: d, Tools: builtinTools(t, "delegate"), Agents: agents,
		Admit: admitWith(t, e, d), Trace: trace, LeaseTTL: 2 * time.Second, AckWait: 2 * time.Second})
	e.send(t, ref, "go")
	select {
	case <-reached:
	case <-time.After(30 * time.Second):
		t.Fatal("the second delegate call did not publish")
	}
	waitAnswered(t, e, childRef(t, e, "helper", ref, "call_0_0"))
	waitAnswered(t, e, childRef(t, e, "spender", ref, "call_0_1"))
	stop()

	e.start(t, worker.Config{ID: "w2", Definitions: d, Tools: builtinTools(t, "delegate"), Agents: agents,
		Admit: admitWith(t, e, d), LeaseTTL: 2 * time.Second, AckWait: 2 * time.Second})
	tr := e.waitStatus(t, ref, record.StatusBudgetExceeded)
	checkCalls(t, tr)
	res := map[string]record.Entry{}
	for _, r := range delegateResults(tr) {
		res[r.CallID] = r
	}
	if r := res["call_0_1"]; r.IsError || r.Result != "Spent." || r.Event == nil {
		t.Fatalf("the interrupted call's result %+v: want its child's answer", r)
	}
	for _, en := range tr.Transcript {
		if en.Kind == record.KindSystem && strings.Contains(en.Text, "late answer") {
			t.Fatalf("the child's answer was taken as a late answer: %+v", en)
		}
	}
	if st := state(t, e, ref); st.Delegated.Sessions != 2 || st.Delegated.Usage.Tokens() != 1000 {
		t.Fatalf("the lead counts its tree %+v, want both children's 1000 tokens once", st.Delegated)
	}
}
