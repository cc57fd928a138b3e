package ingest

import (
	"context"
	"fmt"
	"strings"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/events"
)

// RefuseUnadmitted answers an event addressed to an agent (a user
// request, or a CloudEvent with jlagent) that the rest of the pipeline
// admitted to no session with ErrNotAdmitted, naming every decision, or
// ErrRateLimited when a rate limit dropped it: never a 2xx for nothing.
// The decisions are recorded in JL_AUDIT already, and the event is not
// remembered as handled, so a retry is decided again. An event addressed
// to nobody (a webhook, a broadcast CloudEvent) that no trigger wants is
// answered 2xx with nothing admitted: it was delivered, and there is no
// one to refuse it for.
func RefuseUnadmitted() Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, d *Delivery) (*Result, error) {
			res, err := next(ctx, d)
			if err != nil || len(res.Admitted) > 0 {
				return res, err
			}
			agent, _ := d.Event.Extensions()[events.ExtAgent].(string)
			if agent == "" {
				return res, nil
			}
			var why []string
			limited := len(d.Decisions) > 0
			for _, dec := range d.Decisions {
				limited = limited && dec.Outcome == admission.RateLimited
				w := string(dec.Outcome)
				if dec.Trigger != "" {
					w += " by " + dec.Rule()
				}
				if dec.Reason != "" {
					w += ": " + dec.Reason
				}
				why = append(why, w)
			}
			if len(why) == 0 {
				why = append(why, "no decision")
			}
			sentinel := ErrNotAdmitted
			if limited {
				sentinel = ErrRateLimited
			}
			return nil, fmt.Errorf("%w: event %s for agent %s: %s", sentinel, d.Event.ID(), agent, strings.Join(why, "; "))
		}
	}
}
