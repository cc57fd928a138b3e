package ingest

import (
	"context"
	"fmt"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/streams"
)

// Room refuses, with 503 and the reason, an event that would be published
// to JL_IN while JL_IN holds half its limits (streams.Room): the server
// cannot refuse writes on a stream with message schedules, so the
// pipeline does, rather than let the server drop the oldest messages.
// A duplicate never gets here, and an event nobody admits passes: neither
// writes to JL_IN.
func Room(room *streams.Room) Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, d *Delivery) (*Result, error) {
			n := 0
			for _, dec := range d.Decisions {
				switch dec.Outcome {
				case admission.Admitted, admission.Debounced, admission.Throttled:
					n++ // a message on JL_IN
				}
			}
			if n > 0 {
				// Headers, attributes and the decision's stamp: about a KiB.
				if err := room.Check(ctx, n, n*(len(d.Event.DataEncoded)+1024)); err != nil {
					return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
				}
			}
			return next(ctx, d)
		}
	}
}
