package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// untraced are the paths whose requests get no span: probes and scrapes,
// which would bury the requests that matter, and the status stream,
// which lasts as long as a dashboard is open.
var untraced = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true, "/v1/sessions/stream": true}

// Handler serves h with a server span per request, named by its method
// and the route pattern that served it ("POST /webhooks/github"). The
// span is the root of a trace of its own, linked to the request's
// traceparent header when it has one: the sender may be anyone on the
// internet (a webhook's), so it picks neither the trace's id, nor whether
// it is sampled, nor a tracestate that would travel with every event
// published under it. Spans started below it (the ingest pipeline's, the
// API's) use tp through Start. Nil tp: the global provider.
func Handler(tp trace.TracerProvider, h http.Handler) http.Handler {
	tr := Tracer(tp)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if untraced[r.URL.Path] {
			h.ServeHTTP(w, r)
			return
		}
		opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			semconv.HTTPRequestMethodKey.String(r.Method),
			semconv.URLPath(r.URL.Path),
		)}
		if sc := Sender(r.Header); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
		ctx, span := tr.Start(r.Context(), r.Method, opts...)
		defer span.End()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		r = r.WithContext(ctx)
		h.ServeHTTP(sw, r)
		if r.Pattern != "" {
			span.SetName(r.Pattern)
			span.SetAttributes(semconv.HTTPRoute(r.Pattern))
		}
		span.SetAttributes(semconv.HTTPResponseStatusCode(sw.status))
		if sw.status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(sw.status))
		}
	})
}

// statusWriter notes the status a handler answers with.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (read and
// write deadlines, flushes).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush flushes the response, for streams (server-sent events).
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Sender is the span context a request's traceparent header names,
// without its tracestate (a link to it keeps no more than its ids);
// invalid when the header names none.
func Sender(h http.Header) trace.SpanContext {
	if len(h.Values(ExtTraceParent)) != 1 {
		return trace.SpanContext{}
	}
	sc := trace.SpanContextFromContext(propagator.Extract(context.Background(), propagation.HeaderCarrier(http.Header{
		"Traceparent": h.Values(ExtTraceParent),
	})))
	return sc.WithTraceState(trace.TraceState{})
}
