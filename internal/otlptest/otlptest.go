// Package otlptest is an OTLP/HTTP trace receiver for tests: an httptest
// server on loopback that decodes each export request's protobuf body
// (gzip or not), as a collector does, and keeps the spans.
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span with its resource's and scope's names.
type Span struct {
	*tracepb.Span
	Service string
	Scope   string
	// Resource holds the resource's string attributes.
	Resource map[string]string
}

// TraceID is the span's trace id in hex.
func (s Span) TraceID() string { return hex.EncodeToString(s.Span.TraceId) }

// SpanID is the span's id in hex.
func (s Span) SpanID() string { return hex.EncodeToString(s.Span.SpanId) }

// ParentID is the span's parent's id in hex; empty for a root.
func (s Span) ParentID() string { return hex.EncodeToString(s.Span.ParentSpanId) }

// Attr is the span's attribute key as text (numbers and booleans
// formatted), and whether the span has it.
func (s Span) Attr(key string) (string, bool) {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return text(kv.Value), true
		}
	}
	return "", false
}

func text(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	}
	return v.String()
}

// Receiver collects the spans exported to it.
type Receiver struct {
	// URL is the base URL to set OTEL_EXPORTER_OTLP_ENDPOINT to.
	URL string

	mu      sync.Mutex
	spans   []Span
	headers http.Header
	reqs    int
}

// Start runs a receiver until the test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{}
	hs := httptest.NewServer(r)
	t.Cleanup(hs.Close)
	r.URL = hs.URL
	return r
}

// ServeHTTP answers POST /v1/traces as an OTLP/HTTP receiver.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want POST /v1/traces with application/x-protobuf", http.StatusBadRequest)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(io.LimitReader(body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var export coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &export); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.reqs++
	r.headers = req.Header.Clone()
	for _, rs := range export.ResourceSpans {
		res := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			res[kv.Key] = kv.Value.GetStringValue()
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				r.spans = append(r.spans, Span{Span: sp, Service: res["service.name"], Scope: ss.GetScope().GetName(), Resource: res})
			}
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// Spans returns the spans received so far, in the order they came.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Requests is the number of export requests received, and the headers
// of the last.
func (r *Receiver) Requests() (int, http.Header) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reqs, r.headers
}
