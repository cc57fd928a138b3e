package admission_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
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

// A bucket written by a process whose clock runs far ahead still refills
// by the other processes' clocks, instead of staying empty until that
// clock's time comes.
func TestRateBucketRefillsDespiteAClockFarAhead(t *testing.T) {
	e := setup(t)
	var mu sync.Mutex
	var offset time.Duration
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return time.Now().Add(offset) }
	ahead := func() time.Time { return time.Now().Add(time.Hour) }
	def := compile(t, `name: limited
model: {provider: scripted}
triggers:
  - name: push
    when: "true"
    rate: {key: "'all'", per_minute: 6, burst: 1}
`)
	fast, slow := newAdmitter(t, e, ahead, def), newAdmitter(t, e, now, def)
	ctx := context.Background()
	decide := func(a *admission.Admitter, id string) admission.Outcome {
		t.Helper()
		ds, err := a.Decide(ctx, ghEvent(id, "x", `{}`))
		if err != nil {
			t.Fatal(err)
		}
		return ds[0].Outcome
	}
	if got := decide(fast, "1"); got != admission.Admitted {
		t.Fatalf("first take, by the clock an hour ahead: %s", got)
	}
	if got := decide(slow, "2"); got != admission.RateLimited {
		t.Fatalf("at once after: %s, want rate_limited", got)
	}
	mu.Lock()
	offset = 15 * time.Second
	mu.Unlock()
	if got := decide(slow, "3"); got != admission.Admitted {
		t.Fatalf("15 seconds later at one every 10 seconds: %s, want admitted", got)
	}
}

// Every write of a bucket carries its TTL, so a bucket idle after many
// takes expires too; a tiny rate gets the longest TTL, not an overflow.
func TestRateBucketWritesCarryTheirTTL(t *testing.T) {
	e := setup(t)
	now := func() time.Time { return time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) }
	tests := []struct {
		name, rate string
		want       time.Duration
	}{
		{name: "ten a minute", rate: "per_minute: 10, burst: 5", want: 30*time.Second + time.Minute},
		{name: "once in ages", rate: "per_minute: 0.000000001", want: streams.DefaultDedupeTTL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			agent := strings.ReplaceAll(tt.name, " ", "-")
			a := newAdmitter(t, e, now, compile(t, "name: "+agent+`
model: {provider: scripted}
triggers:
  - name: push
    when: "true"
    rate: {key: "'all'", `+tt.rate+`}
`))
			for i := range 2 { // a create, then an update
				if _, err := a.Decide(context.Background(), ghEvent(fmt.Sprint(agent, i), "x", `{}`)); err != nil {
					t.Fatal(err)
				}
			}
			key, err := e.names.RateKey(agent, "push", "all")
			if err != nil {
				t.Fatal(err)
			}
			kvs, err := e.js.Stream(context.Background(), streams.KVStream(e.names.BucketDedupe()))
			if err != nil {
				t.Fatal(err)
			}
			raw, err := kvs.GetLastMsgForSubject(context.Background(), streams.KVSubject(e.names.BucketDedupe(), key))
			if err != nil {
				t.Fatal(err)
			}
			got, err := time.ParseDuration(raw.Header.Get("Nats-TTL"))
			if err != nil || got != tt.want {
				t.Fatalf("TTL %q (%v), want %s", raw.Header.Get("Nats-TTL"), err, tt.want)
			}
		})
	}
}
