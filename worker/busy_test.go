package worker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/worker"
)

// sendOnBusy publishes a request as admission stamps it for a trigger
// whose on_busy is onBusy, and returns its event id.
func (e *env) sendOnBusy(t *testing.T, ref streams.SessionRef, text, onBusy string) string {
	t.Helper()
	ev := event.New()
	ev.SetID(uuid.NewString())
	ev.SetSource("/test")
	ev.SetType(events.TypeRequest)
	ev.SetExtension(events.ExtAgent, ref.Agent)
	ev.SetExtension(events.ExtSession, ref.Session)
	_ = ev.SetData("text/plain", []byte(text))
	ev = admission.Stamp(ev, admission.Decision{Agent: ref.Agent, Session: ref.Session, Trigger: "req", OnBusy: onBusy})
	m, err := events.ToMsg(e.names.In(ref), ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	return ev.ID()
}

func busyDef(onBusy string, script ...policies.ScriptEntry) policies.Definition {
	return policies.Definition{Name: "busy", Tools: []string{"sleep"}, Model: scripted(script...),
		Triggers: []policies.Trigger{{Name: "req", When: "true", OnBusy: onBusy}}}
}

// on_busy: interrupt stops the running run at once, its running tool
// included, settles it, and starts the new event's run.
func TestOnBusyInterruptStopsTheRunningRun(t *testing.T) {
	e := setup(t)
	started := make(chan string, 1)
	def := busyDef(policies.OnBusyInterrupt,
		policies.ScriptEntry{Text: "Sleeping.", ToolCalls: []policies.ScriptToolCall{{Name: "sleep"}}},
		policies.ScriptEntry{Text: "Done with the new one."})
	e.start(t, worker.Config{Definitions: defs{"busy": def}, Agents: []string{"busy"}, Tools: worker.ToolMap{"sleep": sleeper{started}}})
	ref := e.ref(t, "busy", "s1")
	e.send(t, ref, "first")
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the tool never started")
	}
	id := e.sendOnBusy(t, ref, "second", policies.OnBusyInterrupt)
	tr := e.waitStatus(t, ref, record.StatusDone)
	if got, want := kinds(tr), "user,assistant,tool_call,system,tool_result,user,assistant"; got != want {
		t.Fatalf("transcript %s, want %s", got, want)
	}
	if r := tr.Transcript[4]; !r.IsError || !strings.Contains(r.Result, "interrupted by a newer event; may or may not have run") {
		t.Errorf("the interrupted call's result: %+v", r)
	}
	if sys := tr.Transcript[3]; !strings.Contains(sys.Text, id) {
		t.Errorf("the system entry does not name the interrupting event %s: %q", id, sys.Text)
	}
	if last := tr.Transcript[6]; last.Text != "Done with the new one." {
		t.Errorf("the new run answered %q", last.Text)
	}
	checkCalls(t, tr)
}

// on_busy: steer joins the running run before its next model call: one
// run, which sees the new event, and no second run.
func TestOnBusySteerJoinsTheRunningRun(t *testing.T) {
	e := setup(t)
	def := busyDef(policies.OnBusySteer,
		policies.ScriptEntry{Text: "Looking.", Delay: policies.Duration(time.Second), ToolCalls: []policies.ScriptToolCall{{Name: "ledger"}}},
		policies.ScriptEntry{Text: "Seen both."},
		policies.ScriptEntry{Text: "A run of its own."})
	def.Tools = []string{"ledger"}
	led := &ledger{path: t.TempDir() + "/ledger"}
	modelCall := make(chan struct{}, 4)
	trace := func(_ context.Context, p worker.TracePoint) {
		if p.Phase == worker.PhaseEffect && p.Kind == record.StepModel {
			modelCall <- struct{}{}
		}
	}
	e.start(t, worker.Config{Definitions: defs{"busy": def}, Agents: []string{"busy"}, Tools: worker.ToolMap{"ledger": led}, Trace: trace})
	ref := e.ref(t, "busy", "s1")
	e.send(t, ref, "first")
	select {
	case <-modelCall: // the first model call goes on: the steer comes during it
	case <-time.After(30 * time.Second):
		t.Fatal("no model call")
	}
	e.sendOnBusy(t, ref, "also this", policies.OnBusySteer)
	tr := e.waitStatus(t, ref, record.StatusDone)
	if got, want := kinds(tr), "user,assistant,tool_call,tool_result,user,assistant"; got != want {
		t.Fatalf("transcript %s, want %s", got, want)
	}
	if tr.Transcript[4].Text != "also this" || tr.Transcript[5].Text != "Seen both." {
		t.Fatalf("the steer and the answer: %+v %+v", tr.Transcript[4], tr.Transcript[5])
	}
}

// on_busy: reject does not run an event that comes while the run goes
// on, and records the decision; one that comes when the session rests
// runs.
func TestOnBusyRejectRecordsAndDoesNotRun(t *testing.T) {
	e := setup(t)
	def := busyDef(policies.OnBusyReject,
		policies.ScriptEntry{Text: "Slowly.", Delay: policies.Duration(time.Second)},
		policies.ScriptEntry{Text: "Later."})
	e.start(t, worker.Config{Definitions: defs{"busy": def}, Agents: []string{"busy"}})
	ref := e.ref(t, "busy", "s1")
	e.send(t, ref, "first")
	e.waitStatus(t, ref, record.StatusWorking)
	rejected := e.sendOnBusy(t, ref, "while busy", policies.OnBusyReject)
	tr := e.waitStatus(t, ref, record.StatusDone)
	// The rejection is in JL_AUDIT beside admission's decisions.
	var rec admission.Record
	waitAudit(t, e, func(r admission.Record) bool { rec = r; return r.Event.ID == rejected && r.Outcome == admission.Busy })
	if rec.Agent != "busy" || rec.Trigger != "req" || !strings.Contains(rec.Reason, "on_busy: reject") {
		t.Errorf("the rejection's record: %+v", rec)
	}
	e.sendOnBusy(t, ref, "at rest", policies.OnBusyReject)
	natstest.WaitFor(t, 30*time.Second, func() error {
		var err error
		if tr, err = record.Show(context.Background(), e.js, e.names, ref); err != nil {
			return err
		}
		if got, want := kinds(tr), "user,assistant,user,assistant"; got != want || tr.Status != record.StatusDone {
			return fmt.Errorf("transcript %s (%s), want %s", got, tr.Status, want)
		}
		return nil
	})
	if tr.Transcript[2].Text != "at rest" {
		t.Fatalf("the second run's event: %+v", tr.Transcript[2])
	}
}

// waitAudit reads JL_AUDIT's admission records until ok accepts one.
func waitAudit(t *testing.T, e *env, ok func(admission.Record) bool) {
	t.Helper()
	c, err := e.js.OrderedConsumer(context.Background(), e.names.StreamAudit(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{e.names.AuditAll()}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		m, err := c.Next(jetstream.FetchMaxWait(time.Until(deadline)))
		if err != nil {
			break
		}
		// One record a message, or several, one a line.
		// Records of other kinds than admission's are no decisions.
		recs, _ := admission.ParseRecords(m.Data())
		for _, r := range recs {
			if ok(r) {
				return
			}
		}
	}
	t.Fatal("no such record in JL_AUDIT")
}
