package worker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/dlq"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/schedule"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/worker"
)

// deadLetters returns the messages in JL_DLQ.
func deadLetters(t *testing.T, e *env) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	s, err := e.js.Stream(ctx, e.names.StreamDLQ())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		out = append(out, m)
	}
	return out
}

func metricWith(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestTicksToCancelledSessionDeadLettered cancels a persistent scheduled
// session: the server's ticks that reach it afterwards land in JL_DLQ
// with the reason (their schedule headers, which no client may publish,
// kept under Jl-Orig- names), and each counts as a failed tick, so the
// schedule's breaker trips.
func TestTicksToCancelledSessionDeadLettered(t *testing.T) {
	e := setup(t)
	r := runSchedule(t, e, monitorDef(policies.Schedule{Name: "drift", Cron: "@every 1s", MaxFailures: 2},
		policies.ScriptEntry{Text: "checked"}))
	ref := e.ref(t, "mon", "drift")
	e.waitStatus(t, ref, record.StatusDone)
	publish(t, e, ref, control.Message{Verb: control.Cancel, Text: "no more checks"})
	e.waitStatus(t, ref, record.StatusCancelled)
	natstest.WaitFor(t, 60*time.Second, func() error {
		for _, m := range deadLetters(t, e) {
			if m.Subject == "jl.dlq.session_cancelled" && m.Header.Get(dlq.HeaderDetail) == "session is cancelled" && m.Header.Get("Jl-Orig-"+schedule.HeaderScheduler) != "" {
				return nil
			}
		}
		return fmt.Errorf("no tick in the dead letter stream yet")
	})
	h := waitHealth(t, r, func(h schedule.Health) error {
		if h.State != schedule.StateSuspended {
			return fmt.Errorf("schedule %s, %d failures", h.State, h.ConsecutiveFailures)
		}
		return nil
	})
	if h.LastResult != schedule.ResultFailed {
		t.Fatalf("health %+v", h)
	}
}

// TestDeadLetterFailureLeavesInputUnconsumed sends an event to a
// cancelled session while JL_DLQ is gone: the event is not consumed
// without a record; once the stream is back, it is dead-lettered, then
// consumed.
func TestDeadLetterFailureLeavesInputUnconsumed(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	m, reg := registry(t)
	def := policies.Definition{Name: "demo", Model: scripted(policies.ScriptEntry{Text: "hi"})}
	e.start(t, worker.Config{Definitions: defs{"demo": def}, Agents: []string{"demo"}, Metrics: m})
	ref := e.ref(t, "demo", "s1")
	e.send(t, ref, "hello")
	e.waitStatus(t, ref, record.StatusDone)
	publish(t, e, ref, control.Message{Verb: control.Cancel})
	e.waitStatus(t, ref, record.StatusCancelled)

	if err := e.js.DeleteStream(ctx, e.names.StreamDLQ()); err != nil {
		t.Fatal(err)
	}
	seq := e.send(t, ref, "anyone?")
	natstest.WaitFor(t, 30*time.Second, func() error {
		if v := metricWith(t, reg, "jetloop_worker_dead_letters_total", "result", "failed"); v == 0 {
			return fmt.Errorf("no dead letter failed yet")
		}
		return nil
	})
	if st := state(t, e, ref); st.InSeq >= seq {
		t.Fatalf("input %d recorded consumed (in_seq %d) though its dead letter failed", seq, st.InSeq)
	}
	if _, err := streams.Provision(ctx, e.js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 60*time.Second, func() error {
		if st := state(t, e, ref); st.InSeq < seq {
			return fmt.Errorf("in_seq %d", st.InSeq)
		}
		for _, m := range deadLetters(t, e) {
			if m.Header.Get("Jl-Dlq-Seq") == fmt.Sprint(seq) {
				return nil
			}
		}
		return fmt.Errorf("input %d not in the dead letter stream", seq)
	})
}

// TestInputForSessionNoEventNamesDeadLettered publishes an event on an
// input subject whose session token decodes to a control character, a
// session no event can carry: it goes to JL_DLQ as a bad subject, and no
// session of that name is started.
func TestInputForSessionNoEventNamesDeadLettered(t *testing.T) {
	e := setup(t)
	def := policies.Definition{Name: "demo", Model: scripted(policies.ScriptEntry{Text: "hi"})}
	e.start(t, worker.Config{Definitions: defs{"demo": def}, Agents: []string{"demo"}})
	ev, err := events.RequestEvent(events.Request{Agent: "demo", Session: "s1", Text: "hello"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	m, err := events.ToMsg("jl.in.demo.=00", ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		for _, l := range deadLetters(t, e) {
			if l.Header.Get(dlq.HeaderReason) == string(dlq.BadSubject) && l.Header.Get(dlq.HeaderSubject) == "jl.in.demo.=00" {
				return nil
			}
		}
		return fmt.Errorf("no bad_subject dead letter of jl.in.demo.=00")
	})
	nul, err := streams.NewSessionRef("demo", "\x00")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := record.Show(context.Background(), e.js, e.names, nul); !errors.Is(err, record.ErrNotFound) {
		t.Fatalf("the session named NUL: %v, want none", err)
	}
}
