package admission_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/streams"
)

// fired collects the debounced events the server fires on a session's
// subject.
func fired(t *testing.T, e env, ref streams.SessionRef) <-chan map[string]any {
	t.Helper()
	out := make(chan map[string]any, 100)
	c, err := e.js.OrderedConsumer(context.Background(), e.names.StreamIn(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{e.names.In(ref)}})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := c.Consume(func(m jetstream.Msg) {
		ev, err := events.FromMsg(&nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
		if err != nil {
			t.Errorf("fired message is not an event: %v", err)
			return
		}
		n, _ := strconv.Atoi(fmt.Sprint(ev.Extensions()[admission.ExtCount]))
		out <- map[string]any{"id": ev.ID(), "data": string(ev.Data()), "count": n}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return out
}

func recv(t *testing.T, ch <-chan map[string]any, within time.Duration) map[string]any {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(within):
		t.Fatalf("nothing fired within %s", within)
		return nil
	}
}

// A source that is never quiet for the window still gets through: with
// max_wait, a burst fires at most that long after its first event, and
// the next events start a new burst. Every event is counted in exactly
// one fired burst.
func TestDebounceMaxWaitFiresANeverQuietBurst(t *testing.T) {
	e := setup(t)
	def := compile(t, `name: deb
model: {provider: scripted}
triggers:
  - name: push
    when: event.type == "com.github.push"
    session: "'main'"
    debounce: {window: 2s, max_wait: 3s}
`)
	a := newAdmitter(t, e, nil, def)
	ref, _ := streams.NewSessionRef("deb", "main")
	got := fired(t, e, ref)
	ctx := context.Background()
	const events = 14
	firstFire := 0
	for i := 1; i <= events; i++ {
		ev := ghEvent(fmt.Sprint("m", i), "com.github.push", fmt.Sprintf(`{"n": %d}`, i))
		ds, err := a.Decide(ctx, ev)
		if err != nil || len(ds) != 1 || ds[0].Outcome != admission.Debounced {
			t.Fatalf("event %d: %+v %v", i, ds, err)
		}
		if _, err := a.Debounce(ctx, ev, ds[0]); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if firstFire == 0 && len(got) > 0 {
			firstFire = i
		}
		time.Sleep(500 * time.Millisecond) // the source's pace, quieter than the window never
	}
	if firstFire == 0 {
		t.Fatalf("no burst fired while %d events came 500 ms apart with max_wait 3s", events)
	}
	total := 0
	for total < events {
		v := recv(t, got, 15*time.Second)
		total += v["count"].(int)
	}
	if total != events {
		t.Fatalf("bursts counted %d events, want %d", total, events)
	}
	select {
	case v := <-got:
		t.Fatalf("another burst fired: %v", v)
	case <-time.After(3 * time.Second):
	}
}

// With a key, one session holds a burst per key: each fires once with its
// own latest event and count.
func TestDebounceKeySeparatesBursts(t *testing.T) {
	e := setup(t)
	def := compile(t, `name: deb
model: {provider: scripted}
triggers:
  - name: comment
    when: event.type == "com.github.issue_comment.created"
    session: "'repo'"
    debounce: {window: 1s, key: string(event.data.issue)}
`)
	a := newAdmitter(t, e, nil, def)
	ref, _ := streams.NewSessionRef("deb", "repo")
	got := fired(t, e, ref)
	ctx := context.Background()
	for i, issue := range []int{1, 2, 1, 2, 1} {
		ev := ghEvent(fmt.Sprint("k", i), "com.github.issue_comment.created", fmt.Sprintf(`{"issue": %d, "n": %d}`, issue, i))
		ds, err := a.Decide(ctx, ev)
		if err != nil || len(ds) != 1 || ds[0].Outcome != admission.Debounced || ds[0].DebounceKey != fmt.Sprint(issue) {
			t.Fatalf("event %d: %+v %v", i, ds, err)
		}
		if _, err := a.Debounce(ctx, ev, ds[0]); err != nil {
			t.Fatal(err)
		}
	}
	bursts := map[string]map[string]any{}
	for range 2 {
		v := recv(t, got, 15*time.Second)
		bursts[v["id"].(string)] = v
	}
	if b := bursts["k4"]; b == nil || b["count"] != 3 || b["data"] != `{"issue": 1, "n": 4}` {
		t.Errorf("burst of issue 1: %v", bursts)
	}
	if b := bursts["k3"]; b == nil || b["count"] != 2 {
		t.Errorf("burst of issue 2: %v", bursts)
	}
}

// A throttle queues what a rate limit would drop: at most per_minute
// events a minute reach the session, spaced out, each once, in the order
// they came; a retry of an event keeps its turn.
func TestThrottleQueuesInsteadOfDropping(t *testing.T) {
	e := setup(t)
	def := compile(t, `name: thr
model: {provider: scripted}
triggers:
  - name: push
    when: event.type == "com.github.push"
    session: "'main'"
    throttle: {per_minute: 60, key: event.source}
`)
	a := newAdmitter(t, e, nil, def)
	ref, _ := streams.NewSessionRef("thr", "main")
	got := fired(t, e, ref)
	ctx := context.Background()
	var ats []time.Time
	for i := 1; i <= 3; i++ {
		ev := ghEvent(fmt.Sprint("t", i), "com.github.push", fmt.Sprintf(`{"n": %d}`, i))
		ds, err := a.Decide(ctx, ev)
		if err != nil || len(ds) != 1 {
			t.Fatalf("event %d: %+v %v", i, ds, err)
		}
		d := ds[0]
		switch {
		case i == 1 && d.Outcome != admission.Admitted:
			t.Fatalf("the first event waits: %+v", d)
		case i > 1 && (d.Outcome != admission.Throttled || !d.At.After(ats[len(ats)-1])):
			t.Fatalf("event %d: %+v, want throttled after %v", i, d, ats)
		}
		if i == 1 {
			ats = append(ats, time.Now())
			continue
		}
		ats = append(ats, d.At)
		again, err := a.Decide(ctx, ev)
		if err != nil || again[0].Outcome != admission.Throttled || !again[0].At.Equal(d.At) {
			t.Fatalf("a retry of event %d: %+v %v, want its turn %s", i, again, err, d.At)
		}
		for range 2 { // and a retry of the publish stores it once
			if err := a.Delay(ctx, ev, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	if gap := ats[2].Sub(ats[1]); gap != time.Second {
		t.Fatalf("turns %v: %s apart, want 1s at 60 a minute", ats, gap)
	}
	// Another key has a queue of its own: its first event goes at once.
	other := ghEvent("t-other", "com.github.push", `{"n": 0}`)
	other.SetSource("https://github.com/octo/other")
	if ds, err := a.Decide(ctx, other); err != nil || ds[0].Outcome != admission.Admitted {
		t.Fatalf("another key's first event: %+v %v", ds, err)
	}
	for _, want := range []string{"t2", "t3"} {
		if v := recv(t, got, 15*time.Second); v["id"] != want {
			t.Fatalf("delivered %v, want %s", v, want)
		}
	}
	select {
	case v := <-got:
		t.Fatalf("delivered again: %v", v)
	case <-time.After(2 * time.Second):
	}
}

// A trigger's on_busy travels on the events it admits, for the worker;
// a sender cannot supply it.
func TestOnBusyIsStamped(t *testing.T) {
	e := setup(t)
	def := compile(t, `name: ob
model: {provider: scripted}
triggers:
  - {name: push, when: event.type == "com.github.push", session: "'main'", on_busy: interrupt}
  - {name: other, when: "true", session: "'main'"}
`)
	a := newAdmitter(t, e, nil, def)
	for _, tt := range []struct{ typ, want string }{{"com.github.push", "interrupt"}, {"com.github.ping", ""}} {
		ev := ghEvent("o-"+tt.typ, tt.typ, `{}`)
		ev.SetExtension(admission.ExtOnBusy, "steer") // the sender's says nothing
		ds, err := a.Decide(context.Background(), ev)
		if err != nil || len(ds) != 1 || ds[0].OnBusy != tt.want {
			t.Fatalf("%s: %+v %v", tt.typ, ds, err)
		}
		got, _ := admission.Stamp(ev, ds[0]).Extensions()[admission.ExtOnBusy].(string)
		if got != tt.want {
			t.Errorf("%s: stamped on_busy %q, want %q", tt.typ, got, tt.want)
		}
	}
}

// A throttle key that reads event.data is evaluated over the decoded
// data, although no other expression of the trigger reads it: two
// repositories' first events each go at once, in queues of their own.
func TestThrottleKeyReadsData(t *testing.T) {
	e := setup(t)
	def := compile(t, `name: thrd
model: {provider: scripted}
triggers:
  - name: push
    when: event.type == "com.github.push"
    session: "'main'"
    throttle: {per_minute: 1, key: event.data.repo}
`)
	a := newAdmitter(t, e, nil, def)
	ctx := context.Background()
	for i, repo := range []string{"octo/a", "octo/b"} {
		ev := ghEvent(fmt.Sprint("d", i), "com.github.push", fmt.Sprintf(`{"repo": %q}`, repo))
		ds, err := a.Decide(ctx, ev)
		if err != nil || len(ds) != 1 || ds[0].Outcome != admission.Admitted {
			t.Fatalf("first event of %s: %+v %v, want admitted", repo, ds, err)
		}
	}
}
