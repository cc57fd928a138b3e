package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/tracing"
)

// Deduplicate answers a delivery of an event handled before as a duplicate
// and records each newly handled event once the rest of the pipeline has
// succeeded.
//
// The order is what makes a crash at any point safe:
//
//  1. Look up the event in jl_dedupe. Found: it was handled and every
//     publish it caused was acknowledged before the record was written,
//     so answer duplicate and publish nothing.
//  2. Run admission and publish (next). Every publish carries a
//     Nats-Msg-Id naming the event and its target subject.
//  3. Only then write the record, and only then answer 202.
//
// A crash before 3 leaves no record: the sender got no 2xx and retries,
// the retry is handled again, and inside the stream's duplicate window
// the server drops the repeated publishes (same Nats-Msg-Id), so nothing
// is published twice; after the window it is at-least-once, which workers
// tolerate. A crash between 3 and the answer makes the retry a duplicate,
// which is right: everything was published. An event is therefore never
// recorded before it was published, and never answered 2xx before both.
func Deduplicate(store *dedupe.Store, adm *admission.Admitter, js jetstream.JetStream, m *Metrics) Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, d *Delivery) (*Result, error) {
			e := d.Event
			if d.Digest == "" && d.Receiver != "github" && !strings.HasPrefix(e.Type(), events.GitHubType("", "")) {
				// A sender that reuses an id (an Idempotency-Key, a
				// CloudEvent's source and id) must mean the same request.
				// GitHub's redeliveries are its own to judge. A
				// delegation's event is no exception: the worker stores
				// it before its first publish and publishes those bytes
				// again, so a repeat has the same digest, and another
				// delegation under a call id used before is a conflict.
				d.Digest = requestDigest(e)
			}
			_, span := tracing.Start(ctx, "dedupe", trace.WithAttributes(tracing.AttrEventID.String(e.ID())))
			// The source formatted and the key hashed once, for the lookup
			// and the record.
			source := e.Source()
			key := store.Key(source, e.ID())
			ent, seen, err := store.SeenKey(ctx, key)
			if span.IsRecording() {
				span.SetAttributes(attribute.Bool("jetloop.duplicate", seen))
			}
			tracing.Fail(span, err)
			span.End()
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
			}
			if seen && d.Digest != "" && ent.Digest != "" && ent.Digest != d.Digest {
				if e.Type() == events.TypeDelegate {
					// A delegation's id is its tool call's: the calling
					// model reads this, and has no header to change.
					return nil, fmt.Errorf("%w: call id %q of %s was used for another delegation (a different task or budget); delegate again in a new tool call",
						ErrConflict, e.ID(), source)
				}
				return nil, fmt.Errorf("%w: id %q of %s was used for a request with a different body; use a new Idempotency-Key",
					ErrConflict, e.ID(), source)
			}
			if seen {
				m.duplicates.WithLabelValues(d.Receiver).Inc()
				msg, err := adm.DuplicateMessage(e)
				if err != nil {
					return nil, err
				}
				if err := writeRecords(ctx, js, m, []*nats.Msg{msg}); err != nil {
					return nil, fmt.Errorf("%w: record duplicate: %w", ErrUnavailable, err)
				}
				res := &Result{ID: e.ID(), Duplicate: true, Admitted: []Target{}}
				var first Result
				if len(ent.Outcome) > 0 && json.Unmarshal(ent.Outcome, &first) == nil && first.Admitted != nil {
					res.Admitted, res.Refused = first.Admitted, first.Refused
				}
				return res, nil
			}
			res, err := next(ctx, d)
			if err != nil {
				return nil, err
			}
			outcome, err := marshalResult(res)
			if err != nil {
				return nil, fmt.Errorf("ingest: encode the result of event %s: %w", e.ID(), err)
			}
			var opts []dedupe.RecordOption
			if d.Digest != "" {
				opts = append(opts, dedupe.WithDigest(d.Digest))
			}
			if err := store.RecordKey(ctx, key, outcome, opts...); errors.Is(err, dedupe.ErrConflict) {
				// A concurrent request with this id and another body was
				// recorded first; inside the stream's window the server
				// dropped this one's publishes as duplicates of its.
				return nil, fmt.Errorf("%w: id %q of %s was used at the same time for a request with a different body", ErrConflict, e.ID(), source)
			} else if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
			}
			res.encoded = outcome
			return res, nil
		}
	}
}
