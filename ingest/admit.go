package ingest

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/tracing"
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
			actx, span := tracing.Start(ctx, "admission", trace.WithAttributes(
				tracing.AttrEventID.String(d.Event.ID()), tracing.AttrEventType.String(d.Event.Type())))
			ds, err := adm.DecideData(actx, data, d.Event)
			if span.IsRecording() {
				// Built only for a span that keeps them: without a
				// tracer, once per event for nothing.
				for _, x := range ds {
					span.AddEvent("decision", trace.WithAttributes(tracing.AttrAgent.String(x.Agent),
						tracing.AttrSession.String(x.Session), attribute.String("jetloop.rule", x.Rule()),
						attribute.String("jetloop.outcome", string(x.Outcome))))
				}
				span.SetAttributes(attribute.Int("jetloop.decisions", len(ds)))
			}
			tracing.Fail(span, err)
			span.End()
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
