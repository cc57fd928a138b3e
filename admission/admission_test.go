package admission_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
)

type env struct {
	url   string
	js    jetstream.JetStream
	names streams.Names
}

func setup(t testing.TB) env {
	t.Helper()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s.ClientURL())
	if _, err := streams.Provision(context.Background(), js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	return env{url: s.ClientURL(), js: js, names: streams.Default()}
}

func compile(t testing.TB, yaml string) *policies.Compiled {
	t.Helper()
	c, err := policies.Parse(t.Name()+".yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newAdmitter(t testing.TB, e env, now func() time.Time, defs ...*policies.Compiled) *admission.Admitter {
	t.Helper()
	rules := admission.NewRules()
	rules.Set(defs...)
	a, err := admission.New(context.Background(), e.js, rules, admission.Config{Names: e.names, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func ghEvent(id, typ, data string) event.Event {
	e := event.New()
	e.SetID(id)
	e.SetSource("https://github.com/octo/repo")
	e.SetType(typ)
	e.SetSubject("pull/12")
	_ = e.SetData("application/json", []byte(data))
	return e
}

const reviewer = `name: reviewer
model: {provider: scripted}
triggers:
  - name: broken
    when: event.type == "com.github.issue_comment.created" && event.data.comment.missing
  - name: pr
    when: event.type.startsWith("com.github.pull_request.")
    session: event.data.repository.full_name + "#" + string(event.data.number)
    prompt: "Review {{ event.data.repository.full_name }}#{{ event.data.number }}"
`

const pusher = `name: pusher
model: {provider: scripted}
triggers:
  - name: push
    when: event.type == "com.github.push"
`

func TestDecide(t *testing.T) {
	e := setup(t)
	a := newAdmitter(t, e, nil, compile(t, reviewer), compile(t, pusher))
	ctx := context.Background()
	pr := `{"number": 12, "repository": {"full_name": "octo/repo"}}`
	tests := []struct {
		name string
		ev   event.Event
		want []admission.Decision
	}{
		{name: "admitted by one, rejected by the other", ev: ghEvent("1", "com.github.pull_request.opened", pr), want: []admission.Decision{
			{Agent: "pusher", Outcome: admission.Rejected},
			{Agent: "reviewer", Trigger: "pr", Outcome: admission.Admitted, Session: "octo/repo#12"},
		}},
		{name: "error, then no match", ev: ghEvent("2", "com.github.issue_comment.created", `{"comment": {}}`), want: []admission.Decision{
			{Agent: "pusher", Outcome: admission.Rejected},
			{Agent: "reviewer", Trigger: "broken", Outcome: admission.Failed},
		}},
		{name: "rejected by all", ev: ghEvent("3", "com.github.ping", `{}`), want: []admission.Decision{
			{Agent: "pusher", Outcome: admission.Rejected},
			{Agent: "reviewer", Outcome: admission.Rejected},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds, err := a.Decide(ctx, tt.ev)
			if err != nil {
				t.Fatal(err)
			}
			if len(ds) != len(tt.want) {
				t.Fatalf("decisions %+v, want %+v", ds, tt.want)
			}
			for i, w := range tt.want {
				d := ds[i]
				if d.Agent != w.Agent || d.Trigger != w.Trigger || d.Outcome != w.Outcome || d.Session != w.Session {
					t.Errorf("decision %d: %+v, want %+v", i, d, w)
				}
			}
		})
	}

	addressed := ghEvent("4", "com.github.push", `{}`)
	addressed.SetExtension(events.ExtAgent, "reviewer")
	if ds, err := a.Decide(ctx, addressed); err != nil || len(ds) != 1 || ds[0].Agent != "reviewer" || ds[0].Outcome != admission.Rejected {
		t.Fatalf("addressed event: %+v %v", ds, err)
	}
	addressed.SetExtension(events.ExtAgent, "nobody")
	if _, err := a.Decide(ctx, addressed); !errors.Is(err, admission.ErrUnknownAgent) {
		t.Fatalf("unknown agent: %v", err)
	}
	bad := ghEvent("5", "com.github.push", `{}`)
	bad.DataEncoded = []byte(`{"broken`)
	if _, err := a.Decide(ctx, bad); !errors.Is(err, admission.ErrBadData) {
		t.Fatalf("bad data: %v", err)
	}
}

func TestDecideWaitsForDefinitions(t *testing.T) {
	e := setup(t)
	a, err := admission.New(context.Background(), e.js, admission.NewRules(), admission.Config{Names: e.names})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Decide(context.Background(), ghEvent("1", "x", `{}`)); !errors.Is(err, admission.ErrNotReady) {
		t.Fatalf("err %v, want ErrNotReady", err)
	}
}

const limited = `name: limited
model: {provider: scripted}
triggers:
  - name: push
    when: event.type == "com.github.push"
    rate: {key: event.data.repo, per_minute: 2}
`

// The rate limit is one bucket per key shared by every Admitter (every
// ingest process), refilled by elapsed time.
func TestRateLimitSharedAcrossProcesses(t *testing.T) {
	e := setup(t)
	var mu sync.Mutex
	clock := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	def := compile(t, limited)
	a1 := newAdmitter(t, e, now, def)
	_, js2 := natstest.Connect(t, e.url)
	a2 := newAdmitter(t, env{js: js2, names: e.names}, now, def)
	ctx := context.Background()
	n := 0
	decide := func(a *admission.Admitter, repo string) admission.Outcome {
		t.Helper()
		n++
		ds, err := a.Decide(ctx, ghEvent(fmt.Sprint("e", n), "com.github.push", fmt.Sprintf(`{"repo": %q}`, repo)))
		if err != nil {
			t.Fatal(err)
		}
		return ds[0].Outcome
	}
	steps := []struct {
		name    string
		a       *admission.Admitter
		repo    string
		advance time.Duration
		want    admission.Outcome
	}{
		{name: "first token", a: a1, repo: "r1", want: admission.Admitted},
		{name: "second token from the other process", a: a2, repo: "r1", want: admission.Admitted},
		{name: "bucket empty", a: a1, repo: "r1", want: admission.RateLimited},
		{name: "bucket empty for the other process too", a: a2, repo: "r1", want: admission.RateLimited},
		{name: "other key has its own bucket", a: a2, repo: "r2", want: admission.Admitted},
		{name: "one token back after 30s", a: a2, repo: "r1", advance: 30 * time.Second, want: admission.Admitted},
		{name: "and only one", a: a1, repo: "r1", want: admission.RateLimited},
	}
	for _, s := range steps {
		mu.Lock()
		clock = clock.Add(s.advance)
		mu.Unlock()
		if got := decide(s.a, s.repo); got != s.want {
			t.Fatalf("%s: %s, want %s", s.name, got, s.want)
		}
	}
}

// Concurrent takes from one bucket never grant more than its capacity.
func TestRateLimitUnderContention(t *testing.T) {
	e := setup(t)
	now := func() time.Time { return time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) }
	def := compile(t, `name: limited
model: {provider: scripted}
triggers:
  - name: push
    when: "true"
    rate: {key: "'all'", per_minute: 1, burst: 5}
`)
	as := []*admission.Admitter{newAdmitter(t, e, now, def)}
	for range 2 {
		_, js := natstest.Connect(t, e.url)
		as = append(as, newAdmitter(t, env{js: js, names: e.names}, now, def))
	}
	var admitted, limitedN int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 15 {
		wg.Go(func() {
			ds, err := as[i%3].Decide(context.Background(), ghEvent(fmt.Sprint(i), "x", `{}`))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			switch ds[0].Outcome {
			case admission.Admitted:
				admitted++
			case admission.RateLimited:
				limitedN++
			}
		})
	}
	wg.Wait()
	if admitted != 5 || limitedN != 10 {
		t.Fatalf("admitted %d, limited %d; want 5 and 10", admitted, limitedN)
	}
}

// Five events of a burst for one session become one event on jl.in,
// after the quiet window, with the fifth's data and a count of five.
func TestDebounceFiresOnceWithLatestData(t *testing.T) {
	e := setup(t)
	def := compile(t, `name: deb
model: {provider: scripted}
triggers:
  - name: push
    when: event.type == "com.github.push"
    session: "'main'"
    debounce: {window: 1s}
`)
	a := newAdmitter(t, e, nil, def)
	ctx := context.Background()
	ref, _ := streams.NewSessionRef("deb", "main")
	sub, err := e.js.OrderedConsumer(ctx, e.names.StreamIn(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{e.names.In(ref)}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		ev := ghEvent(fmt.Sprint("d", i), "com.github.push", fmt.Sprintf(`{"n": %d}`, i))
		ds, err := a.Decide(ctx, ev)
		if err != nil || len(ds) != 1 || ds[0].Outcome != admission.Debounced {
			t.Fatalf("event %d: %+v %v", i, ds, err)
		}
		n, err := a.Debounce(ctx, ev, ds[0])
		if err != nil || n != i {
			t.Fatalf("event %d: count %d, %v", i, n, err)
		}
	}
	// A retry of the fifth delivery does not count again.
	ev5 := ghEvent("d5", "com.github.push", `{"n": 5}`)
	ds, _ := a.Decide(ctx, ev5)
	if n, err := a.Debounce(ctx, ev5, ds[0]); err != nil || n != 5 {
		t.Fatalf("retried event: count %d, %v", n, err)
	}
	msg, err := sub.Next(jetstream.FetchMaxWait(15 * time.Second))
	if err != nil {
		t.Fatalf("no debounced event fired: %v", err)
	}
	got, err := events.FromMsg(&nats.Msg{Subject: msg.Subject(), Header: msg.Headers(), Data: msg.Data()})
	if err != nil {
		t.Fatal(err)
	}
	if got.ID() != "d5" || string(got.Data()) != `{"n": 5}` || got.Extensions()[admission.ExtCount] != "5" || got.Extensions()[events.ExtSession] != "main" {
		t.Fatalf("fired event %s data %s extensions %v", got.ID(), got.Data(), got.Extensions())
	}
	// The schedule message is gone, so nothing else can fire; and only
	// the one event reached the session.
	if _, err := jsStream(t, e).GetLastMsgForSubject(ctx, e.names.Debounce(ref)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("pending debounce message left: %v", err)
	}
	info, err := jsStream(t, e).Info(ctx, jetstream.WithSubjectFilter(e.names.In(ref)))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[e.names.In(ref)]; n != 1 {
		t.Fatalf("%d events on %s, want 1", n, e.names.In(ref))
	}
}

func jsStream(t *testing.T, e env) jetstream.Stream {
	t.Helper()
	s, err := e.js.Stream(context.Background(), e.names.StreamIn())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRecordsAndDeadLetters(t *testing.T) {
	e := setup(t)
	a := newAdmitter(t, e, nil, compile(t, reviewer), compile(t, pusher))
	ctx := context.Background()
	start := time.Now().Add(-time.Minute)
	for _, ev := range []event.Event{
		ghEvent("1", "com.github.pull_request.opened", `{"number": 12, "repository": {"full_name": "octo/repo"}}`),
		ghEvent("2", "com.github.issue_comment.created", `{"comment": {}}`),
		ghEvent("3", "com.github.ping", `{}`),
	} {
		ds, err := a.Decide(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := a.Messages(ev, ds, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := admission.Publish(ctx, e.js, msgs); err != nil {
			t.Fatal(err)
		}
	}
	dup, err := a.DuplicateMessage(ghEvent("1", "com.github.pull_request.opened", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := admission.Publish(ctx, e.js, []*nats.Msg{dup}); err != nil {
		t.Fatal(err)
	}
	recs, err := admission.Recent(ctx, e.js, e.names, "", start, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		id      string
		outcome admission.Outcome
		rule    string
	}{
		{"1", admission.Admitted, "reviewer/pr"},
		{"2", admission.Failed, "reviewer/broken"},
		{"3", admission.Rejected, ""},
		{"1", admission.Duplicate, ""},
	}
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d: %+v", len(recs), len(want), recs)
	}
	for i, w := range want {
		if r := recs[i]; r.Event.ID != w.id || r.Outcome != w.outcome || r.Rule != w.rule {
			t.Errorf("record %d: %+v, want %+v", i, r, w)
		}
	}
	if recs, _ := admission.Recent(ctx, e.js, e.names, "reviewer", start, 1); len(recs) != 1 || recs[0].Outcome != admission.Failed {
		t.Fatalf("newest record of reviewer: %+v", recs)
	}
	// Each read removes the consumer it read with: the server keeps an
	// idle one for minutes and allows a stream only so many.
	if st, err := e.js.Stream(ctx, e.names.StreamAudit()); err != nil {
		t.Fatal(err)
	} else if info, err := st.Info(ctx); err != nil {
		t.Fatal(err)
	} else if info.State.Consumers != 0 {
		t.Fatalf("%s has %d consumers after two reads of its records, want 0", e.names.StreamAudit(), info.State.Consumers)
	}

	dlq, err := e.js.Stream(ctx, e.names.StreamDLQ())
	if err != nil {
		t.Fatal(err)
	}
	subject, _ := e.names.DLQ(string(admission.DLQReason))
	raw, err := dlq.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatalf("no dead letter: %v", err)
	}
	if raw.Header.Get(admission.HeaderRule) != "reviewer/broken" || raw.Header.Get(admission.HeaderError) == "" {
		t.Fatalf("dead letter headers %v", raw.Header)
	}
	back, err := events.FromMsg(&nats.Msg{Subject: raw.Subject, Header: raw.Header, Data: raw.Data})
	if err != nil || back.ID() != "2" {
		t.Fatalf("dead letter does not carry the event: %v %v", back, err)
	}
}

// Rules follow jl_agents: loaded before Synced closes, updated on apply,
// and a stored version that does not compile leaves the previous one.
func TestRulesWatchStore(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	store, err := policies.NewStore(ctx, e.js, e.names)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Put(ctx, compile(t, pusher).Definition); err != nil {
		t.Fatal(err)
	}
	rules := admission.NewRules()
	done := make(chan error, 1)
	go func() { done <- rules.Watch(ctx, store, slog.New(slog.DiscardHandler)) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	select {
	case <-rules.Synced():
	case <-time.After(10 * time.Second):
		t.Fatal("rules never synced")
	}
	if _, ok := rules.Agent("pusher"); !ok {
		t.Fatal("stored agent not loaded")
	}
	v, err := store.Put(ctx, compile(t, reviewer).Definition)
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if c, ok := rules.Agent("reviewer"); !ok || c.Definition.Version != v {
			return errors.New("update not seen yet")
		}
		return nil
	})
	kv, _ := e.js.KeyValue(ctx, e.names.BucketAgents())
	if _, err := kv.Put(ctx, "reviewer", []byte(`{"definition":{"name":"reviewer","model":{"provider":"scripted"},"triggers":[{"name":"t","when":"event.nope"}]}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Put(ctx, compile(t, limited).Definition); err != nil {
		t.Fatal(err)
	}
	// The later put is seen, so the refused version was processed before it.
	natstest.WaitFor(t, 10*time.Second, func() error {
		if _, ok := rules.Agent("limited"); !ok {
			return errors.New("later put not seen yet")
		}
		return nil
	})
	if c, _ := rules.Agent("reviewer"); c.Definition.Version != v {
		t.Fatalf("reviewer at version %d after a refused version, want %d", c.Definition.Version, v)
	}
}
