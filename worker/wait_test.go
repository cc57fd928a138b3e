package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/dlq"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/worker"
)

// timedGate is gatedDef with a timeout on its gate.
func timedGate(timeout time.Duration, onTimeout string) policies.Definition {
	d := gatedDef()
	d.Approvals[0].Timeout, d.Approvals[0].OnTimeout = policies.Duration(timeout), onTimeout
	return d
}

// results returns the tool_result entries of call.
func results(tr record.Transcript, call string) []record.Entry {
	var out []record.Entry
	for _, e := range tr.Transcript {
		if e.Kind == record.KindToolResult && e.CallID == call {
			out = append(out, e)
		}
	}
	return out
}

// TestApprovalTimeoutDenies blocks a call on a gate with timeout 2s and
// on_timeout deny: nothing is held while it waits (no session running in
// the worker), and when the timer fires the call is denied once, without
// running, and the run goes on.
func TestApprovalTimeoutDenies(t *testing.T) {
	e := setup(t)
	led := &ledger{path: filepath.Join(t.TempDir(), "ledger")}
	m, reg := registry(t)
	e.start(t, worker.Config{Definitions: defs{"gated": timedGate(2*time.Second, policies.OnTimeoutDeny)}, Tools: worker.ToolMap{"ledger": led}, Agents: []string{"gated"}, Metrics: m})
	ref := e.ref(t, "gated", "s1")
	e.send(t, ref, "write it")
	tr := e.waitStatus(t, ref, record.StatusBlocked)
	call := tr.WaitingFor
	st := state(t, e, ref)
	if st.WaitUntil.IsZero() || st.OnTimeout != policies.OnTimeoutDeny || st.WaitUntil.Sub(st.Since) < 2*time.Second {
		t.Fatalf("blocked with wait_until %s (since %s), on_timeout %q", st.WaitUntil, st.Since, st.OnTimeout)
	}
	list, err := record.List(context.Background(), e.js, e.names)
	if err != nil || len(list) != 1 || !list[0].WaitUntil.Equal(st.WaitUntil) {
		t.Fatalf("status list %+v, %v", list, err)
	}
	// The status index follows: blocked while it waits, done after.
	blocked, err := record.Select(context.Background(), e.js, e.names, record.Query{Status: record.StatusBlocked})
	if err != nil || len(blocked.Sessions) != 1 || blocked.Sessions[0].WaitingFor != call || !blocked.Sessions[0].WaitUntil.Equal(st.WaitUntil) {
		t.Fatalf("blocked in the index: %+v, %v", blocked.Sessions, err)
	}
	waitIdleWorker(t, reg)
	tr = e.waitStatus(t, ref, record.StatusDone)
	natstest.WaitFor(t, 30*time.Second, func() error {
		b, err := record.Select(context.Background(), e.js, e.names, record.Query{Status: record.StatusBlocked})
		if err != nil {
			return err
		}
		d, err := record.Select(context.Background(), e.js, e.names, record.Query{Status: record.StatusDone})
		if err != nil {
			return err
		}
		if len(b.Sessions) != 0 || len(d.Sessions) != 1 {
			return fmt.Errorf("index: %d blocked, %d done", len(b.Sessions), len(d.Sessions))
		}
		return nil
	})
	rs := results(tr, call)
	if len(rs) != 1 || !rs[0].IsError || !strings.Contains(rs[0].Result, "denied: no decision within 2s") {
		t.Fatalf("results of %s: %+v", call, rs)
	}
	if got := led.lines(t); len(got) != 0 {
		t.Fatalf("the denied call ran: %v", got)
	}
	if v := metricWith(t, reg, "jetloop_worker_wait_timeouts_total", "outcome", "applied"); v != 1 {
		t.Errorf("wait timeouts applied: %v", v)
	}
	checkCalls(t, tr)
}

// TestApprovalTimeoutRacesApprove approves gated calls at the moment
// their timeout fires: each time exactly one of the two applies, the
// call has one result, it ran if and only if the approve won, and the
// loser is on record (the approve dead-lettered as not_applicable, or
// the timeout counted stale).
func TestApprovalTimeoutRacesApprove(t *testing.T) {
	e := setup(t)
	led := &ledger{path: filepath.Join(t.TempDir(), "ledger")}
	m, reg := registry(t)
	e.start(t, worker.Config{Definitions: defs{"gated": timedGate(time.Second, policies.OnTimeoutDeny)}, Tools: worker.ToolMap{"ledger": led}, Agents: []string{"gated"}, Metrics: m})
	const rounds = 6
	approved, denied := 0, 0
	for i := range rounds {
		ref := e.ref(t, "gated", fmt.Sprintf("race-%d", i))
		before := len(led.lines(t))
		e.send(t, ref, "write it")
		tr := e.waitStatus(t, ref, record.StatusBlocked)
		call := tr.WaitingFor
		st := state(t, e, ref)
		// The race is with the clock: publish the approve around the
		// moment the timer fires, from a little before to a little after.
		time.Sleep(time.Until(st.WaitUntil.Add(time.Duration(i-2) * 150 * time.Millisecond)))
		seq := publish(t, e, ref, control.Message{Verb: control.Approve, CallID: call})
		tr = e.waitStatus(t, ref, record.StatusDone)
		natstest.WaitFor(t, 30*time.Second, func() error {
			if st := state(t, e, ref); st.CtlSeq < seq {
				return fmt.Errorf("ctl_seq %d < %d", st.CtlSeq, seq)
			}
			return nil
		})
		tr, _ = record.Show(context.Background(), e.js, e.names, ref)
		rs := results(tr, call)
		ran := len(led.lines(t)) - before
		switch {
		case len(rs) != 1:
			t.Fatalf("round %d: %d results for %s: %+v", i, len(rs), call, rs)
		case rs[0].IsError && strings.Contains(rs[0].Result, "no decision within"):
			denied++
			if ran != 0 {
				t.Fatalf("round %d: denied by the timeout, yet ran %d times", i, ran)
			}
		case !rs[0].IsError && ran == 1:
			approved++
		default:
			t.Fatalf("round %d: result %+v, ran %d times", i, rs[0], ran)
		}
		checkCalls(t, tr)
	}
	stale := metricWith(t, reg, "jetloop_worker_wait_timeouts_total", "outcome", "stale")
	natstest.WaitFor(t, 30*time.Second, func() error {
		if n := len(lettersOn(t, e, dlq.NotApplicable)); n != denied {
			return fmt.Errorf("%d not_applicable letters, want %d (one per approve that lost)", n, denied)
		}
		return nil
	})
	t.Logf("%d approved, %d denied by the timeout; %v timeouts found their wait over", approved, denied, stale)
}

// TestApprovalTimeoutEscalatesOrCancels gates a call with timeout 1s:
// on_timeout escalate records an escalation on JL_AUDIT naming the gate
// and the call, and the session waits on, so a later approve still runs
// the call once; on_timeout cancel ends the session with the call not run.
func TestApprovalTimeoutEscalatesOrCancels(t *testing.T) {
	e := setup(t)
	led := &ledger{path: filepath.Join(t.TempDir(), "ledger")}
	esc, can := timedGate(time.Second, policies.OnTimeoutEscalate), timedGate(time.Second, policies.OnTimeoutCancel)
	esc.Name, can.Name = "esc", "can"
	e.start(t, worker.Config{Definitions: defs{"esc": esc, "can": can}, Tools: worker.ToolMap{"ledger": led}, Agents: []string{"esc", "can"}})

	ref := e.ref(t, "esc", "s1")
	e.send(t, ref, "write it")
	tr := e.waitStatus(t, ref, record.StatusBlocked)
	call := tr.WaitingFor
	audit, err := e.js.OrderedConsumer(context.Background(), e.names.StreamAudit(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{"jl.audit.escalation.esc"}})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := audit.Next(jetstream.FetchMaxWait(30 * time.Second))
	if err != nil {
		t.Fatalf("no escalation: %v", err)
	}
	var got worker.Escalation
	if err := json.Unmarshal(msg.Data(), &got); err != nil || got.Session != "s1" || got.CallID != call || got.Approval != "ledger-writes" ||
		got.Tool != "ledger" || !strings.Contains(got.Answer, "jetloop approve|deny esc/s1 "+call) {
		t.Fatalf("escalation %s: %+v, %v", msg.Data(), got, err)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if st := state(t, e, ref); st.Escalated.IsZero() || st.Status != record.StatusBlocked {
			return fmt.Errorf("status %s, escalated %s", st.Status, st.Escalated)
		}
		return nil
	})
	if got := led.lines(t); len(got) != 0 {
		t.Fatalf("the escalated call ran before its approval: %v", got)
	}
	publish(t, e, ref, control.Message{Verb: control.Approve, CallID: call})
	tr = e.waitStatus(t, ref, record.StatusDone)
	if rs := results(tr, call); len(rs) != 1 || rs[0].IsError {
		t.Fatalf("results of %s: %+v", call, rs)
	}
	if got := led.lines(t); len(got) != 1 {
		t.Fatalf("the approved call ran %d times: %v", len(got), got)
	}
	checkCalls(t, tr)

	ref = e.ref(t, "can", "s1")
	e.send(t, ref, "write it")
	tr = e.waitStatus(t, ref, record.StatusCancelled)
	if !strings.Contains(tr.Reason, "no approval of") || !strings.Contains(tr.Reason, "gate ledger-writes") {
		t.Errorf("reason %q", tr.Reason)
	}
	if got := led.lines(t); len(got) != 1 {
		t.Fatalf("the cancelled call ran: %v", got)
	}
	checkCalls(t, tr)
}

// TestAskHumanTimeout bounds ask_human: escalate records an escalation on
// JL_AUDIT and the session waits on (a resume still answers it); cancel
// ends the session.
func TestAskHumanTimeout(t *testing.T) {
	e := setup(t)
	asking := func(name, onTimeout string) policies.Definition {
		return policies.Definition{Name: name, Tools: []string{"ask"}, AskHuman: &policies.Wait{Timeout: policies.Duration(time.Second), OnTimeout: onTimeout},
			Model: scripted(
				policies.ScriptEntry{Text: "Let me ask.", ToolCalls: []policies.ScriptToolCall{{Name: "ask", Args: map[string]any{"question": "Deploy to prod?"}}}},
				policies.ScriptEntry{Text: "Deployed."})}
	}
	e.start(t, worker.Config{Definitions: defs{"esc": asking("esc", policies.OnTimeoutEscalate), "can": asking("can", policies.OnTimeoutCancel)},
		Tools: worker.ToolMap{"ask": asker{}}, Agents: []string{"esc", "can"}})

	esc := e.ref(t, "esc", "s1")
	e.send(t, esc, "ship it")
	tr := e.waitStatus(t, esc, record.StatusBlocked)
	call := tr.Transcript[2].CallID
	audit, err := e.js.OrderedConsumer(context.Background(), e.names.StreamAudit(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{"jl.audit.escalation.esc"}})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := audit.Next(jetstream.FetchMaxWait(30 * time.Second))
	if err != nil {
		t.Fatalf("no escalation: %v", err)
	}
	var got worker.Escalation
	if err := json.Unmarshal(msg.Data(), &got); err != nil || got.Session != "s1" || got.CallID != call || got.Question != "Deploy to prod?" || !strings.Contains(got.Answer, "jetloop resume esc/s1") {
		t.Fatalf("escalation %s: %+v, %v", msg.Data(), got, err)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if st := state(t, e, esc); st.Escalated.IsZero() || st.Status != record.StatusBlocked {
			return fmt.Errorf("status %s, escalated %s", st.Status, st.Escalated)
		}
		return nil
	})
	publish(t, e, esc, control.Message{Verb: control.Resume, Text: "yes, go"})
	tr = e.waitStatus(t, esc, record.StatusDone)
	if rs := results(tr, call); len(rs) != 1 || rs[0].Result != "yes, go" {
		t.Fatalf("results %+v", rs)
	}

	can := e.ref(t, "can", "s1")
	e.send(t, can, "ship it")
	tr = e.waitStatus(t, can, record.StatusCancelled)
	if !strings.Contains(tr.Reason, "no answer to ask_human call") {
		t.Errorf("reason %q", tr.Reason)
	}
	checkCalls(t, tr)
}

// TestScriptScopeRunKeepsItsPlace steers, or interrupts and resumes, a
// run of a scripted agent with script_scope run while its first model
// call is in flight: the message joins the next call's context, and that
// call gets the script's second entry, not the first again (a steer or a
// resume is not a new run).
func TestScriptScopeRunKeepsItsPlace(t *testing.T) {
	tests := []struct {
		name string
		ctl  func(t *testing.T, e *env, ref streams.SessionRef)
		want string // in the last request's user text
	}{
		{name: "steer", want: "mind the tests", ctl: func(t *testing.T, e *env, ref streams.SessionRef) {
			publish(t, e, ref, control.Message{Verb: control.Steer, Text: "mind the tests"})
		}},
		{name: "interrupt and resume", want: "[resume] carry on", ctl: func(t *testing.T, e *env, ref streams.SessionRef) {
			publish(t, e, ref, control.Message{Verb: control.Interrupt})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := setup(t)
			led := &ledger{path: filepath.Join(t.TempDir(), "ledger")}
			def := policies.Definition{Name: "demo", Tools: []string{"ledger"}, Model: policies.Model{Provider: "scripted", ScriptScope: "run", Script: []policies.ScriptEntry{
				callLedger("first"), {Text: "second"}}}}
			p := newProbe(true)
			e.start(t, worker.Config{Definitions: defs{"demo": def}, Tools: worker.ToolMap{"ledger": led}, Agents: []string{"demo"}, Models: p.factory})
			ref := e.ref(t, "demo", "s1")
			e.send(t, ref, "go")
			select {
			case <-p.calling:
			case <-time.After(30 * time.Second):
				t.Fatal("no model call")
			}
			tt.ctl(t, e, ref)
			close(p.hold)
			if tt.name != "steer" {
				e.waitStatus(t, ref, record.StatusPaused)
				publish(t, e, ref, control.Message{Verb: control.Resume, Text: "carry on"})
			}
			tr := e.waitStatus(t, ref, record.StatusDone)
			var texts []string
			for _, en := range tr.Transcript {
				if en.Kind == record.KindAssistant {
					texts = append(texts, en.Text)
				}
			}
			if strings.Join(texts, ",") != "first,second" {
				t.Fatalf("answers %q: the script started over; transcript %s", texts, kinds(tr))
			}
			reqs := p.requests()
			if last := userText(reqs[len(reqs)-1]); !strings.Contains(last, tt.want) {
				t.Errorf("%q is not in the second call's context: %q", tt.want, last)
			}
		})
	}
}
