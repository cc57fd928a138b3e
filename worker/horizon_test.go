package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/worker"
)

// held is how many messages JL_IN holds on subject.
func held(t *testing.T, e *env, subject string) uint64 {
	t.Helper()
	s, err := e.js.Stream(context.Background(), e.names.StreamIn())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subject]
}

// A living session keeps the newest EventHorizon of its consumed events in
// JL_IN as it rests: older ones are removed, its transcript still holds
// every one, read_event says an event past the horizon is no longer kept
// and reads one within it, and the session goes on taking events.
func TestConsumedEventsPastTheHorizonAreTrimmed(t *testing.T) {
	e := setup(t)
	var script []policies.ScriptEntry
	for i := range 8 {
		script = append(script, policies.ScriptEntry{Text: fmt.Sprintf("Noted %d.", i)})
	}
	def := policies.Definition{Name: "keeper", Model: scripted(script...)}
	e.start(t, worker.Config{Definitions: defs{"keeper": def}, Agents: []string{"keeper"}, EventHorizon: 3})
	ref := e.ref(t, "keeper", "repo")
	subject := e.names.In(ref)
	var seqs []uint64
	for i := range 6 {
		seqs = append(seqs, e.send(t, ref, fmt.Sprintf("event %d", i)))
		// One run each, so the session rests between them too.
		e.waitRuns(t, ref, i+1)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if n := held(t, e, subject); n != 3 {
			return fmt.Errorf("JL_IN holds %d events of the session, want its horizon, 3", n)
		}
		return nil
	})
	in, err := e.js.Stream(context.Background(), e.names.StreamIn())
	if err != nil {
		t.Fatal(err)
	}
	for i, seq := range seqs {
		_, err := in.GetMsg(context.Background(), seq)
		if kept := err == nil; kept != (i >= 3) {
			t.Fatalf("event %d (seq %d): kept %v, want the newest three kept: %v", i, seq, kept, err)
		}
	}
	tr, err := record.Show(context.Background(), e.js, e.names, ref)
	if err != nil {
		t.Fatal(err)
	}
	users := 0
	for _, en := range tr.Transcript {
		if en.Kind == record.KindUser {
			users++
		}
	}
	if users != 6 {
		t.Fatalf("the transcript holds %d of the 6 events", users)
	}
	var readEvent tools.Tool
	for _, tool := range tools.Builtins(tools.BuiltinConfig{Events: tools.Events(e.js, in), Names: e.names, EventHorizon: 3}) {
		if tool.Spec().Name == "read_event" {
			readEvent = tool
		}
	}
	read := func(seq uint64) string {
		args, _ := json.Marshal(map[string]any{"seq": seq})
		res, err := readEvent.Call(context.Background(), tools.Call{ID: "c1", Args: args, Agent: ref.Agent, Session: ref.Session})
		if err != nil {
			t.Fatal(err)
		}
		return res.Content
	}
	if got := read(seqs[0]); !strings.Contains(got, fmt.Sprintf("no event %d is kept", seqs[0])) || !strings.Contains(got, "newest 3 of the events it consumed") {
		t.Fatalf("read_event past the horizon: %s", got)
	}
	if got := read(seqs[5]); !strings.Contains(got, "event 5") {
		t.Fatalf("read_event within the horizon: %s", got)
	}
	// It lives on.
	e.send(t, ref, "event 6")
	e.waitRuns(t, ref, 7)
	natstest.WaitFor(t, 30*time.Second, func() error {
		if n := held(t, e, subject); n != 3 {
			return fmt.Errorf("JL_IN holds %d events of the session after a seventh, want 3", n)
		}
		return nil
	})
}

// A trim removes nothing while the session has an event it has not
// consumed, and never one after the last it consumed.
func TestTrimNeverRemovesAnUnconsumedEvent(t *testing.T) {
	e := setup(t)
	w := e.start(t, worker.Config{Definitions: defs{}, Agents: []string{"other"}, EventHorizon: 3})
	// No worker serves the agent: its events stay unconsumed.
	ref := e.ref(t, "unserved", "s")
	var seqs []uint64
	for i := range 6 {
		ack, err := e.js.Publish(context.Background(), e.names.In(ref), []byte(fmt.Sprintf("event %d", i)))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ack.Sequence)
	}
	// Consumed up to the fourth: the fifth and sixth are not.
	if n, err := w.TrimConsumed(context.Background(), ref, seqs[3]); err != nil || n != 0 {
		t.Fatalf("trim with unconsumed events: removed %d, %v", n, err)
	}
	if n := held(t, e, e.names.In(ref)); n != 6 {
		t.Fatalf("JL_IN holds %d of the session's 6 events after a trim with two unconsumed", n)
	}
	// All consumed: the newest three stay.
	if n, err := w.TrimConsumed(context.Background(), ref, seqs[5]); err != nil || n != 3 {
		t.Fatalf("trim of 6 consumed events: removed %d, %v", n, err)
	}
	in, _ := e.js.Stream(context.Background(), e.names.StreamIn())
	if _, err := in.GetMsg(context.Background(), seqs[2]); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("the third event after the trim: %v", err)
	}
	if _, err := in.GetMsg(context.Background(), seqs[3]); err != nil {
		t.Fatalf("the fourth event after the trim: %v", err)
	}
}
