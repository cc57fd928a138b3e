package ingest_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/streams"
)

// Every receiver takes one JSON value and nothing after it: trailing data
// is refused with 400, never read past or half-admitted.
func TestReceiversRefuseTrailingData(t *testing.T) {
	h := start(t, time.Minute)
	auth := map[string]string{"Authorization": "Bearer " + token}
	binary := func(ct string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + token, "Content-Type": ct, "ce-specversion": "1.0",
			"ce-id": "bin-1", "ce-source": "/test", "ce-type": "dev.jetloop.request", "ce-subject": "s1"}
	}
	structured := map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/cloudevents+json"}
	const event = `{"specversion":"1.0","id":"st-1","source":"/test","type":"dev.jetloop.request","subject":"s1","data":{"text":"x"}}`
	hook := func(body string) map[string]string { return githubHeaders("pull_request", "strict-1", []byte(body)) }
	pr := string(fixture(t, "pull_request/opened.payload.json"))
	tests := []struct {
		name   string
		path   string
		header map[string]string
		body   string
	}{
		{name: "request with garbage after", path: "/v1/agents/demo/sessions/s1/messages", header: auth, body: `{"text": "hello"} garbage`},
		{name: "request with a second object", path: "/v1/agents/demo/sessions/s1/messages", header: auth, body: `{"text": "hello"}{"text": "again"}`},
		{name: "structured event with garbage after", path: "/events", header: structured, body: event + ` x`},
		{name: "structured event with a second event", path: "/events", header: structured, body: event + event},
		{name: "binary event whose JSON data has garbage after", path: "/events", header: binary("application/json"), body: `{"text": "x"} x`},
		{name: "binary event whose +json data is two values", path: "/events", header: binary("application/vnd.test+json; charset=utf-8"), body: `1 2`},
		{name: "signed webhook with garbage after", path: "/webhooks/github", header: hook(pr + "}"), body: pr + "}"},
		{name: "signed webhook with a second object", path: "/webhooks/github", header: hook(pr + "{}"), body: pr + "{}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if r := post(t, h.url+tt.path, tt.header, []byte(tt.body)); r.status != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", r.status, r.raw)
			}
		})
	}
	if n := h.inCount(t, ""); n != 0 {
		t.Fatalf("%d messages published for refused bodies", n)
	}
	// Whitespace after the value is not data.
	if r := post(t, h.url+"/v1/agents/demo/sessions/s1/messages", auth, []byte("{\"text\": \"hello\"}\r\n\t ")); r.status != http.StatusAccepted {
		t.Fatalf("a request ending in whitespace: %d %s", r.status, r.raw)
	}
	// Data that is not declared JSON is the sender's own bytes.
	if r := post(t, h.url+"/events", binary("text/plain"), []byte(`{"text": "x"} x`)); r.status != http.StatusAccepted {
		t.Fatalf("a text/plain event: %d %s", r.status, r.raw)
	}
}

// An Idempotency-Key (or a CloudEvent's id) reused with a different body
// is refused with 409, as payment APIs refuse it, and publishes nothing:
// it is never answered as a duplicate of the first request.
func TestIdempotencyKeyReusedWithAnotherBody(t *testing.T) {
	h := start(t, time.Minute)
	url := h.url + "/v1/agents/demo/sessions/s1/messages"
	key := func(k string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + token, "Idempotency-Key": k}
	}
	if r := post(t, url, key("k-1"), []byte(`{"text": "deploy to staging"}`)); r.status != http.StatusAccepted {
		t.Fatalf("first request: %d %s", r.status, r.raw)
	}
	r := post(t, url, key("k-1"), []byte(`{"text": "deploy to production"}`))
	if r.status != http.StatusConflict || !strings.Contains(r.raw, "different body") || !strings.Contains(r.raw, "use a new Idempotency-Key") {
		t.Fatalf("same key, another body: %d %s, want 409 saying to use a new Idempotency-Key", r.status, r.raw)
	}
	if r := post(t, url, key("k-1"), []byte(`{"text": "deploy to staging"}`)); r.status != http.StatusAccepted || r.body["duplicate"] != true {
		t.Fatalf("same key, same body: %d %s, want a 202 duplicate", r.status, r.raw)
	}
	if n := h.inCount(t, h.subject(t, "demo", "s1")); n != 1 {
		t.Fatalf("%d messages, want 1", n)
	}
	// The key is the session's: another session may use it.
	if r := post(t, h.url+"/v1/agents/demo/sessions/s2/messages", key("k-1"), []byte(`{"text": "other"}`)); r.status != http.StatusAccepted || r.body["duplicate"] == true {
		t.Fatalf("same key in another session: %d %s", r.status, r.raw)
	}

	structured := map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/cloudevents+json"}
	ev := func(text string) []byte {
		return []byte(`{"specversion":"1.0","id":"ev-1","source":"/test","type":"dev.jetloop.request","subject":"s3","data":{"text":"` + text + `"}}`)
	}
	if r := post(t, h.url+"/events", structured, ev("a")); r.status != http.StatusAccepted {
		t.Fatalf("first event: %d %s", r.status, r.raw)
	}
	if r := post(t, h.url+"/events", structured, ev("b")); r.status != http.StatusConflict {
		t.Fatalf("same source and id, other data: %d %s, want 409", r.status, r.raw)
	}
	if r := post(t, h.url+"/events", structured, ev("a")); r.status != http.StatusAccepted || r.body["duplicate"] != true {
		t.Fatalf("the same event again: %d %s", r.status, r.raw)
	}
}

// A JL_IN that holds half its limits refuses new events with 503 naming
// the stream, and drops none of what it holds; an event nobody admits is
// still answered for what it is. (In a room of three messages, an
// agent's or a source's share of it is what refuses first.)
func TestFullInputRefusesEvents(t *testing.T) {
	h := start(t, time.Minute)
	if _, err := streams.Provision(context.Background(), h.js, streams.Options{Limits: map[string]streams.Limit{h.names.StreamIn(): {Bytes: 64 << 20, Msgs: 3}}}); err != nil {
		t.Fatal(err)
	}
	auth := map[string]string{"Authorization": "Bearer " + token}
	var refused reply
	for i := 0; ; i++ {
		if i > 10 {
			t.Fatal("JL_IN never refused an event")
		}
		r := post(t, h.url+"/v1/agents/demo/sessions/s1/messages", auth, []byte(fmt.Sprintf(`{"text": "n%d"}`, i)))
		if r.status == http.StatusServiceUnavailable {
			refused = r
			break
		}
		if r.status != http.StatusAccepted {
			t.Fatalf("request %d: %d %s", i, r.status, r.raw)
		}
	}
	if !strings.Contains(refused.raw, "JL_IN") || !strings.Contains(refused.raw, "max_msgs") && !strings.Contains(refused.raw, "share is") ||
		refused.header.Get("Retry-After") == "" {
		t.Fatalf("refusal %s (Retry-After %q) does not say why", refused.raw, refused.header.Get("Retry-After"))
	}
	if n := h.inCount(t, ""); n > 3 {
		t.Fatalf("JL_IN holds %d messages, past the half of its limits", n)
	}
	s, err := h.js.Stream(context.Background(), h.names.StreamIn())
	if err != nil {
		t.Fatal(err)
	}
	if info, err := s.Info(context.Background()); err != nil || info.State.FirstSeq != 1 {
		t.Fatalf("JL_IN lost its oldest: %+v %v", info.State, err)
	}
	// Nobody admits a push: no room is needed to say so.
	push := []byte(`{"ref":"refs/heads/main"}`)
	if r := post(t, h.url+"/webhooks/github", githubHeaders("push", "full-1", push), push); r.status/100 != 2 && r.status != http.StatusUnprocessableEntity {
		t.Fatalf("an event nobody admits while JL_IN is full: %d %s", r.status, r.raw)
	}
}
