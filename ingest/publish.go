package ingest

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tracing"
)

// Publish is the pipeline's last step: it publishes the event to the
// session of every agent that admitted it (jl.in.<agent>.<session>, with
// a Nats-Msg-Id naming event and subject), adds debounced events to their
// bursts, and writes the decision records and dead letters, returning
// once JetStream has acknowledged all of it.
//
// It never answers 4xx: admission has checked that every admitted event
// can be published (a decision that cannot is Failed and dead-lettered),
// and by now some messages may be stored, so a failure here is ours and
// the sender should retry.
func Publish(js jetstream.JetStream, adm *admission.Admitter, names streams.Names, m *Metrics, opts ...PublishOption) Handler {
	var cc *claimCheck
	for _, o := range opts {
		o(&cc, js, names)
	}
	return func(ctx context.Context, d *Delivery) (res *Result, err error) {
		ctx, span := tracing.Start(ctx, "publish", trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
			semconv.MessagingSystemKey.String("nats"), tracing.AttrEventID.String(d.Event.ID())))
		defer func() {
			tracing.Fail(span, err)
			span.End()
		}()
		// The event carries the publish's span context (the CloudEvents
		// distributed-tracing extension): the worker's run of it is its
		// child, so one webhook is one trace.
		tracing.Inject(ctx, &d.Event)
		e := d.Event
		res = &Result{ID: e.ID(), Admitted: []Target{}}
		var msgs []*nats.Msg
		var targetOf []int // the target of each of msgs
		counts := map[string]int{}
		for _, dec := range d.Decisions {
			m.decisions.WithLabelValues(dec.Agent, string(dec.Outcome)).Inc()
			switch dec.Outcome {
			case admission.Admitted:
				ref, err := dec.Ref()
				if err != nil {
					return nil, fmt.Errorf("ingest: event %s for %s: %w", e.ID(), dec.Rule(), err)
				}
				subject := names.In(ref)
				ev, err := cc.forSession(ctx, e, ref)
				if err != nil {
					m.publishFailures.Inc()
					return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
				}
				// Its Nats-Msg-Id is dedupe.MsgID(e, subject), as
				// ToMsg names every message.
				msg, err := events.ToMsgSharing(subject, admission.Stamp(ev, dec))
				if err != nil {
					return nil, fmt.Errorf("ingest: event %s for %s: %w", e.ID(), dec.Rule(), err)
				}
				targetOf = append(targetOf, len(res.Admitted))
				msgs = append(msgs, msg)
				res.Admitted = append(res.Admitted, Target{Agent: dec.Agent, Session: dec.Session})
			case admission.Refused, admission.NoRoom:
				res.Refused = append(res.Refused, Refusal{Agent: dec.Agent, Session: dec.Session, Reason: dec.Reason})
			case admission.Debounced:
				ref, err := dec.Ref()
				if err != nil {
					return nil, fmt.Errorf("ingest: event %s for %s: %w", e.ID(), dec.Rule(), err)
				}
				ev, err := cc.forSession(ctx, e, ref)
				if err != nil {
					m.publishFailures.Inc()
					return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
				}
				n, err := adm.Debounce(ctx, ev, dec)
				if err != nil {
					m.publishFailures.Inc()
					return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
				}
				counts[dec.Agent] = n
				res.Admitted = append(res.Admitted, Target{Agent: dec.Agent, Session: dec.Session, Debounced: true})
			case admission.Throttled:
				ref, err := dec.Ref()
				if err != nil {
					return nil, fmt.Errorf("ingest: event %s for %s: %w", e.ID(), dec.Rule(), err)
				}
				ev, err := cc.forSession(ctx, e, ref)
				if err != nil {
					m.publishFailures.Inc()
					return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
				}
				if err := adm.Delay(ctx, ev, dec); err != nil {
					m.publishFailures.Inc()
					return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
				}
				res.Admitted = append(res.Admitted, Target{Agent: dec.Agent, Session: dec.Session, Throttled: true, At: dec.At})
			}
		}
		light, err := cc.withoutData(e)
		if err != nil {
			return nil, err
		}
		records, deadLetters, err := adm.Records(light, d.Decisions, counts)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, deadLetters...)
		span.SetAttributes(attribute.Int("messaging.batch.message_count", len(msgs)+len(records)))
		// The decision records of concurrent events are written together
		// (admission's group commit); each delivery still waits for its own.
		seqs, err := adm.PublishDecided(ctx, js, msgs, records)
		if err != nil {
			m.publishFailures.Inc()
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		for i, t := range targetOf {
			res.Admitted[t].Seq = seqs[i]
		}
		return res, nil
	}
}

// PublishOption adjusts Publish.
type PublishOption func(cc **claimCheck, js jetstream.JetStream, names streams.Names)

// WithClaimCheck stores the data of an event larger than maxData bytes in
// jl_blobs, one object per session the event goes to, and publishes the
// event with a BlobRef as its data and the handle in ExtBlob; dead
// letters of such an event describe its data without keeping it. Without
// it, an event too large for a message fails to publish.
func WithClaimCheck(maxData int) PublishOption {
	return func(cc **claimCheck, js jetstream.JetStream, names streams.Names) {
		*cc = &claimCheck{js: js, names: names, max: maxData}
	}
}
