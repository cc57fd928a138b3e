package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tracing"
)

// Request is a user's message to a session.
type Request struct {
	Text string
	// ID is the event id, the dedupe key: a request sent twice with one
	// id runs once. Empty: a new id.
	ID string
	// Source is the event source; default "/jetloop/cli".
	Source string
	// Thread is the chat thread the request came from, where the run's
	// answer is posted (events.SlackThread); empty: none.
	Thread string
}

// Send publishes a request to a session's subject as a dev.jetloop.request
// CloudEvent and returns its JL_IN sequence once JetStream has it. The
// session is created by the worker that consumes it.
func Send(ctx context.Context, js jetstream.JetStream, names streams.Names, ref streams.SessionRef, req Request) (uint64, error) {
	if req.ID == "" {
		req.ID = uuid.NewString()
	}
	if req.Source == "" {
		req.Source = "/jetloop/cli"
	}
	e := event.New()
	e.SetID(req.ID)
	e.SetSource(req.Source)
	e.SetType(events.TypeRequest)
	e.SetSubject(ref.Session)
	e.SetTime(time.Now().UTC())
	e.SetExtension(events.ExtAgent, ref.Agent)
	e.SetExtension(events.ExtSession, ref.Session)
	if req.Thread != "" {
		e.SetExtension(events.ExtThread, req.Thread)
	}
	if err := e.SetData("text/plain; charset=utf-8", []byte(req.Text)); err != nil {
		return 0, fmt.Errorf("worker: send to %s: %w", ref, err)
	}
	// The run it starts is the child of the caller's span.
	tracing.Inject(ctx, &e)
	m, err := events.ToMsg(names.In(ref), e)
	if err != nil {
		return 0, fmt.Errorf("worker: send to %s: %w", ref, err)
	}
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		return 0, fmt.Errorf("worker: send to %s: publish on %s: %w", ref, m.Subject, err)
	}
	return ack.Sequence, nil
}
