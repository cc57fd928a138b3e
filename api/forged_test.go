package api_test

import (
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/record"
)

// A control request reads the session's messages where they are stored,
// whatever their sender set of the headers a direct get adds: an event
// without data and with a Status header waiting for a session nobody
// runs yet makes the session as good as there, and a retry of a control
// message a chat bot published with a Nats-Sequence of its own is
// answered with the sequence it is stored at.
func TestControlReadsMessagesWhereTheyAreStored(t *testing.T) {
	h := start(t, api.Config{})
	h.applyDemo(t)

	waiting := ref(t, "demo", "waiting")
	e := event.New()
	e.SetID("ping-1")
	e.SetSource("test")
	e.SetType("com.example.ping")
	m, err := events.ToMsg(h.names.In(waiting), e)
	if err != nil {
		t.Fatal(err)
	}
	m.Header.Set("Status", "503")
	if _, err := h.js.PublishMsg(ctx(t), m); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.Control(ctx(t), control.Steer, api.ControlRequest{Agent: "demo", Session: "waiting", Text: "look"}); err != nil {
		t.Fatalf("steer of a session whose event waits: %v", err)
	}

	gated := ref(t, "demo", "gated")
	h.putSession(t, session("gated", record.StatusBlocked, 1, "toolu_1", "rule 1"), nil)
	approve := control.Message{Verb: control.Approve, CallID: "toolu_1", ID: "chat-43", Source: "chat"}
	m, err = control.NewMsg(h.names, gated, approve)
	if err != nil {
		t.Fatal(err)
	}
	m.Header.Set(jetstream.SequenceHeader, "1")
	first, err := h.js.PublishMsg(ctx(t), m)
	if err != nil {
		t.Fatal(err)
	}
	// The worker applied it: the session works again.
	h.putSession(t, session("gated", record.StatusWorking, 1, "", ""), nil)
	again, err := h.client.Control(ctx(t), control.Approve, api.ControlRequest{Agent: "demo", Session: "gated", CallID: "toolu_1", ID: "chat-43", Source: "chat"})
	if err != nil || again.Seq != first.Sequence || !again.Duplicate {
		t.Fatalf("retry of an applied approve: %+v, %v; want a duplicate at %d", again, err, first.Sequence)
	}
}
