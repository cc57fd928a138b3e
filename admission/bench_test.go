package admission_test

import (
	"context"
	"os"
	"testing"

	"github.com/jetloop/jetloop/policies"
)

// BenchmarkDecideData decides a GitHub pull_request webhook for a
// reviewer that admits it and an agent that takes requests only: the
// rules' share of the ingest's work a webhook.
func BenchmarkDecideData(b *testing.B) {
	body, err := os.ReadFile("../ingest/testdata/github/pull_request/opened.payload.json")
	if err != nil {
		b.Fatal(err)
	}
	e := setup(b)
	a := newAdmitter(b, e, nil,
		compile(b, `name: pr-reviewer
model: {provider: scripted, script: [{text: LGTM.}]}
triggers:
  - name: pr
    when: event.type in ["com.github.pull_request.opened", "com.github.pull_request.synchronize"] && !event.data.pull_request.draft
    session: event.data.repository.full_name + "#" + string(event.data.pull_request.number)
`),
		compile(b, `name: demo
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
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		ds, err := a.DecideData(ctx, policies.PartlyDecodedEventData(ev, data, paths), ev)
		if err != nil || len(ds) != 2 || ds[0].Outcome != "rejected" && ds[1].Outcome != "admitted" {
			b.Fatal(ds, err)
		}
	}
}
