// Package tracing owns jetloop's OpenTelemetry traces: the tracer
// provider a process exports with (Setup, configured by the standard
// OTEL_* variables and off when they name no endpoint), the W3C trace
// context carried on CloudEvents by the distributed-tracing extension
// (traceparent, tracestate: Inject, Extract), the span of every HTTP
// request (Handler) and the attribute names of the spans the other
// packages start (the GenAI semantic conventions for model and tool
// calls).
//
// One webhook is one trace: the request's span starts it (a traceparent
// header the sender sends is a link, never the parent: the sender may be
// anyone), and is the parent of the
// pipeline's dedupe, admission and publish spans; the event published to
// JL_IN carries the publish span's context in its traceparent extension;
// the worker starts the run's span as its child, and each step's span
// (a model call, a tool call) as the run's. A run taken over by another
// worker, or continued after an approval, continues the same trace: the
// session's state records the run span's traceparent (record.Work.Trace).
// A control message carries the context of the request that sent it, and
// its application links to the run.
//
// Spans below the HTTP request are started with Start, from the tracer
// provider of the span in the context: code that runs under no span (a
// test, a process with tracing off) starts none, and nothing here keeps
// a global of its own.
//
// It does not export metrics (Prometheus does, on GET /metrics) or logs.
package tracing
