package worker_test

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/worker"
)

func TestTriggerPromptLeadsTheTurn(t *testing.T) {
	e := setup(t)
	def := policies.Definition{Name: "rev", Model: scripted(policies.ScriptEntry{Text: "reviewed"})}
	e.start(t, worker.Config{Definitions: defs{"rev": def}, Agents: []string{"rev"}})
	ref := e.ref(t, "rev", "octo/repo#12")

	ev := event.New()
	ev.SetID("d1")
	ev.SetSource("https://github.com/octo/repo")
	ev.SetType("com.github.pull_request.opened")
	ev.SetExtension(admission.ExtPrompt, base64.StdEncoding.EncodeToString([]byte("Review pull request #12:\nbe brief")))
	if err := ev.SetData(event.ApplicationJSON, []byte(`{"number":12}`)); err != nil {
		t.Fatal(err)
	}
	m, err := events.ToMsg(e.names.In(ref), ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	tr := e.waitStatus(t, ref, record.StatusDone)
	first := tr.Transcript[0]
	if first.Kind != record.KindEvent || !strings.HasPrefix(first.Text, "Review pull request #12:\nbe brief\n\n") || !strings.Contains(first.Text, `"number"`) {
		t.Fatalf("first entry %s: %q", first.Kind, first.Text)
	}
}
