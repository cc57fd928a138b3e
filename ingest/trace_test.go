package ingest_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/internal/logtest"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tracing"
)

// A signed webhook through a traced listener is one trace: the request's
// span, and under it dedupe, admission and publish; the event stored in
// JL_IN carries the publish span's context in its traceparent extension.
// A redelivery (a duplicate) is a trace of its own that publishes
// nothing.
func TestWebhookSpans(t *testing.T) {
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s.ClientURL())
	ctx := context.Background()
	names := streams.Default()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	rules := admission.NewRules()
	c, err := policies.Parse("reviewer.yaml", []byte(reviewerYAML))
	if err != nil {
		t.Fatal(err)
	}
	rules.Set(c)
	adm, err := admission.New(ctx, js, rules, admission.Config{Names: names})
	if err != nil {
		t.Fatal(err)
	}
	store, err := dedupe.New(ctx, js, dedupe.Config{Names: names})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ingest.New(ingest.Config{Names: names, GitHubSecret: []byte(secret), Timeout: 5 * time.Second, Log: logtest.ForTest(t)}, js, store, adm)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	srv.Mount(mux)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	hs := httptest.NewServer(tracing.Handler(tp, mux))
	t.Cleanup(hs.Close)

	body := fixture(t, "pull_request/opened.payload.json")
	if r := post(t, hs.URL+"/webhooks/github", githubHeaders("pull_request", "d-1", body), body); r.status != http.StatusAccepted {
		t.Fatalf("delivery: %d %s", r.status, r.raw)
	}
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, sp := range rec.Ended() {
		spans[sp.Name()] = sp
	}
	req := spans["POST /webhooks/github"]
	if req == nil || req.SpanKind() != trace.SpanKindServer {
		t.Fatalf("no server span of the request: %v", spans)
	}
	for _, name := range []string{"dedupe", "admission", "publish"} {
		sp := spans[name]
		if sp == nil || sp.Parent().SpanID() != req.SpanContext().SpanID() || sp.SpanContext().TraceID() != req.SpanContext().TraceID() {
			t.Fatalf("span %s: %v, want a child of the request's", name, sp)
		}
	}
	if dup := spanAttr(spans["dedupe"], "jetloop.duplicate"); dup.Type() != attribute.BOOL || dup.AsBool() {
		t.Fatalf("dedupe span's jetloop.duplicate = %v, want false", dup.Emit())
	}
	if n := len(spans["admission"].Events()); n != 1 {
		t.Fatalf("admission span has %d decisions, want 1", n)
	}
	ref, _ := streams.NewSessionRef("pr-reviewer", "Codertocat/Hello-World#2")
	in, _ := js.Stream(ctx, names.StreamIn())
	raw, err := in.GetLastMsgForSubject(ctx, names.In(ref))
	if err != nil {
		t.Fatal(err)
	}
	e, err := events.FromMsg(&nats.Msg{Subject: raw.Subject, Header: raw.Header, Data: raw.Data})
	if err != nil {
		t.Fatal(err)
	}
	got := trace.SpanContextFromContext(tracing.Extract(ctx, e))
	if pub := spans["publish"].SpanContext(); got.SpanID() != pub.SpanID() || got.TraceID() != pub.TraceID() {
		t.Fatalf("stored event's traceparent %q, want the publish span %v", e.Extensions()[tracing.ExtTraceParent], pub)
	}

	rec2 := len(rec.Ended())
	if r := post(t, hs.URL+"/webhooks/github", githubHeaders("pull_request", "d-1", body), body); r.status != http.StatusAccepted || r.body["duplicate"] != true {
		t.Fatalf("redelivery: %d %s", r.status, r.raw)
	}
	seen := false
	for _, sp := range rec.Ended()[rec2:] {
		if sp.Name() == "publish" || sp.Name() == "admission" {
			t.Fatalf("a duplicate has a %s span", sp.Name())
		}
		if sp.Name() == "dedupe" {
			dup := spanAttr(sp, "jetloop.duplicate")
			seen = dup.Type() == attribute.BOOL && dup.AsBool()
		}
	}
	if !seen {
		t.Fatal("the redelivery has no dedupe span with jetloop.duplicate true")
	}
}

// spanAttr is the value of sp's attribute key, INVALID where it has none.
func spanAttr(sp sdktrace.ReadOnlySpan, key attribute.Key) attribute.Value {
	for _, kv := range sp.Attributes() {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}
