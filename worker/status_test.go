package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jetloop/jetloop/dlq"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/worker"
)

// TestEventWithAStatusHeader sends a session an event without data whose
// sender set a Status header, then one more: read by direct get, the
// client would take a 503 for no responders, every time, and the session
// would stop before it. The worker reads it where it is stored: both
// events run, and nothing is dead-lettered.
func TestEventWithAStatusHeader(t *testing.T) {
	for _, status := range []string{"503", "404", "408", "100"} {
		t.Run(status, func(t *testing.T) {
			e := setup(t)
			ctx := context.Background()
			def := policies.Definition{Name: "demo", Model: scripted(
				policies.ScriptEntry{Text: "one"}, policies.ScriptEntry{Text: "two"}, policies.ScriptEntry{Text: "three"})}
			e.start(t, worker.Config{Definitions: defs{"demo": def}, Agents: []string{"demo"}})
			ref := e.ref(t, "demo", "s1")
			e.send(t, ref, "first")
			e.waitStatus(t, ref, record.StatusDone)

			ev := event.New()
			ev.SetID("ping-1")
			ev.SetSource("test")
			ev.SetType("com.example.ping")
			m, err := events.ToMsg(e.names.In(ref), ev)
			if err != nil {
				t.Fatal(err)
			}
			m.Header.Set("Status", status)
			ack, err := e.js.PublishMsg(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			last := e.send(t, ref, "last")

			var tr record.Transcript
			natstest.WaitFor(t, 30*time.Second, func() error {
				var err error
				if tr, err = record.Show(ctx, e.js, e.names, ref); err != nil {
					return err
				}
				if tr.Status != record.StatusDone || tr.InSeq < last {
					return fmt.Errorf("status %s, consumed to %d, want done at %d (event with Status %s at %d)", tr.Status, tr.InSeq, last, status, ack.Sequence)
				}
				return nil
			})
			var texts []string
			for _, en := range tr.Transcript {
				if en.Kind == record.KindAssistant {
					texts = append(texts, en.Text)
				}
			}
			if fmt.Sprint(texts) != "[one two three]" {
				t.Fatalf("replies %q, want one for each of the three events; transcript %s", texts, kinds(tr))
			}
			if dl := deadLetters(t, e); len(dl) != 0 {
				t.Fatalf("%d dead letters, first %s: %s", len(dl), dl[0].Subject, dl[0].Header.Get(dlq.HeaderDetail))
			}
		})
	}
}

// TestEventThatReadsAsTheConsumersEnd sends a session an event without
// data whose sender set the Status and Description the server ends a
// pull with when the consumer is gone: the client stops consuming when
// it is delivered. The worker consumes again, so another session of the
// agent runs, and the session the event was for runs its next event.
func TestEventThatReadsAsTheConsumersEnd(t *testing.T) {
	for _, h := range []map[string]string{
		{"Status": "409", "Description": "Consumer Deleted"},
		{"Status": "400", "Description": "Bad Request"},
	} {
		t.Run(h["Status"], func(t *testing.T) {
			e := setup(t)
			ctx := context.Background()
			def := policies.Definition{Name: "demo", Model: scripted(
				policies.ScriptEntry{Text: "one"}, policies.ScriptEntry{Text: "two"}, policies.ScriptEntry{Text: "three"})}
			e.start(t, worker.Config{Definitions: defs{"demo": def}, Agents: []string{"demo"}})
			ref := e.ref(t, "demo", "s1")
			e.send(t, ref, "first")
			e.waitStatus(t, ref, record.StatusDone)

			ev := event.New()
			ev.SetID("ping-1")
			ev.SetSource("test")
			ev.SetType("com.example.ping")
			m, err := events.ToMsg(e.names.In(ref), ev)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range h {
				m.Header.Set(k, v)
			}
			ack, err := e.js.PublishMsg(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			other := e.ref(t, "demo", "s2")
			e.send(t, other, "hello")
			e.waitStatus(t, other, record.StatusDone)
			last := e.send(t, ref, "last")
			natstest.WaitFor(t, 30*time.Second, func() error {
				tr, err := record.Show(ctx, e.js, e.names, ref)
				if err != nil {
					return err
				}
				if tr.Status != record.StatusDone || tr.InSeq < last {
					return fmt.Errorf("status %s, consumed to %d, want done at %d (event with %v at %d)", tr.Status, tr.InSeq, last, h, ack.Sequence)
				}
				return nil
			})
		})
	}
}
