package ingest

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jetloop/jetloop/events"
)

// FuzzGitHubEvent feeds arbitrary headers and bodies to the webhook
// parser: it never panics, refuses with ErrBadRequest, and every event it
// builds can be published.
func FuzzGitHubEvent(f *testing.F) {
	f.Add("pull_request", "72d3162e-cc78-11e3-81ab-4c9367dc0958", []byte(`{"action":"opened","number":2,"pull_request":{"number":2},"repository":{"full_name":"o/r"}}`))
	f.Add("push", "d", []byte(`{"ref":"refs/heads/main","repository":{"full_name":"o/r"}}`))
	f.Add("issue_comment", "d", []byte(`{"action":"created","issue":{"number":7,"pull_request":{}},"organization":{"login":"o"}}`))
	f.Add("ping", "d", []byte(`{"zen":"x"}`))
	f.Add("x", "d", []byte(`[1]`))
	f.Fuzz(func(t *testing.T, name, delivery string, body []byte) {
		h := http.Header{}
		h.Set(HeaderGitHubEvent, name)
		h.Set(HeaderGitHubDelivery, delivery)
		e, _, ping, err := githubEvent(h, body, time.Unix(0, 0), githubPaths)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("error %v is not ErrBadRequest", err)
			}
			return
		}
		if ping {
			return
		}
		if _, err := events.ToMsg("jl.in.a.s", e); err != nil {
			t.Fatalf("built an event that cannot be published: %v", err)
		}
	})
}

// FuzzCloudEvent feeds arbitrary content types, headers and bodies to the
// CloudEvents receiver: it never panics, and what it accepts can be
// published.
func FuzzCloudEvent(f *testing.F) {
	f.Add("application/cloudevents+json", "", "", []byte(`{"specversion":"1.0","id":"1","source":"s","type":"t","data":{"a":1}}`))
	f.Add("application/json", "1", "com.example.x", []byte(`{"a":1}`))
	f.Add("text/plain", "2", "t", []byte(`hello`))
	f.Add("application/cloudevents-batch+json", "", "", []byte(`[]`))
	s := &Server{}
	f.Fuzz(func(t *testing.T, ct, id, typ string, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/events", bytes.NewReader(body))
		r.Header.Set("Content-Type", ct)
		if id != "" {
			r.Header.Set("Ce-Specversion", "1.0")
			r.Header.Set("Ce-Id", id)
			r.Header.Set("Ce-Source", "/fuzz")
			r.Header.Set("Ce-Type", typ)
		}
		d, _, err := s.cloudEvent(r, body)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("error %v is neither ErrBadRequest nor ErrTooLarge", err)
			}
			return
		}
		if _, err := events.ToMsg("jl.in.a.s", d.Event); err != nil {
			t.Fatalf("accepted an event that cannot be published: %v", err)
		}
	})
}
