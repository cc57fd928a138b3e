package policies

import (
	"context"
	"testing"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

// A worker that read the rollout in force just before a newer one
// started counts its run for nothing: the newer rollout's counts stay.
func TestACountForAnEndedRolloutKeepsTheNewerCounts(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	ctx := context.Background()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	s, err := NewStore(ctx, js, streams.Default())
	if err != nil {
		t.Fatal(err)
	}
	file := func(answer, extra string) *Compiled {
		t.Helper()
		c, err := Parse("a.yaml", []byte(`name: a
model: {provider: scripted, then: {text: `+answer+`}}
triggers:
  - {name: req, when: 'event.type == "dev.jetloop.request"', session: event.subject}
`+extra))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, c := range []*Compiled{file("one", ""), file("two", "rollout: {percent: 50}\n")} {
		if _, err := s.Apply(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	_, head, err := s.GetCompiled(ctx, "a")
	if err != nil || head.Rollout == nil {
		t.Fatalf("first rollout: %+v %v", head.Rollout, err)
	}
	first := *head.Rollout
	if _, err := s.count(ctx, "a", first, true, true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, file("three", "rollout: {percent: 50}\n")); err != nil {
		t.Fatal(err)
	}
	if rr, err := s.RecordRun(ctx, "a", 3, true); err != nil || !rr.Counted || rr.Counts.Canary.Runs != 1 {
		t.Fatalf("a run of the second rollout: %+v %v", rr, err)
	}
	// The late count of the first rollout.
	_, _ = s.count(ctx, "a", first, true, false)
	c, ok, err := s.Counts(ctx, "a")
	if err != nil || !ok || c.Canary.Version != 3 || c.Canary.Runs != 1 || c.Canary.Failed != 1 {
		t.Fatalf("the second rollout's counts after a late count of the first: %+v %v %v", c, ok, err)
	}
}
