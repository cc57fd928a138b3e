package admission_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

// An event debounced while its session's pending burst is being fired is
// not lost. The server fires an @at message by copying it, storing the
// copy on jl.in and then purging the debounce subject; a replacement
// written in between used to be acknowledged and then purged unfired.
//
// Many sessions' bursts are made due at the same instant, so the server
// copies them all and then stores the fired events one after the other,
// in the order the bursts were written. As soon as the first fired event
// is seen, a second event is debounced for every session, the last to
// fire first, so that many land while their burst is mid-fire. Every
// second event that was acknowledged must then reach its session.
func TestDebounceDuringFireLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("fires hundreds of schedules")
	}
	// Without a sync on every write the server fires quickly, and the
	// second events are not all queued behind the first ones' fsyncs.
	s := natstest.RunServer(t, natstest.WithSync("1m"))
	_, js := natstest.Connect(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	e := env{url: s.ClientURL(), js: js, names: streams.Default()}
	const n = 300
	const window = time.Second
	dec := func(i int) admission.Decision {
		return admission.Decision{Agent: "deb", Trigger: "t", Session: fmt.Sprint("s", i), Outcome: admission.Debounced, Window: window}
	}
	// The first bursts all fire at due: their admitter's clock makes
	// now + window due, a whole second.
	due := time.Now().Add(3 * time.Second).Truncate(time.Second).Add(time.Second)
	first := newAdmitter(t, e, func() time.Time { return due.Add(-window) })
	second := newAdmitter(t, e, nil)

	all, err := e.names.InAgent("deb")
	if err != nil {
		t.Fatal(err)
	}
	cons, err := e.js.OrderedConsumer(ctx, e.names.StreamIn(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{all}})
	if err != nil {
		t.Fatal(err)
	}
	it, err := cons.Messages()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Stop()

	for i := range n {
		if _, err := first.Debounce(ctx, ghEvent(fmt.Sprint("A", i), "x", `{"v":"A"}`), dec(i)); err != nil {
			t.Fatal(err)
		}
	}
	if time.Now().After(due) {
		t.Fatalf("the first bursts were not all stored before they were due at %s", due)
	}

	fired := map[string]bool{} // ids of the events seen on jl.in
	read := func() error {
		m, err := it.Next()
		if err != nil {
			return err
		}
		ev, err := events.FromMsg(&nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
		if err != nil {
			t.Fatal(err)
		}
		fired[ev.ID()] = true
		return nil
	}
	if err := read(); err != nil { // the fire has started
		t.Fatal(err)
	}

	acked := make([]bool, n)
	todo := make(chan int, n)
	for i := n - 1; i >= 0; i-- {
		todo <- i
	}
	close(todo)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range todo {
				_, err := second.Debounce(ctx, ghEvent(fmt.Sprint("B", i), "x", `{"v":"B"}`), dec(i))
				acked[i] = err == nil
				if err != nil {
					t.Errorf("second event of session %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()

	missing := func() []int {
		var out []int
		for i := range n {
			if acked[i] && !fired[fmt.Sprint("B", i)] {
				out = append(out, i)
			}
		}
		return out
	}
	// Each acknowledged second event fires within about two windows; a
	// lost one never does, so give up once the stream has been quiet for
	// several windows.
	for len(missing()) > 0 {
		quiet := time.AfterFunc(10*time.Second, it.Stop)
		err := read()
		quiet.Stop()
		if err != nil {
			ms := missing()
			for _, i := range ms[:min(len(ms), 5)] {
				ref, _ := streams.NewSessionRef("deb", fmt.Sprint("s", i))
				t.Logf("session %d: second event acknowledged, never fired on %s", i, e.names.In(ref))
			}
			t.Fatalf("%d of %d acknowledged events lost", len(ms), n)
		}
	}
}
