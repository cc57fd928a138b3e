package worker_test

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/worker"
)

// TestEventsWithAStatusHeaderDoNotFillTheAcksPending stores as many
// events without data whose sender set Status: 503 as the agent's
// consumer lets wait for an ack, then one event for another session: the
// client never hands those deliveries on, so unless the worker sees them
// they wait for an ack for good and the consumer delivers nothing more.
func TestEventsWithAStatusHeaderDoNotFillTheAcksPending(t *testing.T) {
	e := setup(t)
	def := policies.Definition{Name: "demo", Model: scripted(policies.ScriptEntry{Text: "one"}, policies.ScriptEntry{Text: "two"})}
	e.start(t, worker.Config{Definitions: defs{"demo": def}, Agents: []string{"demo"}})
	a, b := e.ref(t, "demo", "s1"), e.ref(t, "demo", "s2")
	var acks []jetstream.PubAckFuture
	for i := range streams.DefaultInMaxAckPending {
		m := nats.NewMsg(e.names.In(a))
		m.Header.Set("ce-specversion", "1.0")
		m.Header.Set("ce-id", fmt.Sprint("ping-", i))
		m.Header.Set("ce-source", "test")
		m.Header.Set("ce-type", "com.example.ping")
		m.Header.Set("Status", "503")
		f, err := e.js.PublishMsgAsync(m)
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, f)
	}
	for _, f := range acks {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatal(err)
		}
	}
	e.send(t, b, "other")
	e.waitStatus(t, b, record.StatusDone)
}
