package ingest

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/streams"
)

// Room refuses, with 503 and the reason, an event that would be published
// to JL_IN while JL_IN holds half its limits, or while the event's source
// has added its share of that room within its window (streams.Room): the
// server cannot refuse writes on a stream with message schedules, so the
// pipeline does, rather than let the server drop the oldest messages.
// An agent that holds its share of the room does not get the event: when
// every agent the event was admitted to holds its share, the sender is
// answered 503 (and retries); when others have room, they get it and the
// agents without room get a dead letter (no_room) a redrive delivers.
// Each refusal is counted (jetloop_ingest_room_refused_total) and, for a
// 503, recorded in JL_AUDIT (decision no_room) by audit.
// A duplicate never gets here, and an event nobody admits passes: neither
// writes to JL_IN.
//
// An event's data larger than maxData (0: no limit) is claim-checked by
// Publish: JL_IN holds its claim check, not the data, and the claim check
// is what counts.
func Room(room *streams.Room, m *Metrics, audit func(ctx context.Context, d *Delivery, refused map[string]error), maxData int) Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, d *Delivery) (*Result, error) {
			data := len(d.Event.DataEncoded)
			if maxData > 0 && data > maxData {
				data = claimCheckBytes
			}
			w := streams.Write{Agents: map[string]int{}, Source: d.Receiver,
				// Headers, attributes and the decision's stamp: about a KiB.
				Bytes: data + 1024}
			if d.Receiver == "redrive" {
				// An operator's redrive of what was refused or failed
				// before counts in no source's share.
				w.Source = ""
			}
			for _, dec := range d.Decisions {
				switch dec.Outcome {
				case admission.Admitted, admission.Debounced, admission.Throttled:
					w.Agents[dec.Agent]++ // a message on JL_IN
				}
			}
			if len(w.Agents) == 0 {
				return next(ctx, d)
			}
			refused, err := room.Take(ctx, w)
			if err != nil {
				m.roomRefused.WithLabelValues(scope(err), "", w.Source).Inc()
				if audit != nil {
					all := map[string]error{}
					for a := range w.Agents {
						all[a] = err
					}
					audit(ctx, d, all)
				}
				return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
			}
			if len(refused) == 0 {
				return next(ctx, d)
			}
			for a := range refused {
				m.roomRefused.WithLabelValues("agent", a, w.Source).Inc()
			}
			if len(refused) == len(w.Agents) {
				if audit != nil {
					audit(ctx, d, refused)
				}
				var why []string
				for _, err := range refused {
					why = append(why, err.Error())
				}
				return nil, fmt.Errorf("%w: event %s: %w", ErrUnavailable, d.Event.ID(), errors.New(strings.Join(why, "; ")))
			}
			// The agents with room get the event; the others a dead
			// letter each, which the decision records carry (NoRoom).
			for i, dec := range d.Decisions {
				if err := refused[dec.Agent]; err != nil {
					switch dec.Outcome {
					case admission.Admitted, admission.Debounced, admission.Throttled:
						d.Decisions[i].Outcome, d.Decisions[i].Reason = admission.NoRoom, err.Error()
					}
				}
			}
			return next(ctx, d)
		}
	}
}

// claimCheckBytes is about what the data of a claim-checked event takes in
// JL_IN: its BlobRef (handle, size, digest, content type, a sentence).
const claimCheckBytes = 1024

// scope names what a refusal of Room was for: the stream or a source.
func scope(err error) string {
	if errors.Is(err, streams.ErrShare) {
		return "source"
	}
	return "stream"
}
