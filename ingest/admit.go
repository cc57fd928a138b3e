package ingest

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/policies"
)

// Admit evaluates the delivery against every agent's triggers and hands
// the decisions to the next step.
func Admit(adm *admission.Admitter) Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, d *Delivery) (*Result, error) {
			data := d.Data
			if data == nil {
				data = policies.NewEventData(d.Event)
			}
			ds, err := adm.DecideData(ctx, data, d.Event)
			switch {
			case errors.Is(err, admission.ErrUnknownAgent):
				return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
			case errors.Is(err, admission.ErrBadData):
				return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
			case err != nil:
				return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
			}
			if d.Only != "" {
				ds = slices.DeleteFunc(ds, func(x admission.Decision) bool { return x.Agent != d.Only })
			}
			d.Decisions = ds
			return next(ctx, d)
		}
	}
}
