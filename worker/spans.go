package worker

import (
	"context"
	"fmt"

	"github.com/cloudevents/sdk-go/v2/event"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/tracing"
)

// The spans of a run (package tracing): a run's span is the child of
// the span that published the event starting it (the event's traceparent
// extension); its steps' spans are its children. The run's span ends
// when the run rests or waits, or when this worker stops running it; the
// state records its traceparent (record.Work.Trace), so a worker that
// continues the run (after a takeover, an approval, a resume) starts a
// span of its own in the same trace, as the recorded span's child.
//
// A delegate call publishes its child's event through the admission
// pipeline under the call's span (Config.Admit gets the step's context),
// and the pipeline's publish sets the event's traceparent: the child's
// run is the child of that publish, so a tree of sessions is one trace.

// tracer is the worker's tracer of runs.
func (w *Worker) tracer() trace.Tracer { return tracing.Tracer(w.cfg.Tracer) }

// startRun starts the span of a run that event ev starts, and records
// its traceparent in next.
func (s *session) startRun(ctx context.Context, ev event.Event, seq uint64, next *record.State) {
	s.endRun("", "superseded by a new run")
	parent := tracing.Extract(context.WithoutCancel(ctx), ev)
	_, span := s.w.tracer().Start(parent, "run "+s.r.ref.Agent, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(append(tracing.Session(s.r.ref.Agent, s.r.ref.Session),
			tracing.AttrSeq.Int64(int64(seq)), tracing.AttrEventID.String(ev.ID()), tracing.AttrEventType.String(ev.Type()),
			tracing.AttrVersion.Int64(int64(next.DefinitionVersion)))...))
	s.span, s.steps = span, nil
	next.Trace = tracing.TraceParent(trace.ContextWithSpan(ctx, span))
}

// runContext returns ctx carrying the span of the session's run, started
// here as the continuation of the recorded run's span when this worker
// has none yet (it took the run over, or a control message set it going
// again).
func (s *session) runContext(ctx context.Context) context.Context {
	if s.span == nil {
		parent := tracing.Parent(context.WithoutCancel(ctx), s.st.Trace)
		opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(append(tracing.Session(s.r.ref.Agent, s.r.ref.Session),
				tracing.AttrVersion.Int64(int64(s.st.DefinitionVersion)), attribute.Bool("jetloop.run.continued", true))...)}
		_, s.span = s.w.tracer().Start(parent, "run "+s.r.ref.Agent, opts...)
		s.steps = nil
	}
	return trace.ContextWithSpan(ctx, s.span)
}

// endRun ends the span of the run, when there is one: with the status
// it came to (empty: the run goes on elsewhere or later) and why.
func (s *session) endRun(status record.Status, why string) {
	if s.span == nil {
		return
	}
	if status != "" {
		s.span.SetAttributes(tracing.AttrStatus.String(string(status)))
	} else {
		s.span.SetAttributes(attribute.Bool("jetloop.run.continues", true))
	}
	if why != "" {
		s.span.SetAttributes(attribute.String("jetloop.reason", why))
	}
	if status == record.StatusFailed || status == record.StatusBudgetExceeded {
		s.span.SetStatus(codes.Error, why)
	}
	s.span.End()
	s.span, s.steps = nil, nil
}

// stepTracer is the tracer of the run's step spans: the run span's
// provider's, as tracing.Start finds it, looked up once a run.
func (s *session) stepTracer() trace.Tracer {
	if s.steps == nil {
		s.steps = s.span.TracerProvider().Tracer(tracing.Name)
	}
	return s.steps
}

// modelSpan starts the span of a model call (GenAI semantic conventions).
func (s *session) modelSpan(ctx context.Context, in record.Intent, recovery bool) (context.Context, trace.Span) {
	provider, name := "", ""
	if s.def != nil {
		provider, name = s.def.Model.Provider, s.def.Model.Name
	}
	spanName := tracing.OpChat
	if name != "" {
		spanName += " " + name
	}
	ctx = s.runContext(ctx)
	return s.stepTracer().Start(ctx, spanName, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		tracing.GenAIOperation.String(tracing.OpChat), tracing.GenAIProvider.String(provider), tracing.GenAISystem.String(provider),
		tracing.GenAIRequestModel.String(name), tracing.AttrTurn.Int(in.Turn), tracing.AttrStep.Int64(int64(in.Step)),
		attribute.Bool("jetloop.recovery", recovery)))
}

// toolSpan starts the span of a tool call (GenAI semantic conventions).
func (s *session) toolSpan(ctx context.Context, call record.CallRef, in record.Intent, recovery bool) (context.Context, trace.Span) {
	kind := "function"
	if s.def != nil {
		if _, _, isMCP := s.def.MCPTool(call.Name); isMCP {
			kind = "extension"
		}
	}
	ctx = s.runContext(ctx)
	return s.stepTracer().Start(ctx, tracing.OpExecuteTool+" "+call.Name, trace.WithAttributes(
		tracing.GenAIOperation.String(tracing.OpExecuteTool), tracing.GenAIToolName.String(call.Name),
		tracing.GenAIToolCallID.String(call.ID), tracing.GenAIToolType.String(kind),
		tracing.AttrReplay.String(string(in.Replay)), tracing.AttrStep.Int64(int64(in.Step)),
		attribute.Bool("jetloop.recovery", recovery)))
}

// endStep ends a step's span: failed when err is not nil.
func endStep(span trace.Span, err error) {
	tracing.Fail(span, err)
	span.End()
}

// controlSpan starts the span of applying a control message: the child
// of the span that sent it (its traceparent), linked to the run's.
func (s *session) controlSpan(ctx context.Context, in *ctlInput, verb string) (context.Context, trace.Span) {
	parent := tracing.ExtractHeader(ctx, in.msg.Header)
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(append(
		tracing.Session(s.r.ref.Agent, s.r.ref.Session), tracing.AttrVerb.String(verb), tracing.AttrSeq.Int64(int64(in.seq)))...)}
	if sc := tracing.SpanContextOf(s.st.Trace); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	return s.w.tracer().Start(parent, fmt.Sprintf("control %s", verb), opts...)
}
