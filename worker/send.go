package worker

import (
	"context"
	"fmt"
	"time"

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
	// Source is the event source; default events.RequestSource.
	Source string
	// Thread is the chat thread the request came from, where the run's
	// answer is posted (events.SlackThread); empty: none.
	Thread string
}

// Send publishes a request straight to a session's subject, as the
// dev.jetloop.request CloudEvent every way in builds
// (events.RequestEvent), and returns its JL_IN sequence once JetStream
// has it. It skips admission, dedupe and their records: it is for tests
// and benchmarks of the worker. Users' requests take the ingest's
// pipeline (ingest.Server.Request, POST …/messages, jl.api.send).
func Send(ctx context.Context, js jetstream.JetStream, names streams.Names, ref streams.SessionRef, req Request) (uint64, error) {
	e, err := events.RequestEvent(events.Request{Agent: ref.Agent, Session: ref.Session, Text: req.Text, ID: req.ID, Source: req.Source, Thread: req.Thread}, time.Now())
	if err != nil {
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
