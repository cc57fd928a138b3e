package admission_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

// On replicated streams a lost compare-and-set reports another error code
// (10164) than on one replica; rate-limit takes and debounce replacements
// under contention retry it like any conflict instead of failing.
func TestContentionOnReplicatedStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 3-node cluster")
	}
	c := natstest.RunCluster(t, 3)
	c.WaitReady()
	nc, err := c.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := streams.Provision(ctx, js, streams.Options{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	e := env{js: js, names: streams.Default()}
	now := func() time.Time { return time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) }
	a := newAdmitter(t, e, now, compile(t, `name: limited
model: {provider: scripted}
triggers:
  - name: push
    when: "true"
    rate: {key: "'all'", per_minute: 1, burst: 50}
`))

	const n = 20
	var wg sync.WaitGroup
	outcomes := make([]admission.Outcome, n)
	for i := range n {
		wg.Go(func() {
			ds, err := a.Decide(ctx, ghEvent(fmt.Sprint(i), "x", `{}`))
			if err != nil {
				t.Errorf("take %d: %v", i, err)
				return
			}
			outcomes[i] = ds[0].Outcome
		})
	}
	wg.Wait()
	for i, o := range outcomes {
		if o != admission.Admitted {
			t.Errorf("take %d of %d from a bucket of 50: %s", i, n, o)
		}
	}

	// The debounce messages fire a minute from now, after the test.
	deb := newAdmitter(t, e, nil)
	counts := make([]int, n)
	for i := range n {
		wg.Go(func() {
			d := admission.Decision{Agent: "deb", Trigger: "t", Session: "one", Outcome: admission.Debounced, Window: time.Minute}
			c, err := deb.Debounce(ctx, ghEvent(fmt.Sprint("d", i), "x", `{}`), d)
			if err != nil {
				t.Errorf("debounce %d: %v", i, err)
			}
			counts[i] = c
		})
	}
	wg.Wait()
	slices.Sort(counts)
	for i, c := range counts {
		if c != i+1 {
			t.Fatalf("burst counts %v, want 1 to %d each once", counts, n)
		}
	}
}
