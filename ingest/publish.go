package ingest

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/streams"
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
func Publish(js jetstream.JetStream, adm *admission.Admitter, names streams.Names, m *Metrics) Handler {
	return func(ctx context.Context, d *Delivery) (*Result, error) {
		e := d.Event
		res := &Result{ID: e.ID(), Admitted: []Target{}}
		var msgs []*nats.Msg
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
				msg, err := events.ToMsg(subject, admission.Stamp(e, dec))
				if err != nil {
					return nil, fmt.Errorf("ingest: event %s for %s: %w", e.ID(), dec.Rule(), err)
				}
				msg.Header.Set(nats.MsgIdHdr, dedupe.MsgID(e, subject))
				msgs = append(msgs, msg)
				res.Admitted = append(res.Admitted, Target{Agent: dec.Agent, Session: dec.Session})
			case admission.Debounced:
				n, err := adm.Debounce(ctx, e, dec)
				if err != nil {
					m.publishFailures.Inc()
					return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
				}
				counts[dec.Agent] = n
				res.Admitted = append(res.Admitted, Target{Agent: dec.Agent, Session: dec.Session, Debounced: true})
			}
		}
		records, err := adm.Messages(e, d.Decisions, counts)
		if err != nil {
			return nil, err
		}
		if err := admission.Publish(ctx, js, append(msgs, records...)); err != nil {
			m.publishFailures.Inc()
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return res, nil
	}
}
