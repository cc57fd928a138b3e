package ingest_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/ingest"
)

// The agents of the requests tests: one without any trigger, which takes
// requests to their session by default; one that takes none; one whose
// triggers alone decide, admitting alice's requests only, at most one a
// minute; one whose request trigger decides, since it has one.
var requestAgents = []string{
	"name: plain\nmodel: {provider: scripted, script: [{text: hi}]}\n",
	"name: closed\nmodel: {provider: scripted, script: [{text: hi}]}\nrequests: off\n",
	`name: picky
model: {provider: scripted, script: [{text: hi}]}
requests: triggers
triggers:
  - name: alice
    when: event.type == "dev.jetloop.request" && event.data.text.startsWith("alice:")
    rate: {key: event.subject, per_minute: 1}
`,
	`name: gated
model: {provider: scripted, script: [{text: hi}]}
triggers:
  - name: slash
    when: event.type == "dev.jetloop.request" && event.data.text.startsWith("/")
`,
}

// A request addressed to an agent's session is admitted there unless the
// agent says otherwise; one admitted nowhere is answered with an error
// naming why (422, or 429 for a rate limit), never 202, and its decision
// is recorded. HTTP and Request (what jl.api.send calls) are one path:
// the same request is the same event, decided the same.
func TestRequestsAreDecidedByTheAgent(t *testing.T) {
	h := startWith(t, time.Minute, requestAgents)
	auth := map[string]string{"Authorization": "Bearer " + token}
	ctx := context.Background()
	tests := []struct {
		name, agent, text string
		status            int
		reason            string
	}{
		{name: "no trigger: to its session", agent: "plain", text: "hello", status: http.StatusAccepted},
		{name: "requests off", agent: "closed", text: "hello", status: http.StatusUnprocessableEntity, reason: "closed takes no user requests (requests: off)"},
		{name: "a trigger admits", agent: "picky", text: "alice: hi", status: http.StatusAccepted},
		{name: "no trigger admits", agent: "picky", text: "bob: hi", status: http.StatusUnprocessableEntity, reason: "no trigger of agent picky admits this request (requests: triggers)"},
		{name: "a request trigger refuses", agent: "gated", text: "no slash", status: http.StatusUnprocessableEntity, reason: "no trigger of agent gated admits this request"},
		{name: "a request trigger admits", agent: "gated", text: "/run", status: http.StatusAccepted},
		{name: "rate limited", agent: "picky", text: "alice: again", status: http.StatusTooManyRequests, reason: "rate limit 1/min"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := post(t, h.url+"/v1/agents/"+tt.agent+"/sessions/s1/messages", auth, []byte(`{"text": "`+tt.text+`"}`))
			if r.status != tt.status || !strings.Contains(r.raw, tt.reason) {
				t.Fatalf("HTTP: %d %s, want %d naming %q", r.status, r.raw, tt.status, tt.reason)
			}
			// The same request through the API's path decides the same
			// (a new id: the HTTP one is a duplicate, or was refused).
			res, err := h.ing.Request(ctx, events.Request{Agent: tt.agent, Session: "s2", Text: tt.text}, "api")
			switch {
			case tt.status == http.StatusAccepted && (err != nil || len(res.Admitted) != 1 || res.Admitted[0].Session != "s2" || res.Admitted[0].Seq == 0):
				t.Fatalf("Request: %+v %v", res, err)
			case tt.status == http.StatusUnprocessableEntity && (!errors.Is(err, ingest.ErrNotAdmitted) || ingest.Status(err) != tt.status || !strings.Contains(err.Error(), tt.reason)):
				t.Fatalf("Request: %v, want %d naming %q", err, tt.status, tt.reason)
			}
		})
	}
	// Each refusal is a record in JL_AUDIT naming the agent and why.
	recs, err := admission.Recent(ctx, h.js, h.names, "closed", time.Now().Add(-time.Minute), 10)
	if err != nil || len(recs) != 2 {
		t.Fatalf("records of closed: %+v %v", recs, err)
	}
	for _, r := range recs {
		if r.Outcome != admission.Rejected || r.Rule != "closed/"+admission.RequestsRule || !strings.Contains(r.Reason, "requests: off") {
			t.Errorf("record %+v", r)
		}
	}
	if n := h.inCount(t, h.subject(t, "closed", "s1")); n != 0 {
		t.Errorf("%d events stored for a refused request", n)
	}
	// A refused request is not remembered as handled: sent again, it is
	// decided again (and refused again), never answered as a duplicate.
	hdr := map[string]string{"Authorization": "Bearer " + token, "Idempotency-Key": "again-1"}
	for range 2 {
		if r := post(t, h.url+"/v1/agents/closed/sessions/s1/messages", hdr, []byte(`{"text": "x"}`)); r.status != http.StatusUnprocessableEntity {
			t.Fatalf("refused request sent again: %d %s", r.status, r.raw)
		}
	}
}
