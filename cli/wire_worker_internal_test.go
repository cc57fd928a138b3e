package cli

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools"
)

// The tools a worker runs are the tools definitions are checked against:
// a tool added to one and not the other fails here, not in a user's run.
func TestWorkerToolsAreTheKnownTools(t *testing.T) {
	var names []string
	for _, tl := range workerTools(&Runtime{Names: streams.Default(), Getenv: func(string) string { return "" }}, nil, nil, nil, nil, nil, 0) {
		names = append(names, tl.Spec().Name)
	}
	slices.Sort(names)
	if want := tools.Names(); !slices.Equal(names, want) {
		t.Fatalf("worker tools %v, definitions are checked against %v", names, want)
	}
}

// delegation is the delegate event of call call_0_0 of lead/s1, asking
// helper for task within tokens.
func delegation(t *testing.T, task string, tokens int64) event.Event {
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

// TestDelegationAdmitAnswersAnotherDelegationUnderAnIDAsAConflict: the
// worker's delegation pipeline answers a delegate event whose id was used
// for another delegation (a budget carved anew under the same call id) as
// a conflict, which the calling model is told and never retries, not as
// an error to try again nor as a duplicate of the first.
func TestDelegationAdmitAnswersAnotherDelegationUnderAnIDAsAConflict(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	nc, js := natstest.Connect(t, srv.ClientURL())
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	rules := admission.NewRules()
	c, err := policies.Compile(policies.Definition{Name: "helper", Version: 1,
		Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{{Text: "helped."}}}})
	if err != nil {
		t.Fatal(err)
	}
	rules.Set(c)
	rt := &Runtime{NC: nc, JS: js, Names: streams.Default(), Log: slog.New(slog.DiscardHandler), Getenv: func(string) string { return "" }}
	admit, err := delegationAdmit(ctx, rt, rules, rt.Log)
	if err != nil {
		t.Fatal(err)
	}
	first, err := admit(ctx, delegation(t, "help", 1000))
	if err != nil || len(first.Admitted) != 1 || first.Conflict != "" {
		t.Fatalf("first delegation: %+v, %v", first, err)
	}
	other, err := admit(ctx, delegation(t, "help", 900))
	if err != nil {
		t.Fatalf("another delegation under the id: %v, want a conflict answered", err)
	}
	if !strings.Contains(other.Conflict, `id "call_0_0"`) || other.Duplicate || len(other.Admitted) != 0 || len(other.Refused) != 0 {
		t.Fatalf("another delegation under the id: %+v, want a conflict", other)
	}
}
