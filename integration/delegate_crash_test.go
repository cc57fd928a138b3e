package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/worker"
)

// delegationPipeline is the admission pipeline of a worker's delegate
// calls over fixed definitions, as `jetloop worker` wires it over the
// stored ones.
func delegationPipeline(t *testing.T, js jetstream.JetStream, defs fixedDefs) worker.AdmitFunc {
	t.Helper()
	ctx := context.Background()
	rules := admission.NewRules()
	for name := range defs {
		def, _ := defs.Get(ctx, name)
		c, err := policies.Compile(def)
		if err != nil {
			t.Fatal(err)
		}
		rules.Set(c)
	}
	names := streams.Default()
	adm, err := admission.New(ctx, js, rules, admission.Config{Names: names})
	if err != nil {
		t.Fatal(err)
	}
	dd, err := dedupe.New(ctx, js, dedupe.Config{Names: names})
	if err != nil {
		t.Fatal(err)
	}
	pipe := ingest.Pipeline(js, dd, adm, names, nil, 0)
	return func(ctx context.Context, e event.Event) (worker.Admission, error) {
		res, err := pipe(ctx, &ingest.Delivery{Event: e, Receiver: "delegate"})
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

// delegateCrashDefs are a lead that delegates one task to a helper, which
// runs the ledger tool (replay-unsafe) once and answers.
func delegateCrashDefs() (lead, helper policies.Definition) {
	lead = policies.Definition{Name: "lead", Tools: []string{"delegate"}, Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{
		{Text: "Delegating.", ToolCalls: []policies.ScriptToolCall{{Name: "delegate", Args: map[string]any{"agent": "helper", "task": "count once"}}}},
		{Text: "Lead done."},
	}}}
	helper = policies.Definition{Name: "helper", Tools: []string{"ledger"}, Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{
		{Text: "Counting.", ToolCalls: []policies.ScriptToolCall{{Name: "ledger", Args: map[string]any{}}}},
		{Text: "Helper done."},
	}}}
	return lead, helper
}

// TestWorkerCrashDelegation is the crash table of a delegation: a worker
// process is killed -9 at each point of the parent's delegate step, of
// the child's run and of the parent's run after the answer, and another
// worker process takes over. Whatever the point, the child starts once
// (one delegate event in JL_IN, one session), its replay-unsafe call runs
// once, it answers once, and the parent's call gets exactly one result and
// the parent finishes once.
func TestWorkerCrashDelegation(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker subprocesses")
	}
	child := "lead/s1/call_0_0"
	tests := []struct {
		name string
		at   crashPoint
	}{
		{name: "parent's delegate intent written, nothing published", at: crashPoint{Phase: worker.PhaseEffect, Kind: record.StepTool, Step: 2, Session: "s1"}},
		{name: "child's start published, the call not settled", at: crashPoint{Phase: worker.PhaseSettle, Kind: record.StepTool, Step: 2, Session: "s1"}},
		{name: "the child's model call in flight", at: crashPoint{Phase: worker.PhaseEffect, Kind: record.StepModel, Step: 1, Session: child}},
		{name: "the child's run over, its answer not published", at: crashPoint{Phase: worker.PhaseSettled, Kind: record.StepModel, Step: 3, Session: child}},
		{name: "the parent's model call after the answer in flight", at: crashPoint{Phase: worker.PhaseEffect, Kind: record.StepModel, Step: 4, Session: "s1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newCrashEnv(t)
			lead, helper := delegateCrashDefs()
			at := tt.at
			spec := e.spec("w1", lead, false, &at)
			spec.More = []policies.Definition{helper}
			w1 := startChild(t, spec)
			ref := e.send(t, "lead", "s1", "go")
			w1.waitPoint(t, time.Minute)
			w1.kill()

			spec = e.spec("w2", lead, false, nil)
			spec.More = []policies.Definition{helper}
			w2 := startChild(t, spec)
			tr := e.waitDone(t, ref, w1, w2)
			res := checkOneResult(t, tr)
			checkTranscript(t, tr)
			if r := res["call_0_0"]; r.Result != "Helper done." || r.IsError {
				t.Fatalf("the delegate call's result %+v\n%s", r, w2.output())
			}
			if n := countText(tr, record.KindAssistant, "Lead done."); n != 1 {
				t.Fatalf("the parent finished %d times", n)
			}
			cref, _ := streams.NewSessionRef("helper", child)
			ctr := e.waitDone(t, cref, w2)
			checkOneResult(t, ctr)
			if n := countKind(ctr, record.KindEvent); n != 1 {
				t.Fatalf("the child has %d events, want its delegation once", n)
			}
			if got := ledgerCounts(t, spec.Ledger)[child+" call_0_0"]; got != 1 {
				t.Fatalf("the child's replay-unsafe call ran %d times", got)
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
			if n := subjectMessages(t, e, cref); n != 1 {
				t.Fatalf("%d delegate events in JL_IN for the child, want 1", n)
			}
			if n := subjectMessages(t, e, ref); n != 2 {
				t.Fatalf("%d events in JL_IN for the parent, want the request and one answer", n)
			}
		})
	}
}

// countText counts the entries of kind with text.
func countText(tr record.Transcript, k record.Kind, text string) int {
	n := 0
	for _, e := range tr.Transcript {
		if e.Kind == k && e.Text == text {
			n++
		}
	}
	return n
}

// subjectMessages counts the messages JL_IN holds for a session.
func subjectMessages(t *testing.T, e *crashEnv, ref streams.SessionRef) int {
	t.Helper()
	st, err := e.js.Stream(context.Background(), e.names.StreamIn())
	if err != nil {
		t.Fatal(err)
	}
	subject := e.names.In(ref)
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	return int(info.State.Subjects[subject])
}
