package control

import (
	"context"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tracing"
)

// NewMsg renders m as the message Publish sends for session ref: a
// binary-mode CloudEvent of type dev.jetloop.control.<verb> on ref's
// control subject, with the jlagent and jlsession extensions, the session
// as its subject attribute and the verb's fields as JSON data. Empty ID,
// Source and Time are filled in as Publish documents.
func NewMsg(names streams.Names, ref streams.SessionRef, m Message) (*nats.Msg, error) {
	if ref.Agent == "" || ref.Session == "" {
		return nil, fmt.Errorf("%w: no session to send %s to", ErrInvalid, m.Verb)
	}
	if err := m.validateFor(ref); err != nil {
		return nil, fmt.Errorf("control: %s to %s: %w", m.Verb, ref, err)
	}
	if m.ID == "" {
		m.ID = uuid.NewString()
	}
	if m.Source == "" {
		m.Source = DefaultSource
	}
	if m.Time.IsZero() {
		m.Time = time.Now()
	}
	body, err := encodeData(m)
	if err != nil {
		return nil, err
	}
	e := event.New()
	e.SetID(m.ID)
	e.SetSource(m.Source)
	e.SetType(events.ControlType(string(m.Verb)))
	e.SetSubject(ref.Session)
	e.SetTime(m.Time.UTC())
	e.SetExtension(events.ExtAgent, ref.Agent)
	e.SetExtension(events.ExtSession, ref.Session)
	if err := e.SetData(event.ApplicationJSON, body); err != nil {
		return nil, fmt.Errorf("control: %s to %s: %w", m.Verb, ref, err)
	}
	msg, err := events.ToMsg(names.Ctl(ref), e)
	if err != nil {
		return nil, fmt.Errorf("control: %s to %s: %w: %w", m.Verb, ref, ErrInvalid, err)
	}
	return msg, nil
}

// Publish validates m, publishes it on ref's control subject and returns
// its sequence in JL_CTL once JetStream has acknowledged it: from then on
// it is durable and will be applied, whether or not a worker owns the
// session now. A message whose ID and Source were published to the same
// session inside JL_CTL's duplicate window is not stored again: Publish
// returns the sequence of the first.
//
// An empty ID is a new one, an empty Source DefaultSource, a zero Time the
// clock. An invalid message is refused with an error wrapping ErrInvalid
// and nothing is published.
func Publish(ctx context.Context, js jetstream.JetStream, names streams.Names, ref streams.SessionRef, m Message) (uint64, error) {
	msg, err := NewMsg(names, ref, m)
	if err != nil {
		return 0, err
	}
	// The worker's application of it is the child of the caller's span.
	tracing.InjectHeader(ctx, msg.Header)
	ack, err := js.PublishMsg(ctx, msg, jetstream.WithExpectStream(names.StreamCtl()))
	if err != nil {
		return 0, fmt.Errorf("control: %s to %s: publish on %s: %w", m.Verb, ref, msg.Subject, err)
	}
	return ack.Sequence, nil
}
