package worker_test

import (
	"context"
	"errors"
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
	"github.com/jetloop/jetloop/worker"
)

// lettersOn returns the dead letters with reason.
func lettersOn(t *testing.T, e *env, reason dlq.Reason) []*jetstream.RawStreamMsg {
	t.Helper()
	var out []*jetstream.RawStreamMsg
	for _, m := range deadLetters(t, e) {
		if m.Subject == "jl.dlq."+string(reason) {
			out = append(out, m)
		}
	}
	return out
}

// TestControlNeverCreatesASession publishes a cancel (as a chat bot's
// `stop` would) for a session that does not exist: it is dead-lettered as
// no_session and no state is written, so a later request to that session
// runs instead of meeting a cancelled session.
func TestControlNeverCreatesASession(t *testing.T) {
	e := setup(t)
	def := policies.Definition{Name: "demo", Model: scripted(policies.ScriptEntry{Text: "hi"})}
	e.start(t, worker.Config{Definitions: defs{"demo": def}, Agents: []string{"demo"}})
	ref := e.ref(t, "demo", "later")
	publish(t, e, ref, control.Message{Verb: control.Cancel, Text: "stop"})
	natstest.WaitFor(t, 30*time.Second, func() error {
		if n := len(lettersOn(t, e, dlq.NoSession)); n != 1 {
			return fmt.Errorf("%d no_session letters", n)
		}
		return nil
	})
	m := lettersOn(t, e, dlq.NoSession)[0]
	if d := m.Header.Get(dlq.HeaderDetail); !strings.Contains(d, "cancel for demo/later: no such session") || m.Header.Get(dlq.HeaderSubject) != e.names.Ctl(ref) {
		t.Errorf("letter detail %q, subject %q", d, m.Header.Get(dlq.HeaderSubject))
	}
	if _, err := record.Show(context.Background(), e.js, e.names, ref); !errors.Is(err, record.ErrNotFound) {
		t.Fatalf("a control message created the session: %v", err)
	}
	e.send(t, ref, "hello")
	tr := e.waitStatus(t, ref, record.StatusDone)
	if count(tr, record.KindControl, "cancel") != 0 {
		t.Errorf("the new session applied the earlier cancel: %s", kinds(tr))
	}
}

// TestControlBeforeFirstEventSkipped publishes a cancel, then the
// session's first event, while no worker runs: the worker that starts the
// session dead-letters the cancel (it was sent to a session that did not
// exist) and runs the event; a steer sent after the event applies.
func TestControlBeforeFirstEventSkipped(t *testing.T) {
	e := setup(t)
	ref := e.ref(t, "demo", "s1")
	publish(t, e, ref, control.Message{Verb: control.Cancel, Text: "too early"})
	e.send(t, ref, "hello")
	steer := publish(t, e, ref, control.Message{Verb: control.Steer, Text: "be brief"})
	p := newProbe(false)
	def := policies.Definition{Name: "demo", Model: scripted(policies.ScriptEntry{Text: "hi"})}
	e.start(t, worker.Config{Definitions: defs{"demo": def}, Agents: []string{"demo"}, Models: p.factory})
	tr := e.waitStatus(t, ref, record.StatusDone)
	if count(tr, record.KindControl, "cancel") != 0 || count(tr, record.KindControl, "steer") != 1 {
		t.Fatalf("transcript %s", kinds(tr))
	}
	if st := state(t, e, ref); st.CtlSeq != steer {
		t.Errorf("ctl_seq %d, want %d", st.CtlSeq, steer)
	}
	if n := len(lettersOn(t, e, dlq.NoSession)); n != 1 {
		t.Errorf("%d no_session letters, want the cancel's", n)
	}
}

// TestControlThatCannotApplyDeadLettered approves a call that is not
// pending with a raw publish: the transcript notes it as a system entry
// and the message goes to JL_DLQ as not_applicable with the reason.
func TestControlThatCannotApplyDeadLettered(t *testing.T) {
	e := setup(t)
	led := &ledger{path: filepath.Join(t.TempDir(), "ledger")}
	e.start(t, worker.Config{Definitions: defs{"gated": gatedDef()}, Tools: worker.ToolMap{"ledger": led}, Agents: []string{"gated"}})
	ref := e.ref(t, "gated", "s1")
	e.send(t, ref, "write it")
	tr := e.waitStatus(t, ref, record.StatusBlocked)
	seq := publish(t, e, ref, control.Message{Verb: control.Approve, CallID: "call_other"})
	natstest.WaitFor(t, 30*time.Second, func() error {
		if n := len(lettersOn(t, e, dlq.NotApplicable)); n != 1 {
			return fmt.Errorf("%d not_applicable letters", n)
		}
		return nil
	})
	m := lettersOn(t, e, dlq.NotApplicable)[0]
	want := "approve of gated/s1: the session waits for approval of call " + tr.WaitingFor + ", not call_other"
	if d := m.Header.Get(dlq.HeaderDetail); d != want || m.Header.Get(dlq.HeaderSeq) != fmt.Sprint(seq) {
		t.Errorf("letter detail %q seq %q, want %q", d, m.Header.Get(dlq.HeaderSeq), want)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if st := state(t, e, ref); st.CtlSeq != seq {
			return fmt.Errorf("ctl_seq %d", st.CtlSeq)
		}
		return nil
	})
	tr, err := record.Show(context.Background(), e.js, e.names, ref)
	if err != nil {
		t.Fatal(err)
	}
	last := tr.Transcript[len(tr.Transcript)-1]
	if last.Kind != record.KindSystem || !strings.Contains(last.Text, "ignored: the session waits for approval of call") || tr.Status != record.StatusBlocked {
		t.Errorf("last entry %+v, status %s", last, tr.Status)
	}
}
