package admission_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/internal/natstest"
)

// Deciding the same event again takes no second token: a retry after a
// failed publish is admitted as its first attempt was, and concurrent
// deliveries of one event, through several processes, take one token
// between them.
func TestRateTakeOncePerEvent(t *testing.T) {
	e := setup(t)
	now := func() time.Time { return time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) }
	def := compile(t, `name: limited
model: {provider: scripted}
triggers:
  - name: push
    when: "true"
    rate: {key: "'all'", per_minute: 1, burst: 2}
`)
	as := []*admission.Admitter{newAdmitter(t, e, now, def)}
	for range 2 {
		_, js := natstest.Connect(t, e.url)
		as = append(as, newAdmitter(t, env{js: js, names: e.names}, now, def))
	}
	ctx := context.Background()
	decide := func(a *admission.Admitter, id string) admission.Outcome {
		t.Helper()
		ds, err := a.Decide(ctx, ghEvent(id, "com.github.push", `{}`))
		if err != nil {
			t.Fatal(err)
		}
		return ds[0].Outcome
	}

	var wg sync.WaitGroup
	outcomes := make([]admission.Outcome, 9)
	for i := range outcomes {
		wg.Go(func() { outcomes[i] = decide(as[i%3], "same") })
	}
	wg.Wait()
	for i, o := range outcomes {
		if o != admission.Admitted {
			t.Fatalf("concurrent delivery %d of one event: %s, want admitted", i, o)
		}
	}
	steps := []struct {
		name, id string
		a        int
		want     admission.Outcome
	}{
		{name: "another event takes the second token", id: "other", a: 1, want: admission.Admitted},
		{name: "a third event finds the bucket empty", id: "third", a: 2, want: admission.RateLimited},
		{name: "the first event again, in another process", id: "same", a: 2, want: admission.Admitted},
		{name: "the second event again", id: "other", a: 0, want: admission.Admitted},
	}
	for _, s := range steps {
		if got := decide(as[s.a], s.id); got != s.want {
			t.Fatalf("%s: %s, want %s", s.name, got, s.want)
		}
	}
}

// A bucket remembers a bounded number of takers, so its state stays
// small however many events take tokens.
func TestRateTakersBounded(t *testing.T) {
	e := setup(t)
	now := func() time.Time { return time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) }
	def := compile(t, `name: limited
model: {provider: scripted}
triggers:
  - name: push
    when: "true"
    rate: {key: "'all'", per_minute: 1000, burst: 1000}
`)
	a := newAdmitter(t, e, now, def)
	ctx := context.Background()
	for i := range 300 {
		ds, err := a.Decide(ctx, ghEvent(fmt.Sprint("e", i), "x", `{}`))
		if err != nil || ds[0].Outcome != admission.Admitted {
			t.Fatalf("event %d: %+v %v", i, ds, err)
		}
	}
	kv, err := e.js.KeyValue(ctx, e.names.BucketDedupe())
	if err != nil {
		t.Fatal(err)
	}
	key, err := e.names.RateKey("limited", "push", "all")
	if err != nil {
		t.Fatal(err)
	}
	ent, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(ent.Value()); n > 8<<10 {
		t.Fatalf("bucket state is %d bytes after 300 takes", n)
	}
}
