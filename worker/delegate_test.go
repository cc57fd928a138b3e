package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/internal/natstest"
	ledgerpkg "github.com/jetloop/jetloop/ledger"
	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/worker"
)

// admitWith is the admission pipeline of delegate calls, as the worker's
// wiring builds it, over fixed definitions.
func admitWith(t *testing.T, e *env, d defs) worker.AdmitFunc {
	t.Helper()
	ctx := context.Background()
	rules := admission.NewRules()
	for _, def := range d {
		if def.Version == 0 {
			def.Version = 1
		}
		c, err := policies.Compile(def)
		if err != nil {
			t.Fatal(err)
		}
		rules.Set(c)
	}
	adm, err := admission.New(ctx, e.js, rules, admission.Config{Names: e.names})
	if err != nil {
		t.Fatal(err)
	}
	dd, err := dedupe.New(ctx, e.js, dedupe.Config{Names: e.names})
	if err != nil {
		t.Fatal(err)
	}
	pipe := ingest.Pipeline(e.js, dd, adm, e.names, nil, 0)
	return func(ctx context.Context, ev event.Event) (worker.Admission, error) {
		res, err := pipe(ctx, &ingest.Delivery{Event: ev, Receiver: "delegate"})
		switch {
		case errors.Is(err, ingest.ErrNotFound), errors.Is(err, ingest.ErrBadRequest), errors.Is(err, ingest.ErrNotAdmitted):
			return worker.Admission{Refused: []string{err.Error()}}, nil
		case errors.Is(err, ingest.ErrConflict):
			return worker.Admission{Conflict: err.Error()}, nil
		case err != nil:
			return worker.Admission{}, err
		}
		out := worker.Admission{Duplicate: res.Duplicate}
		for _, tg := range res.Admitted {
			out.Admitted = append(out.Admitted, tg.Agent+"/"+tg.Session)
		}
		for _, r := range res.Refused {
			out.Refused = append(out.Refused, r.Reason)
		}
		return out, nil
	}
}

// reqLog is a model factory of scripted models that records every
// request, by the model name the definition gives (the agent's, here).
type reqLog struct {
	mu   sync.Mutex
	reqs map[string][]model.Request
}

func (r *reqLog) factory(spec policies.Model) (model.Model, error) {
	inner, err := model.NewScripted(spec)
	if err != nil {
		return nil, err
	}
	return modelFunc(func(ctx context.Context, req model.Request) (model.Response, error) {
		r.mu.Lock()
		if r.reqs == nil {
			r.reqs = map[string][]model.Request{}
		}
		r.reqs[req.Model] = append(r.reqs[req.Model], req)
		r.mu.Unlock()
		return inner.Complete(ctx, req)
	}), nil
}

func (r *reqLog) of(name string) []model.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]model.Request(nil), r.reqs[name]...)
}

type modelFunc func(ctx context.Context, req model.Request) (model.Response, error)

func (f modelFunc) Complete(ctx context.Context, req model.Request) (model.Response, error) {
	return f(ctx, req)
}

// delegateCall is a scripted delegate call.
func delegateCall(agent, task string, inputs map[string]any, budget map[string]any) policies.ScriptToolCall {
	args := map[string]any{"agent": agent, "task": task}
	if inputs != nil {
		args["inputs"] = inputs
	}
	if budget != nil {
		args["budget"] = budget
	}
	return policies.ScriptToolCall{Name: "delegate", Args: args}
}

func builtinTools(t *testing.T, names ...string) worker.Tools {
	t.Helper()
	m := worker.ToolMap{}
	for _, tool := range tools.Builtins(tools.BuiltinConfig{ShellGrace: time.Second}) {
		for _, n := range names {
			if tool.Spec().Name == n {
				m[n] = tool
			}
		}
	}
	return m
}

func delegateResults(tr record.Transcript) []record.Entry {
	var out []record.Entry
	for _, e := range tr.Transcript {
		if e.Kind == record.KindToolResult {
			out = append(out, e)
		}
	}
	return out
}

func childRef(t *testing.T, e *env, agent string, parent streams.SessionRef, call string) streams.SessionRef {
	t.Helper()
	return e.ref(t, agent, parent.Agent+"/"+parent.Session+"/"+call)
}

// A lead delegates to two reviewers in one answer: both run in sessions of
// their own, each sees only the diff it was given (not the lead's
// transcript, not the task it does not read), and the lead continues once
// both answered, with each answer as its call's result.
func TestDelegateFansOutAndIn(t *testing.T) {
	e := setup(t)
	rec := &reqLog{}
	lead := policies.Definition{Name: "lead", Tools: []string{"delegate"}, System: "LEAD-SECRET-SYSTEM",
		Model: policies.Model{Provider: "scripted", Name: "lead", Script: []policies.ScriptEntry{
			{Text: "LEAD-PRIVATE-REASONING: two reviews.", ToolCalls: []policies.ScriptToolCall{
				delegateCall("rev", "LEAD-TASK-TEXT review A", map[string]any{"diff": "--- a\n+++ b\n-x\n+y\n"}, nil),
				delegateCall("rev", "LEAD-TASK-TEXT review B", map[string]any{"diff": "--- a\n+++ b\n-x\n+y\n"}, nil),
			}, Usage: policies.Usage{InputTokens: 10, OutputTokens: 5}},
			{Text: "Both reviews are in."},
		}}}
	rev := policies.Definition{Name: "rev", Reads: []string{"diff"}, System: "Assume the diff is wrong.",
		Model: policies.Model{Provider: "scripted", Name: "rev", Script: []policies.ScriptEntry{
			{Text: "The change flips x to y without a test.", Usage: policies.Usage{InputTokens: 100, OutputTokens: 20}},
		}}}
	d := defs{"lead": lead, "rev": rev}
	e.start(t, worker.Config{Definitions: d, Tools: builtinTools(t, "delegate"), Agents: []string{"lead", "rev"},
		Models: rec.factory, Admit: admitWith(t, e, d)})
	ref := e.ref(t, "lead", "pr-1")
	e.send(t, ref, "review pull request 1")
	tr := e.waitStatus(t, ref, record.StatusDone)
	res := delegateResults(tr)
	if len(res) != 2 {
		t.Fatalf("results %+v", res)
	}
	for _, r := range res {
		if r.Name != "delegate" || r.IsError || r.Result != "The change flips x to y without a test." || r.Event == nil {
			t.Fatalf("result %+v", r)
		}
	}
	checkCalls(t, tr)
	if last := tr.Transcript[len(tr.Transcript)-1]; last.Text != "Both reviews are in." {
		t.Fatalf("last entry %+v", last)
	}
	// The lead's second call saw both results.
	if reqs := rec.of("lead"); len(reqs) != 2 || len(reqs[1].Messages[len(reqs[1].Messages)-1].ToolResults) != 2 {
		t.Fatalf("lead requests %+v", reqs)
	}
	// Each reviewer saw the diff and nothing of the lead.
	revReqs := rec.of("rev")
	if len(revReqs) != 2 {
		t.Fatalf("%d reviewer requests", len(revReqs))
	}
	for _, req := range revReqs {
		all := wholeRequest(req)
		if !strings.Contains(all, "-x\n+y") {
			t.Fatalf("reviewer request without the diff: %s", all)
		}
		for _, leak := range []string{"LEAD-SECRET-SYSTEM", "LEAD-PRIVATE-REASONING", "LEAD-TASK-TEXT", "review pull request 1"} {
			if strings.Contains(all, leak) {
				t.Fatalf("reviewer request holds %q of the lead: %s", leak, all)
			}
		}
	}
	// The children record where they came from; the lead what they used.
	// (A child records its answer sent after publishing it: the lead may
	// be done first.)
	for _, call := range []string{"call_0_0", "call_0_1"} {
		cref := childRef(t, e, "rev", ref, call)
		natstest.WaitFor(t, 10*time.Second, func() error {
			st := state(t, e, cref)
			if st.Delegation == nil || st.Delegation.Parent != "lead/pr-1" || st.Delegation.CallID != call || st.Delegation.Hops != 1 || !st.Delegation.Answered {
				return fmt.Errorf("child %s delegation %+v", cref, st.Delegation)
			}
			return nil
		})
	}
	st := state(t, e, ref)
	if st.Delegated.Sessions != 2 || st.Delegated.Usage.Tokens() != 240 || st.Delegated.Turns != 2 || len(st.Children) != 0 {
		t.Fatalf("lead delegated %+v, children %+v", st.Delegated, st.Children)
	}
	// The ledger counted the tree as it went.
	lg, err := ledgerpkg.Open(context.Background(), e.js, e.names)
	if err != nil {
		t.Fatal(err)
	}
	// (The lead reports its last turn after the state that says it is
	// done.)
	natstest.WaitFor(t, 10*time.Second, func() error {
		acct, err := lg.Get(context.Background(), ref)
		if err != nil {
			return err
		}
		if tot := acct.Total(); len(acct.Parts) != 3 || tot.Turns != 4 || tot.Tokens() != 255 {
			return fmt.Errorf("ledger account %+v, total %+v", acct, tot)
		}
		return nil
	})
}

func wholeRequest(req model.Request) string {
	var b strings.Builder
	b.WriteString(req.System)
	for _, m := range req.Messages {
		b.WriteString("\n" + m.Text)
		for _, c := range m.ToolCalls {
			b.WriteString("\n" + string(c.Args))
		}
		for _, r := range m.ToolResults {
			b.WriteString("\n" + r.Content)
		}
	}
	return b.String()
}

// The host refuses, as a recorded decision, a delegation whose chain gave
// the same agent the same task (A → B → A), one deeper than the tree's
// max_hops, and one offering an input the agent does not read; each call
// gets the reason as its error result.
func TestDelegateRefusals(t *testing.T) {
	e := setup(t)
	a := policies.Definition{Name: "a", Tools: []string{"delegate"}, Budget: policies.Budget{MaxHops: 3},
		Model: scripted(policies.ScriptEntry{Text: "To b.", ToolCalls: []policies.ScriptToolCall{delegateCall("b", "ping", nil, nil)}},
			policies.ScriptEntry{Text: "a done."})}
	b := policies.Definition{Name: "b", Tools: []string{"delegate"},
		Model: scripted(policies.ScriptEntry{Text: "Back to a.", ToolCalls: []policies.ScriptToolCall{delegateCall("a", "PING ", nil, nil)}},
			policies.ScriptEntry{Text: "b done."})}
	shallow := policies.Definition{Name: "shallow", Tools: []string{"delegate"}, Budget: policies.Budget{MaxHops: 1},
		Model: scripted(policies.ScriptEntry{Text: "Deeper.", ToolCalls: []policies.ScriptToolCall{
			delegateCall("deep", "go down", nil, nil),
			delegateCall("picky", "read this", map[string]any{"notes": "secret notes"}, nil),
		}}, policies.ScriptEntry{Text: "shallow done."})}
	deep := policies.Definition{Name: "deep", Tools: []string{"delegate"},
		Model: scripted(policies.ScriptEntry{Text: "Deeper still.", ToolCalls: []policies.ScriptToolCall{delegateCall("b", "anything", nil, nil)}},
			policies.ScriptEntry{Text: "deep done."})}
	picky := policies.Definition{Name: "picky", Reads: []string{"diff"}, Model: scripted(policies.ScriptEntry{Text: "never runs"})}
	d := defs{"a": a, "b": b, "shallow": shallow, "deep": deep, "picky": picky}
	e.start(t, worker.Config{Definitions: d, Tools: builtinTools(t, "delegate"), Agents: []string{"a", "b", "shallow", "deep", "picky"},
		Admit: admitWith(t, e, d)})

	// a (asked "ping") → b ("ping") → a ("PING "): the same pair.
	ra := e.ref(t, "a", "s1")
	e.send(t, ra, "ping")
	tr := e.waitStatus(t, ra, record.StatusDone)
	rb := childRef(t, e, "b", ra, "call_0_0")
	trb := e.waitStatus(t, rb, record.StatusDone)
	r := delegateResults(trb)
	if len(r) != 1 || !r[0].IsError || !strings.Contains(r[0].Result, "cycle: a was given this task already") || !strings.Contains(r[0].Result, "a/s1 → b/a/s1/call_0_0 → a") {
		t.Fatalf("b's result %+v", r)
	}
	if r := delegateResults(tr); len(r) != 1 || r[0].IsError || r[0].Result != "b done." {
		t.Fatalf("a's result %+v", r)
	}
	if _, err := record.Show(context.Background(), e.js, e.names, childRef(t, e, "a", rb, "call_0_0")); !errors.Is(err, record.ErrNotFound) {
		t.Fatalf("the refused child exists: %v", err)
	}
	checkCalls(t, trb)

	// shallow (max_hops 1) → deep (1) → b would be 2: refused; and picky
	// does not read notes.
	rs := e.ref(t, "shallow", "s1")
	e.send(t, rs, "go")
	trs := e.waitStatus(t, rs, record.StatusDone)
	rdeep := childRef(t, e, "deep", rs, "call_0_0")
	trd := e.waitStatus(t, rdeep, record.StatusDone)
	if r := delegateResults(trd); len(r) != 1 || !r[0].IsError || !strings.Contains(r[0].Result, "max_hops 1: b would be 2 delegations below shallow/s1") {
		t.Fatalf("deep's result %+v", r)
	}
	r = delegateResults(trs)
	if len(r) != 2 || r[0].CallID != "call_0_1" || !r[0].IsError || !strings.Contains(r[0].Result, "picky does not read notes: its definition reads only [diff]") ||
		r[1].CallID != "call_0_0" || r[1].Result != "deep done." {
		t.Fatalf("shallow's results %+v", r)
	}

	// Each refusal is an admission decision in JL_AUDIT.
	decisions := auditDecisions(t, e)
	for _, want := range []string{"b: refused: cycle:", "deep: refused: max_hops 1", "shallow: refused: picky does not read notes"} {
		if !slices_containsPrefix(decisions, want) {
			t.Errorf("no decision %q in %v", want, decisions)
		}
	}
}

// auditDecisions are the admission records of refused delegations, as
// "<delegating session's agent>: refused: <reason>".
func auditDecisions(t *testing.T, e *env) []string {
	t.Helper()
	ctx := context.Background()
	recs, err := admission.Recent(ctx, e.js, e.names, "", time.Time{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		if r.Outcome == admission.Refused {
			parent := strings.TrimPrefix(r.Event.Source, "/agents/")
			parent, _, _ = strings.Cut(parent, "/")
			out = append(out, parent+": refused: "+r.Reason)
		}
	}
	return out
}

func slices_containsPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// A child that would spend more than its parent's run has left is stopped
// by its carved budget, and the parent's tree stops at the parent's
// ceiling: the parent's ledger shows the child's spend.
func TestDelegateBudgetIsCarved(t *testing.T) {
	e := setup(t)
	// claude-sonnet-4-5 list prices make 1000 input tokens cost $0.003.
	priced := func(script ...policies.ScriptEntry) policies.Model {
		return policies.Model{Provider: "scripted", Name: "claude-sonnet-4-5", Script: script}
	}
	boss := policies.Definition{Name: "boss", Tools: []string{"delegate"}, Budget: policies.Budget{MaxCostUSD: 0.01},
		Model: priced(
			policies.ScriptEntry{Text: "Over to the spender.", ToolCalls: []policies.ScriptToolCall{delegateCall("spender", "spend", nil, nil)},
				Usage: policies.Usage{InputTokens: 1000}},
			policies.ScriptEntry{Text: "never reached", Usage: policies.Usage{InputTokens: 1000}})}
	spender := policies.Definition{Name: "spender", Tools: []string{"delegate"},
		Model: priced(policies.ScriptEntry{Text: "Spending.", ToolCalls: []policies.ScriptToolCall{delegateCall("nobody", "x", nil, nil)}, Usage: policies.Usage{InputTokens: 2000}},
			policies.ScriptEntry{Text: "More.", ToolCalls: []policies.ScriptToolCall{delegateCall("nobody", "y", nil, nil)}, Usage: policies.Usage{InputTokens: 2000}},
			policies.ScriptEntry{Text: "never reached", Usage: policies.Usage{InputTokens: 2000}})}
	d := defs{"boss": boss, "spender": spender}
	e.start(t, worker.Config{Definitions: d, Tools: builtinTools(t, "delegate"), Agents: []string{"boss", "spender"},
		Admit: admitWith(t, e, d)})
	ref := e.ref(t, "boss", "b1")
	e.send(t, ref, "go")
	cref := childRef(t, e, "spender", ref, "call_0_0")
	trc := e.waitStatus(t, cref, record.StatusBudgetExceeded)
	if l := trc.Budget.Limits.MaxCostUSD; !strings.Contains(trc.Reason, "max_cost_usd 0.0070 reached") || l < 0.00699 || l > 0.00701 {
		t.Fatalf("child reason %q, limits %+v", trc.Reason, trc.Budget.Limits)
	}
	tr := e.waitStatus(t, ref, record.StatusBudgetExceeded)
	r := delegateResults(tr)
	if len(r) != 1 || !r[0].IsError || !strings.Contains(r[0].Result, "ended budget_exceeded") {
		t.Fatalf("boss's result %+v", r)
	}
	if !strings.Contains(tr.Reason, "max_cost_usd of this run and the sessions it delegated to") {
		t.Fatalf("boss reason %q", tr.Reason)
	}
	st := state(t, e, ref)
	if st.RunUsage.CostUSD != 0.003 || st.Delegated.Usage.CostUSD < 0.0119 || st.Delegated.Usage.CostUSD > 0.0121 {
		t.Fatalf("boss own %+v, delegated %+v", st.RunUsage, st.Delegated)
	}
	lg, _ := ledgerpkg.Open(context.Background(), e.js, e.names)
	acct, err := lg.Get(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if tot := acct.Total(); tot.CostUSD < 0.0149 || acct.Parts["spender/"+cref.Session].CostUSD < 0.0119 {
		t.Fatalf("boss ledger %+v", acct)
	}
	checkCalls(t, tr)
}

// Cancelling the root cancels its running child and that child's running
// child, whose shell process dies.
func TestDelegateCancelCascades(t *testing.T) {
	e := setup(t)
	work := t.TempDir()
	root := policies.Definition{Name: "root", Tools: []string{"delegate"},
		Model: scripted(policies.ScriptEntry{Text: "Down.", ToolCalls: []policies.ScriptToolCall{delegateCall("mid", "middle", nil, nil)}})}
	mid := policies.Definition{Name: "mid", Tools: []string{"delegate"},
		Model: scripted(policies.ScriptEntry{Text: "Further down.", ToolCalls: []policies.ScriptToolCall{delegateCall("leaf", "sleep", nil, nil)}})}
	leaf := policies.Definition{Name: "leaf", Tools: []string{"shell"},
		Model: scripted(policies.ScriptEntry{Text: "Sleeping.", ToolCalls: []policies.ScriptToolCall{{Name: "shell", Args: map[string]any{"command": "echo $$ > pid.txt; exec sleep 60"}}}},
			policies.ScriptEntry{Text: "Woke up."})}
	d := defs{"root": root, "mid": mid, "leaf": leaf}
	e.start(t, worker.Config{Definitions: d, Tools: builtinTools(t, "delegate", "shell"), Agents: []string{"root", "mid", "leaf"},
		Admit: admitWith(t, e, d), WorkDir: work})
	ref := e.ref(t, "root", "r1")
	e.send(t, ref, "go")
	mref := childRef(t, e, "mid", ref, "call_0_0")
	lref := childRef(t, e, "leaf", mref, "call_0_0")
	at, st, _ := strings.Cut(lref.Key(), ".")
	pid := readPID(t, filepath.Join(work, at, st, "pid.txt"))
	if !alive(pid) {
		t.Fatalf("leaf's sleep %d is not running", pid)
	}
	e.waitStatus(t, ref, record.StatusWaiting)
	publish(t, e, ref, control.Message{Verb: control.Cancel, Text: "enough"})
	e.waitStatus(t, lref, record.StatusCancelled)
	natstest.WaitFor(t, 30*time.Second, func() error {
		if alive(pid) {
			return fmt.Errorf("leaf's sleep %d still runs", pid)
		}
		return nil
	})
	trm := e.waitStatus(t, mref, record.StatusCancelled)
	tr := e.waitStatus(t, ref, record.StatusCancelled)
	for _, x := range []record.Transcript{tr, trm} {
		checkCalls(t, x)
		if r := delegateResults(x); len(r) != 1 || !strings.Contains(r[0].Result, "not answered: cancelled") {
			t.Fatalf("%s results %+v", x.Session, r)
		}
	}
	if got := state(t, e, ref); len(got.Children) != 0 {
		t.Fatalf("root still owes %+v", got.Children)
	}
}

// A run that waits for a child past its deadline is ended by its timer,
// holding nothing meanwhile: budget_exceeded, and the child (blocked on a
// human, so taking no step that would see the deadline) cancelled.
func TestDelegateDeadlineWhileWaiting(t *testing.T) {
	e := setup(t)
	lead := policies.Definition{Name: "lead", Tools: []string{"delegate"}, Budget: policies.Budget{Deadline: policies.Duration(2 * time.Second)},
		Model: scripted(policies.ScriptEntry{Text: "Ask.", ToolCalls: []policies.ScriptToolCall{delegateCall("asker", "ask someone", nil, nil)}},
			policies.ScriptEntry{Text: "never reached"})}
	asker := policies.Definition{Name: "asker", Tools: []string{"ask_human"},
		Model: scripted(policies.ScriptEntry{Text: "Asking.", ToolCalls: []policies.ScriptToolCall{{Name: "ask_human", Args: map[string]any{"question": "Which one?"}}}},
			policies.ScriptEntry{Text: "Thanks."})}
	d := defs{"lead": lead, "asker": asker}
	e.start(t, worker.Config{Definitions: d, Tools: builtinTools(t, "delegate", "ask_human"), Agents: []string{"lead", "asker"},
		Admit: admitWith(t, e, d)})
	ref := e.ref(t, "lead", "l1")
	e.send(t, ref, "go")
	cref := childRef(t, e, "asker", ref, "call_0_0")
	e.waitStatus(t, cref, record.StatusBlocked)
	tr := e.waitStatus(t, ref, record.StatusBudgetExceeded)
	if !strings.Contains(tr.Reason, "while the run waited for asker/lead/l1/call_0_0") {
		t.Fatalf("reason %q", tr.Reason)
	}
	if r := delegateResults(tr); len(r) != 1 || !strings.Contains(r[0].Result, "not answered: budget exceeded") {
		t.Fatalf("results %+v", r)
	}
	ctr := e.waitStatus(t, cref, record.StatusCancelled)
	checkCalls(t, ctr)
}

// The inputs and budgets a delegate call asks for, through a real run:
// an earlier result too large for the context, one of the session's
// blobs and a large text reach the child as blobs of its own, which
// read_blob reads; a file outside the work folder, and
// more turns than the run has left, are refused with why; a child asked
// to take one turn is stopped after it.
func TestDelegateInputsAndAskedBudget(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	blobs, err := e.js.ObjectStore(ctx, e.names.ObjectBlobs())
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(tools.RegistryOptions{Blobs: blobs, Names: e.names}, tools.Builtins(tools.BuiltinConfig{Blobs: blobs, Names: e.names})...)
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("y", 20_000)
	// A blob of the lead's session, as a tool of its own would have kept.
	if _, err := blobs.PutBytes(ctx, "lead.s1.result.kept.0123", []byte(strings.Repeat("z", 20_000))); err != nil {
		t.Fatal(err)
	}
	lead := policies.Definition{Name: "lead", Tools: []string{"shell", "delegate"}, Budget: policies.Budget{MaxTurns: 10},
		Model: scripted(
			policies.ScriptEntry{Text: "Make a big output.", ToolCalls: []policies.ScriptToolCall{{Name: "shell", Args: map[string]any{"command": "head -c 20000 /dev/zero | tr '\\0' 'x'"}}}},
			policies.ScriptEntry{Text: "Delegate.", ToolCalls: []policies.ScriptToolCall{
				delegateCall("reader", "read them", map[string]any{"out": map[string]any{"result": "call_0_0"},
					"kept": map[string]any{"blob": "lead.s1.result.kept.0123"}, "big": big}, nil),
				delegateCall("reader", "read this", map[string]any{"out": map[string]any{"file": "../outside.txt"}}, nil),
				delegateCall("counter", "count", nil, map[string]any{"max_turns": 99}),
				delegateCall("counter", "count", nil, map[string]any{"max_turns": 1}),
				delegateCall("reader", "read theirs", map[string]any{"out": map[string]any{"blob": "other.s1.result.kept.0123"}}, nil),
			}},
			policies.ScriptEntry{Text: "All answered."})}
	readerSession := "lead/s1/call_1_0"
	rref := e.ref(t, "reader", readerSession)
	reader := policies.Definition{Name: "reader", Reads: []string{"task", "out", "kept", "big"}, Tools: []string{"read_blob"},
		Model: scripted(
			policies.ScriptEntry{Text: "Reading.", ToolCalls: []policies.ScriptToolCall{
				{Name: "read_blob", Args: map[string]any{"handle": rref.Key() + ".input.out", "limit": 100}},
				{Name: "read_blob", Args: map[string]any{"handle": rref.Key() + ".input.kept", "limit": 100}},
				{Name: "read_blob", Args: map[string]any{"handle": rref.Key() + ".input.big", "limit": 100}},
			}},
			policies.ScriptEntry{Text: "Read them."})}
	counter := policies.Definition{Name: "counter", Tools: []string{"delegate"},
		Model: scripted(
			policies.ScriptEntry{Text: "One.", ToolCalls: []policies.ScriptToolCall{delegateCall("nobody", "x", nil, nil)}},
			policies.ScriptEntry{Text: "Two: never reached."})}
	d := defs{"lead": lead, "reader": reader, "counter": counter}
	e.start(t, worker.Config{Definitions: d, Tools: worker.RegistryTools(reg), Agents: []string{"lead", "reader", "counter"},
		Admit: admitWith(t, e, d)})
	ref := e.ref(t, "lead", "s1")
	e.send(t, ref, "go")
	tr := e.waitStatus(t, ref, record.StatusDone)
	checkCalls(t, tr)
	res := map[string]record.Entry{}
	for _, r := range delegateResults(tr) {
		res[r.CallID] = r
	}
	if r := res["call_1_1"]; !r.IsError || !strings.Contains(r.Result, `input out: file "../outside.txt"`) {
		t.Fatalf("file outside the work folder: %+v", r)
	}
	if r := res["call_1_2"]; !r.IsError || !strings.Contains(r.Result, "budget.max_turns 99 is more than the 8 turns this run has left") {
		t.Fatalf("more turns than left: %+v", r)
	}
	if r := res["call_1_3"]; !r.IsError || !strings.Contains(r.Result, "ended budget_exceeded: max_turns 1 reached") {
		t.Fatalf("a child asked for one turn: %+v", r)
	}
	if r := res["call_1_4"]; !r.IsError || !strings.Contains(r.Result, `"other.s1.result.kept.0123" is not a blob of this session`) {
		t.Fatalf("another session's blob: %+v", r)
	}
	if r := res["call_1_0"]; r.IsError || r.Result != "Read them." {
		t.Fatalf("reader: %+v", r)
	}
	rtr := e.waitStatus(t, rref, record.StatusDone)
	first := rtr.Transcript[0].Text
	if !strings.Contains(first, "[input out: ") || !strings.Contains(first, "stored as blob \""+rref.Key()+".input.out\"") ||
		!strings.Contains(first, "[input kept: 20000 bytes, stored as blob") ||
		!strings.Contains(first, "[input big: 20000 bytes, stored as blob") || strings.Count(first, "x") > 4096 {
		t.Fatalf("reader's context: %.600s", first)
	}
	reads := delegateResultsOf(rtr, "read_blob")
	if len(reads) != 3 || reads[0].IsError || !strings.Contains(reads[0].Result, strings.Repeat("x", 100)) ||
		reads[1].IsError || !strings.Contains(reads[1].Result, strings.Repeat("z", 100)) ||
		reads[2].IsError || !strings.Contains(reads[2].Result, strings.Repeat("y", 100)) {
		t.Fatalf("reader's read_blob results %+v", reads)
	}
	cst := state(t, e, e.ref(t, "counter", "lead/s1/call_1_3"))
	if cst.Limits.MaxTurns != 1 || cst.Status != record.StatusBudgetExceeded {
		t.Fatalf("counter %s with limits %+v", cst.Status, cst.Limits)
	}
}

func delegateResultsOf(tr record.Transcript, tool string) []record.Entry {
	var out []record.Entry
	for _, e := range tr.Transcript {
		if e.Kind == record.KindToolResult && e.Name == tool {
			out = append(out, e)
		}
	}
	return out
}

// delegationEvent is the delegate event lead/s1's call call_0_0 would
// publish to helper, with a budget of tokens.
func delegationEvent(t *testing.T, task string, tokens int64) event.Event {
	t.Helper()
	child := events.ChildSession("lead", "s1", "call_0_0")
	data, err := json.Marshal(events.Delegation{Parent: "lead/s1", CallID: "call_0_0", Task: task,
		Budget: events.Budget{MaxTokens: tokens}, Hops: 1, MaxHops: 4,
		Path: []events.Hop{{Session: "lead/s1", Run: "r1"}}})
	if err != nil {
		t.Fatal(err)
	}
	ev := event.New()
	ev.SetID("call_0_0")
	ev.SetSource(events.DelegationSource("lead", "s1"))
	ev.SetType(events.TypeDelegate)
	ev.SetSubject(child)
	ev.SetTime(time.Now().UTC())
	ev.SetExtension(events.ExtAgent, "helper")
	ev.SetExtension(events.ExtSession, child)
	ev.SetExtension(events.ExtParent, "lead/s1")
	ev.SetExtension(events.ExtHops, int32(1))
	if err := ev.SetData(event.ApplicationJSON, data); err != nil {
		t.Fatal(err)
	}
	return ev
}

// A delegate event published again (by its call's recovery, which
// publishes the event stored before the first publish: the same bytes)
// is the same delegation, answered as a duplicate with the child it
// started; another delegation under the same id (a budget carved anew,
// say) is a conflict, never taken for the first.
func TestDelegateEventPublishedAgainIsOne(t *testing.T) {
	e := setup(t)
	helper := policies.Definition{Name: "helper", Model: scripted(policies.ScriptEntry{Text: "helped."})}
	admit := admitWith(t, e, defs{"helper": helper})
	ctx := context.Background()
	ev := delegationEvent(t, "help", 1000)
	stored, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	first, err := admit(ctx, ev)
	if err != nil || len(first.Admitted) != 1 || first.Duplicate || first.Conflict != "" {
		t.Fatalf("first delegation: %+v, %v", first, err)
	}
	var again event.Event
	if err := json.Unmarshal(stored, &again); err != nil {
		t.Fatal(err)
	}
	res, err := admit(ctx, again)
	if err != nil {
		t.Fatalf("the same delegation published again: %v", err)
	}
	if !res.Duplicate || len(res.Admitted) != 1 || res.Admitted[0] != first.Admitted[0] || res.Conflict != "" {
		t.Fatalf("the same delegation published again: %+v, want a duplicate of %+v", res, first)
	}
	other, err := admit(ctx, delegationEvent(t, "help", 900))
	if err != nil {
		t.Fatalf("another delegation under the id: %v", err)
	}
	if other.Conflict == "" || other.Duplicate || len(other.Admitted) != 0 {
		t.Fatalf("another delegation under the id: %+v, want a conflict", other)
	}
}
