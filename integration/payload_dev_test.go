package integration

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/ingest"
)

// payloadAgent is an agent whose one trigger has the payload given
// (its first matching trigger admits an event).
const payloadAgent = `name: payload-%s
model: {provider: scripted, script: [{text: seen}]}
tools: [read_event]
triggers:
  - name: opened
    when: event.type == "com.github.pull_request.opened"
    session: '"pr"'
    payload: %s
`

// TestDevTriggerPayloads delivers a real pull_request webhook to
// jetloop dev over HTTP: admission names the trigger on the event, and
// each session's transcript holds what its trigger's payload made of the
// event (the raw body only with payload: full), the whole event left to
// read_event.
func TestDevTriggerPayloads(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop")
	}
	bin := buildJetloop(t)
	p, ready := startDev(t, bin)
	url := ready["nats"]
	cases := []struct {
		agent, payload string
		want, miss     []string
	}{
		{agent: "mapped", payload: `'{"title": event.data.pull_request.title, "author": event.data.pull_request.user.login}'`,
			want: []string{`{"author":"Codertocat","title":"Update the README with new information."}`, `read_event {"seq":`}, miss: []string{"_links"}},
		{agent: "text", payload: `'"PR " + string(event.data.number) + " on " + event.data.repository.full_name'`,
			want: []string{"PR 2 on Codertocat/Hello-World"}, miss: []string{"_links"}},
		{agent: "whole", payload: "full", want: []string{`"_links"`}},
	}
	for _, c := range cases {
		apply(t, bin, url, fmt.Sprintf(payloadAgent, c.agent, c.payload))
	}
	body, err := os.ReadFile("../projection/testdata/github/pull_request/opened.payload.json")
	if err != nil {
		t.Fatal(err)
	}
	if status, out := postWebhook(t, ready["http"], "pull_request", "payload-opened", body, ingest.Sign([]byte(ingestSecret), body)); status != http.StatusAccepted {
		t.Fatalf("webhook: %d %v", status, out)
	}
	for _, tt := range cases {
		s := awaitShow(t, p, bin, url, "payload-"+tt.agent+"/pr", time.Minute, func(s showJSON) error {
			if s.Status != "done" || len(entriesOf(s, "event")) != 1 {
				return fmt.Errorf("status %s", s.Status)
			}
			return nil
		})
		text := fmt.Sprint(entriesOf(s, "event")[0]["text"])
		for _, w := range tt.want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: the event's text lacks %q:\n%.2000s", tt.agent, w, text)
			}
		}
		for _, m := range tt.miss {
			if strings.Contains(text, m) {
				t.Errorf("%s: the event's text has %q:\n%.2000s", tt.agent, m, text)
			}
		}
	}
}
