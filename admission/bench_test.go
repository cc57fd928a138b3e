package admission_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/policies"
)

// webhookFixture is a GitHub pull_request webhook, decoded as far as the
// rules read, and an admitter with a reviewer that admits it and an
// agent that takes requests only.
func webhookFixture(tb testing.TB) (*admission.Admitter, event.Event, any, *policies.DataPaths) {
	body, err := os.ReadFile("../ingest/testdata/github/pull_request/opened.payload.json")
	if err != nil {
		tb.Fatal(err)
	}
	e := setup(tb)
	a := newAdmitter(tb, e, nil,
		compile(tb, `name: pr-reviewer
model: {provider: scripted, script: [{text: LGTM.}]}
triggers:
  - name: pr
    when: event.type in ["com.github.pull_request.opened", "com.github.pull_request.synchronize"] && !event.data.pull_request.draft
    session: event.data.repository.full_name + "#" + string(event.data.pull_request.number)
`),
		compile(tb, `name: demo
model: {provider: scripted, script: [{text: hi}]}
triggers:
  - name: request
    when: event.type == "dev.jetloop.request"
    session: event.subject
`))
	ev := ghEvent("delivery-1", "com.github.pull_request.opened", string(body))
	paths := a.DataPaths()
	data, err := policies.ParseJSONPaths(body, paths)
	if err != nil {
		tb.Fatal(err)
	}
	return a, ev, data, paths
}

// checkWebhookDecisions says what is wrong with the fixture's decisions:
// the reviewer admits the webhook, the other agent rejects it.
func checkWebhookDecisions(ds []admission.Decision, err error) error {
	if err != nil {
		return err
	}
	want := map[string]admission.Outcome{"pr-reviewer": admission.Admitted, "demo": admission.Rejected}
	if len(ds) != len(want) {
		return fmt.Errorf("decisions %+v, want one for each of %v", ds, want)
	}
	for _, d := range ds {
		if want[d.Agent] != d.Outcome {
			return fmt.Errorf("decision %+v, want %s for %s", d, want[d.Agent], d.Agent)
		}
	}
	return nil
}

func TestDecideDataWebhook(t *testing.T) {
	a, ev, data, paths := webhookFixture(t)
	ds, err := a.DecideData(context.Background(), policies.PartlyDecodedEventData(ev, data, paths), ev)
	if err := checkWebhookDecisions(ds, err); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkDecideData decides the webhook of webhookFixture: the rules'
// share of the ingest's work a webhook.
func BenchmarkDecideData(b *testing.B) {
	a, ev, data, paths := webhookFixture(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		ds, err := a.DecideData(ctx, policies.PartlyDecodedEventData(ev, data, paths), ev)
		if err := checkWebhookDecisions(ds, err); err != nil {
			b.Fatal(err)
		}
	}
}
