package tracing

import (
	"context"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetloop/jetloop/events"
)

// The CloudEvents distributed-tracing extension's attributes.
const (
	ExtTraceParent = "traceparent"
	ExtTraceState  = "tracestate"
)

// Inject sets e's traceparent (and tracestate) extension to the span
// context of ctx, replacing the sender's (a tracestate of the sender's
// does not stay beside a traceparent of ours); without a valid one it
// leaves e as it is.
func Inject(ctx context.Context, e *event.Event) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	e.SetExtension(ExtTraceState, nil)
	propagator.Inject(ctx, eventCarrier{e})
}

// Extract returns ctx with the remote span context e's traceparent
// extension names, if it names a valid one.
func Extract(ctx context.Context, e event.Event) context.Context {
	return propagator.Extract(ctx, eventCarrier{&e})
}

// ExtractHeader returns ctx with the remote span context of the
// ce-traceparent header of a binary-mode CloudEvent message.
func ExtractHeader(ctx context.Context, h nats.Header) context.Context {
	return propagator.Extract(ctx, headerCarrier(h))
}

// InjectHeader sets the ce-traceparent (and ce-tracestate) header of a
// binary-mode CloudEvent message to the span context of ctx; without a
// valid one it leaves h as it is.
func InjectHeader(ctx context.Context, h nats.Header) {
	if h == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	nats.Header(h).Del("ce-" + ExtTraceState)
	propagator.Inject(ctx, headerCarrier(h))
}

// TraceParent is the traceparent of ctx's span context; empty without a
// valid one.
func TraceParent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c[ExtTraceParent]
}

// Parent returns ctx with the remote span context traceparent names;
// ctx as it is when it names none.
func Parent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{ExtTraceParent: traceparent})
}

// SpanContextOf is the span context traceparent names; invalid when it
// names none.
func SpanContextOf(traceparent string) trace.SpanContext {
	return trace.SpanContextFromContext(Parent(context.Background(), traceparent))
}

type eventCarrier struct{ e *event.Event }

func (c eventCarrier) Get(key string) string {
	v, ok := c.e.Extensions()[key]
	if !ok {
		return ""
	}
	s, err := types.ToString(v)
	if err != nil {
		return ""
	}
	return s
}

func (c eventCarrier) Set(key, value string) { c.e.SetExtension(key, value) }

func (c eventCarrier) Keys() []string { return []string{ExtTraceParent, ExtTraceState} }

type headerCarrier nats.Header

func (c headerCarrier) Get(key string) string {
	v, _ := events.Attribute(nats.Header(c), key)
	return v
}

func (c headerCarrier) Set(key, value string) { nats.Header(c).Set("ce-"+key, value) }

func (c headerCarrier) Keys() []string { return []string{ExtTraceParent, ExtTraceState} }
