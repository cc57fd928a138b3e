package admission_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/streams"
)

// An event on the session's subject whose sender set the sequence header
// a direct get adds, naming an earlier event, does not send the search
// for a burst's fire back to that event: a retry of a debounced event
// that came after it is answered as counted.
func TestDebounceRetryPastAnEventNamingAnEarlierSequence(t *testing.T) {
	e := setup(t)
	def := compile(t, `name: deb
model: {provider: scripted}
triggers:
  - name: comment
    when: event.type == "com.github.issue_comment.created"
    session: "'repo'"
    debounce: {window: 10m}
`)
	a := newAdmitter(t, e, nil, def)
	ref, _ := streams.NewSessionRef("deb", "repo")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ev := ghEvent("e1", "com.github.issue_comment.created", `{"n":1}`)
	ds, err := a.Decide(ctx, ev)
	if err != nil || len(ds) != 1 {
		t.Fatalf("decide: %+v %v", ds, err)
	}
	if n, err := a.Debounce(ctx, ev, ds[0]); err != nil || n != 1 {
		t.Fatalf("debounce: count %d, %v", n, err)
	}
	m := nats.NewMsg(e.names.In(ref))
	m.Header.Set(jetstream.SequenceHeader, "1")
	m.Data = []byte("{}")
	if _, err := e.js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	if n, err := a.Debounce(ctx, ev, ds[0]); err != nil || n != 1 {
		t.Fatalf("retry: count %d, %v, want 1 (counted)", n, err)
	}
}
