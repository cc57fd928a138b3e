package tracing_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/internal/otlptest"
	"github.com/jetloop/jetloop/tracing"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestSetupOffAndRefusals(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		on      bool
		wantErr string
	}{
		{name: "nothing set", env: map[string]string{}},
		{name: "disabled", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SDK_DISABLED": "true"}},
		{name: "exporter none", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_TRACES_EXPORTER": "none"}},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, on: true},
		{name: "traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1/v1/traces"}, on: true},
		{name: "json", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, on: true},
		{name: "grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			wantErr: "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"},
		{name: "grpc for traces", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"},
			wantErr: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc"},
		{name: "console exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "console"}, wantErr: "OTEL_TRACES_EXPORTER=console"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := tracing.Setup(context.Background(), tracing.Config{Getenv: env(tt.env)})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer p.Shutdown(context.Background())
			if p.Enabled() != tt.on {
				t.Fatalf("enabled %v, want %v", p.Enabled(), tt.on)
			}
			_, span := tracing.Tracer(p).Start(context.Background(), "x")
			if span.SpanContext().IsValid() != tt.on {
				t.Fatalf("span recorded %v, want %v", span.SpanContext().IsValid(), tt.on)
			}
			span.End()
		})
	}
}

// The traceparent of a span travels on a CloudEvent, through its NATS
// message (the ce-traceparent header), and back.
func TestEventRoundTrip(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("t").Start(context.Background(), "send")
	defer span.End()
	e := event.New()
	e.SetID("1")
	e.SetSource("/t")
	e.SetType("t")
	// The sender's own trace context is replaced, its tracestate too.
	e.SetExtension(tracing.ExtTraceParent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	e.SetExtension(tracing.ExtTraceState, "big="+strings.Repeat("x", 250))
	tracing.Inject(ctx, &e)
	if _, ok := e.Extensions()[tracing.ExtTraceState]; ok {
		t.Fatalf("the sender's tracestate stays beside the span's traceparent: %v", e.Extensions())
	}
	m, err := events.ToMsg("jl.in.a.b", e)
	if err != nil {
		t.Fatal(err)
	}
	if h := m.Header.Get("ce-traceparent"); !strings.Contains(h, span.SpanContext().TraceID().String()) {
		t.Fatalf("ce-traceparent %q", h)
	}
	back, err := events.FromMsg(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range []context.Context{tracing.Extract(context.Background(), back), tracing.ExtractHeader(context.Background(), m.Header)} {
		sc := trace.SpanContextFromContext(got)
		if !sc.IsRemote() || sc.TraceID() != span.SpanContext().TraceID() || sc.SpanID() != span.SpanContext().SpanID() {
			t.Fatalf("extracted %v, want %v", sc, span.SpanContext())
		}
	}
	h := nats.Header{}
	tracing.InjectHeader(ctx, h)
	if tracing.SpanContextOf(h.Get("ce-traceparent")).SpanID() != span.SpanContext().SpanID() {
		t.Fatalf("InjectHeader %v", h)
	}
	// Without a span nothing is set.
	plain := event.New()
	tracing.Inject(context.Background(), &plain)
	if _, ok := plain.Extensions()[tracing.ExtTraceParent]; ok {
		t.Fatal("traceparent set without a span")
	}
}

// A request's span is named by the route that served it, starts a trace
// of its own that links the request's traceparent header (a sender on the
// internet, a webhook's, picks neither jetloop's trace ids, nor whether
// they are sampled, nor a tracestate that would travel with every event),
// and leaves the response controller working (a stream that flushes and
// moves its write deadline).
func TestHandler(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/things/{id}", func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if err := rc.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
			t.Errorf("SetWriteDeadline through the span's writer: %v", err)
		}
		_, _ = io.WriteString(w, "a")
		if err := rc.Flush(); err != nil {
			t.Errorf("Flush through the span's writer: %v", err)
		}
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {})
	hs := httptest.NewServer(tracing.Handler(tp, mux))
	defer hs.Close()
	parent := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	req, _ := http.NewRequest(http.MethodGet, hs.URL+"/v1/things/7", nil)
	req.Header.Set("traceparent", parent)
	req.Header.Set("tracestate", "big="+strings.Repeat("x", 250)+",other=1")
	var under trace.SpanContext
	mux.HandleFunc("GET /v1/under", func(w http.ResponseWriter, r *http.Request) {
		under = trace.SpanContextFromContext(r.Context())
	})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp, err := http.Get(hs.URL + "/healthz"); err == nil {
		resp.Body.Close()
	}
	// The span ends once the handler has answered.
	var spans []sdktrace.ReadOnlySpan
	natstest.WaitFor(t, 10*time.Second, func() error {
		if spans = rec.Ended(); len(spans) == 0 {
			return errors.New("no span ended yet")
		}
		return nil
	})
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1 (probes untraced)", len(spans))
	}
	s := spans[0]
	if s.Name() != "GET /v1/things/{id}" || s.Parent().IsValid() || s.SpanContext().TraceID().String() == "0af7651916cd43dd8448eb211c80319c" {
		t.Fatalf("span %q, parent %v, trace %s: want a root of a new trace", s.Name(), s.Parent(), s.SpanContext().TraceID())
	}
	if s.SpanContext().TraceState().Len() != 0 {
		t.Fatalf("the sender's tracestate travels: %q", s.SpanContext().TraceState())
	}
	links := s.Links()
	if len(links) != 1 || links[0].SpanContext.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" ||
		links[0].SpanContext.SpanID().String() != "b7ad6b7169203331" || links[0].SpanContext.TraceState().Len() != 0 {
		t.Fatalf("links %+v, want the sender's span, without its tracestate", links)
	}

	// Unsampled by the sender: sampled all the same (the provider's
	// sampler decides), and what the handler sees is the request's span.
	req, _ = http.NewRequest(http.MethodGet, hs.URL+"/v1/under", nil)
	req.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !under.IsSampled() || under.TraceID().String() == "0af7651916cd43dd8448eb211c80319c" || under.IsRemote() {
		t.Fatalf("the handler runs under %v, want a sampled local span of a new trace", under)
	}
}

// Setup exports over OTLP/HTTP to the endpoint the standard variables
// name, with their headers, compression and resource.
func TestSetupExportsOTLP(t *testing.T) {
	recv := otlptest.Start(t)
	vars := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":    recv.URL,
		"OTEL_EXPORTER_OTLP_HEADERS":     "X-Tenant=acme",
		"OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
		"OTEL_SERVICE_NAME":              "jetloop-test",
		"OTEL_RESOURCE_ATTRIBUTES":       "deployment.environment=ci",
	}
	for k, v := range vars {
		t.Setenv(k, v)
	}
	p, err := tracing.Setup(context.Background(), tracing.Config{Version: "1.2.3", Getenv: env(vars)})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tracing.Tracer(p).Start(context.Background(), "exported")
	span.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := recv.Spans()
	if len(spans) != 1 {
		t.Fatalf("%d spans received, want 1", len(spans))
	}
	sp := spans[0]
	if sp.Name != "exported" || sp.Scope != tracing.Name || sp.Service != "jetloop-test" || sp.Resource["service.version"] != "1.2.3" || sp.Resource["deployment.environment"] != "ci" {
		t.Fatalf("span %q of scope %q, resource %v", sp.Name, sp.Scope, sp.Resource)
	}
	if n, h := recv.Requests(); n != 1 || h.Get("X-Tenant") != "acme" || h.Get("Content-Encoding") != "gzip" {
		t.Fatalf("%d requests, headers %v", n, h)
	}
}
