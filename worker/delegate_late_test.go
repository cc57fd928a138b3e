package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/dlq"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/worker"
)

// A child whose parent's run ended first (here, cancelled) still answers:
// the parent takes that late answer as a record in its transcript and
// counts what the child consumed in its tree's usage, and nothing goes to
// the dead letters, which are for events that need an operator.
func TestDelegateLateAnswerIsCounted(t *testing.T) {
	e := setup(t)
	lead := policies.Definition{Name: "lead", Tools: []string{"delegate"},
		Model: scripted(policies.ScriptEntry{Text: "Ask.", ToolCalls: []policies.ScriptToolCall{delegateCall("asker", "ask someone", nil, nil)}},
			policies.ScriptEntry{Text: "never reached"})}
	asker := policies.Definition{Name: "asker", Tools: []string{"ask_human"},
		Model: scripted(policies.ScriptEntry{Text: "Asking.", ToolCalls: []policies.ScriptToolCall{{Name: "ask_human", Args: map[string]any{"question": "Which one?"}}},
			Usage: policies.Usage{InputTokens: 70, OutputTokens: 7}},
			policies.ScriptEntry{Text: "Thanks."})}
	d := defs{"lead": lead, "asker": asker}
	e.start(t, worker.Config{Definitions: d, Tools: builtinTools(t, "delegate", "ask_human"), Agents: []string{"lead", "asker"},
		Admit: admitWith(t, e, d)})
	ref := e.ref(t, "lead", "l1")
	e.send(t, ref, "go")
	cref := childRef(t, e, "asker", ref, "call_0_0")
	e.waitStatus(t, cref, record.StatusBlocked)
	e.waitStatus(t, ref, record.StatusWaiting)
	publish(t, e, ref, control.Message{Verb: control.Cancel, Text: "enough"})
	e.waitStatus(t, cref, record.StatusCancelled)
	natstest.WaitFor(t, 30*time.Second, func() error {
		if st := state(t, e, cref); st.Delegation == nil || !st.Delegation.Answered {
			return fmt.Errorf("the child has not answered")
		}
		return nil
	})
	waitAnswerRead(t, e, cref, ref)
	letters, _, err := dlq.List(context.Background(), e.js, e.names, dlq.Filter{Agent: "lead"})
	if err != nil {
		t.Fatal(err)
	}
	if len(letters) != 0 {
		t.Fatalf("the late answer went to the dead letters: %+v", letters)
	}
	st := state(t, e, ref)
	if st.Status != record.StatusCancelled || st.Delegated.Sessions != 1 || st.Delegated.Usage.Tokens() != 77 || st.Delegated.Turns != 1 {
		t.Fatalf("the parent %s counts its tree %+v, want the child's 77 tokens in one turn", st.Status, st.Delegated)
	}
	tr := e.waitStatus(t, ref, record.StatusCancelled)
	checkCalls(t, tr)
	if r := delegateResults(tr); len(r) != 1 {
		t.Fatalf("the call has %d results, want the one its cancel gave: %+v", len(r), r)
	}
	if n := count(tr, record.KindSystem, "delegate"); n < 2 {
		t.Fatalf("no record of the late answer in the transcript: %+v", tr.Transcript)
	}
}

// waitAnswerRead waits until child has answered and parent has read
// everything on its subject, the answer included.
func waitAnswerRead(t *testing.T, e *env, child, parent streams.SessionRef) {
	t.Helper()
	natstest.WaitFor(t, 30*time.Second, func() error {
		if st := state(t, e, child); st.Delegation == nil || !st.Delegation.Answered {
			return fmt.Errorf("%s has not answered", child)
		}
		return nil
	})
	in, err := e.js.Stream(context.Background(), e.names.StreamIn())
	if err != nil {
		t.Fatal(err)
	}
	last, err := in.GetLastMsgForSubject(context.Background(), e.names.In(parent))
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if st := state(t, e, parent); st.InSeq < last.Sequence {
			return fmt.Errorf("%s read up to %d, the answer is %d", parent, st.InSeq, last.Sequence)
		}
		return nil
	})
}

// Cancelling a root whose child waits for a grandchild: the child answers
// with what the grandchild consumed too (its ledger account counted it),
// though the grandchild, cancelled in turn, answers only the child, and
// late; the root's tree usage is the whole tree's.
func TestDelegateCancelCountsTheWholeTree(t *testing.T) {
	e := setup(t)
	root := policies.Definition{Name: "root", Tools: []string{"delegate"},
		Model: scripted(policies.ScriptEntry{Text: "Down.", ToolCalls: []policies.ScriptToolCall{delegateCall("mid", "middle", nil, nil)}})}
	mid := policies.Definition{Name: "mid", Tools: []string{"delegate"},
		Model: scripted(policies.ScriptEntry{Text: "Further.", ToolCalls: []policies.ScriptToolCall{delegateCall("leaf", "ask", nil, nil)},
			Usage: policies.Usage{InputTokens: 10, OutputTokens: 1}})}
	leaf := policies.Definition{Name: "leaf", Tools: []string{"ask_human"},
		Model: scripted(policies.ScriptEntry{Text: "Asking.", ToolCalls: []policies.ScriptToolCall{{Name: "ask_human", Args: map[string]any{"question": "Which one?"}}},
			Usage: policies.Usage{InputTokens: 70, OutputTokens: 7}})}
	d := defs{"root": root, "mid": mid, "leaf": leaf}
	e.start(t, worker.Config{Definitions: d, Tools: builtinTools(t, "delegate", "ask_human"), Agents: []string{"root", "mid", "leaf"},
		Admit: admitWith(t, e, d)})
	ref := e.ref(t, "root", "r1")
	e.send(t, ref, "go")
	mref := childRef(t, e, "mid", ref, "call_0_0")
	lref := childRef(t, e, "leaf", mref, "call_0_0")
	e.waitStatus(t, lref, record.StatusBlocked)
	e.waitStatus(t, ref, record.StatusWaiting)
	publish(t, e, ref, control.Message{Verb: control.Cancel, Text: "enough"})
	e.waitStatus(t, lref, record.StatusCancelled)
	waitAnswerRead(t, e, mref, ref)
	waitAnswerRead(t, e, lref, mref)
	if st := state(t, e, ref); st.Delegated.Sessions != 2 || st.Delegated.Usage.Tokens() != 88 || st.Delegated.Turns != 2 {
		t.Fatalf("the root counts its tree %+v, want two sessions, 88 tokens, 2 turns", st.Delegated)
	}
	if st := state(t, e, mref); st.Status != record.StatusCancelled || st.Delegated.Sessions != 1 || st.Delegated.Usage.Tokens() != 77 {
		t.Fatalf("the child %s counts its tree %+v", st.Status, st.Delegated)
	}
	for _, a := range []string{"root", "mid"} {
		letters, _, err := dlq.List(context.Background(), e.js, e.names, dlq.Filter{Agent: a})
		if err != nil {
			t.Fatal(err)
		}
		if len(letters) != 0 {
			t.Fatalf("%s has dead letters: %+v", a, letters)
		}
	}
}
