package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/schedule"
	"github.com/jetloop/jetloop/streams"
)

// memDefs is an in-memory definition source.
type memDefs struct {
	mu   sync.Mutex
	defs map[string]policies.Definition
	subs []chan policies.Change
}

func newDefs(ds ...policies.Definition) *memDefs {
	m := &memDefs{defs: map[string]policies.Definition{}}
	for _, d := range ds {
		m.defs[d.Name] = d
	}
	return m
}

func (m *memDefs) List(context.Context) ([]policies.Definition, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []policies.Definition
	for _, d := range m.defs {
		out = append(out, d)
	}
	return out, nil
}

func (m *memDefs) Watch(ctx context.Context) (<-chan policies.Change, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := make(chan policies.Change, 16)
	m.subs = append(m.subs, ch)
	return ch, nil
}

func (m *memDefs) set(d policies.Definition) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.defs[d.Name] = d
	for _, ch := range m.subs {
		ch <- policies.Change{Agent: d.Name}
	}
}

func monitor(pattern string) policies.Definition {
	return policies.Definition{
		Name:      "mon",
		Model:     policies.Model{Provider: "scripted"},
		Schedules: []policies.Schedule{{Name: "drift", Cron: pattern, MaxFailures: 2}},
	}
}

func setup(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	_, js := natstest.Connect(t, url)
	if _, err := streams.Provision(context.Background(), js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	return js
}

func newReconciler(t *testing.T, js jetstream.JetStream, defs schedule.Definitions) *schedule.Reconciler {
	t.Helper()
	r, err := schedule.NewReconciler(context.Background(), schedule.Config{Names: streams.Default(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, js, defs)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func scheduleMessages(t *testing.T, js jetstream.JetStream) map[string]uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), "JL_IN")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter("jl.sched.>"))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects
}

func TestReconcileIsIdempotentAndFollowsDefinitions(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	js := setup(t, srv.ClientURL())
	defs := newDefs(monitor("@every 1h"))
	r := newReconciler(t, js, defs)

	rep, err := r.Reconcile(ctx)
	if err != nil || len(rep.Added) != 1 {
		t.Fatalf("first pass: %v %v", rep, err)
	}
	rep, err = r.Reconcile(ctx)
	if err != nil || rep.Changed() || len(rep.Unchanged) != 1 {
		t.Fatalf("second pass changed something: %v %v", rep, err)
	}
	if got := scheduleMessages(t, js); got["jl.sched.mon.drift"] != 1 || len(got) != 1 {
		t.Fatalf("schedule messages: %v", got)
	}

	// A changed pattern replaces the message; the subject still holds one.
	defs.set(monitor("@every 2h"))
	rep, err = r.Reconcile(ctx)
	if err != nil || len(rep.Replaced) != 1 {
		t.Fatalf("after a change: %v %v", rep, err)
	}
	if got := scheduleMessages(t, js); got["jl.sched.mon.drift"] != 1 {
		t.Fatalf("schedule messages after replace: %v", got)
	}

	// A removed schedule loses its message.
	d := monitor("@every 2h")
	d.Schedules = nil
	defs.set(d)
	rep, err = r.Reconcile(ctx)
	if err != nil || len(rep.Removed) != 1 {
		t.Fatalf("after removal: %v %v", rep, err)
	}
	if got := scheduleMessages(t, js); len(got) != 0 {
		t.Fatalf("schedule messages after removal: %v", got)
	}
}

func TestBadPatternIsRecordedAndOthersInstalled(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	js := setup(t, srv.ClientURL())
	d := monitor("@every 1h")
	d.Schedules = append(d.Schedules, policies.Schedule{Name: "broken", Cron: "every tuesday"})
	r := newReconciler(t, js, newDefs(d))
	rep, err := r.Reconcile(ctx)
	if err != nil || len(rep.Added) != 1 || len(rep.Errors) != 1 {
		t.Fatalf("pass: %v %v", rep, err)
	}
	h, err := r.Health().Get(ctx, "mon", "broken")
	if err != nil || h.InstallError == "" {
		t.Fatalf("broken schedule health: %+v %v", h, err)
	}
}

// A definition whose schedule no longer parses (a stored version the
// store did not refuse: written by an older release, or by hand) leaves
// the running schedule as it is: its message stays and keeps firing.
func TestBadPatternKeepsTheRunningSchedule(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	js := setup(t, srv.ClientURL())
	c := collectTicks(t, js)
	defs := newDefs(monitor("@every 1s"))
	r := newReconciler(t, js, defs)
	if rep, err := r.Reconcile(ctx); err != nil || len(rep.Added) != 1 {
		t.Fatalf("first pass: %v %v", rep, err)
	}
	c.wait(t, 1, 30*time.Second)
	before := scheduleMessages(t, js)

	defs.set(monitor("*/2 * * *")) // four fields
	rep, err := r.Reconcile(ctx)
	if err != nil || len(rep.Removed) != 0 || len(rep.Errors) != 1 {
		t.Fatalf("pass over the bad pattern: %v %v", rep, err)
	}
	if got := scheduleMessages(t, js); got["jl.sched.mon.drift"] != before["jl.sched.mon.drift"] || len(got) != 1 {
		t.Fatalf("schedule messages after a bad pattern: %v, before %v", got, before)
	}
	h, err := r.Health().Get(ctx, "mon", "drift")
	if err != nil || !strings.Contains(h.InstallError, "4 fields") {
		t.Fatalf("health of the kept schedule: %+v %v", h, err)
	}
	// It keeps firing.
	c.wait(t, 2, 30*time.Second)
}

func TestConcurrentReconcilersKeepOneMessage(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	js := setup(t, srv.ClientURL())
	defs := newDefs(monitor("@every 1h"))
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		_, js := natstest.Connect(t, srv.ClientURL())
		r := newReconciler(t, js, defs)
		wg.Go(func() {
			_, err := r.Reconcile(ctx)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	s, _ := js.Stream(ctx, "JL_IN")
	info, _ := s.Info(ctx)
	if got := scheduleMessages(t, js); got["jl.sched.mon.drift"] != 1 || info.State.Msgs != 1 {
		t.Fatalf("three reconcilers left %v (stream holds %d)", got, info.State.Msgs)
	}
}

// tickCollector consumes ticks on jl.in.> and records them by id.
type tickCollector struct {
	mu    sync.Mutex
	ticks []schedule.Tick
	times []time.Time
	got   chan struct{}
}

func collectTicks(t *testing.T, js jetstream.JetStream) *tickCollector {
	t.Helper()
	ctx := context.Background()
	c := &tickCollector{got: make(chan struct{}, 1000)}
	cons, err := js.OrderedConsumer(ctx, "JL_IN", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"jl.in.>"}})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		md, _ := m.Metadata()
		tick, err := schedule.ParseTick(&nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
		if err != nil {
			t.Errorf("not a tick on %s: %v", m.Subject(), err)
			return
		}
		c.mu.Lock()
		c.ticks = append(c.ticks, tick)
		c.times = append(c.times, md.Timestamp)
		c.mu.Unlock()
		c.got <- struct{}{}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return c
}

// wait waits for n more ticks.
func (c *tickCollector) wait(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for range n {
		select {
		case <-c.got:
		case <-deadline:
			t.Fatalf("fewer than %d ticks within %s", n, timeout)
		}
	}
}

func (c *tickCollector) snapshot() ([]schedule.Tick, []time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]schedule.Tick(nil), c.ticks...), append([]time.Time(nil), c.times...)
}

// distinctSlots checks that every tick has a different id and slot, and
// returns how many there were.
func distinctSlots(t *testing.T, ticks []schedule.Tick) int {
	t.Helper()
	ids, slots := map[string]bool{}, map[time.Time]bool{}
	for _, tk := range ticks {
		if ids[tk.ID] {
			t.Errorf("tick %s (slot %s) fired twice", tk.ID, tk.Slot)
		}
		if slots[tk.Slot] {
			t.Errorf("slot %s fired twice", tk.Slot)
		}
		ids[tk.ID], slots[tk.Slot] = true, true
	}
	return len(ids)
}

func TestEverySecondFiresOncePerSlot(t *testing.T) {
	for _, reconcilers := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d reconcilers", reconcilers), func(t *testing.T) {
			srv := natstest.RunServer(t)
			js := setup(t, srv.ClientURL())
			c := collectTicks(t, js)
			defs := newDefs(monitor("@every 1s"))
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for range reconcilers {
				_, js := natstest.Connect(t, srv.ClientURL())
				r := newReconciler(t, js, defs)
				wg.Go(func() { _ = r.Run(ctx) })
			}
			c.wait(t, 4, 30*time.Second)
			cancel()
			wg.Wait()
			ticks, times := c.snapshot()
			distinctSlots(t, ticks)
			// Four ticks of a 1 s schedule span about three seconds, not
			// one: the ticks are spread over their slots, not a burst.
			if span := times[3].Sub(times[0]); span < 2*time.Second {
				t.Errorf("4 ticks within %s: more than one per slot", span)
			}
			for _, tk := range ticks {
				if tk.Session != "drift" || tk.Spec.Agent != "mon" || tk.Slot.IsZero() {
					t.Errorf("tick %+v", tk)
				}
			}
		})
	}
}

func TestEphemeralTicksGetASessionPerSlot(t *testing.T) {
	srv := natstest.RunServer(t)
	js := setup(t, srv.ClientURL())
	c := collectTicks(t, js)
	d := monitor("@every 1s")
	d.Schedules[0].Session = schedule.Ephemeral
	r := newReconciler(t, js, newDefs(d))
	if _, err := r.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.wait(t, 2, 30*time.Second)
	ticks, _ := c.snapshot()
	if ticks[0].Session == ticks[1].Session || ticks[0].Session == "drift" {
		t.Fatalf("ephemeral sessions: %q and %q", ticks[0].Session, ticks[1].Session)
	}
	if got := ticks[0].Event.Extensions()["jlsession"]; got != ticks[0].Session {
		t.Fatalf("event jlsession = %v, want %s", got, ticks[0].Session)
	}
}

func TestBreakerTripsAndResumes(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	js := setup(t, srv.ClientURL())
	r := newReconciler(t, js, newDefs(monitor("@every 1h")))
	if _, err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	h := r.Health()
	slot := time.Now()
	if _, tripped, err := h.RecordTick(ctx, "mon", "drift", "t1", slot, schedule.ResultFailed, fmt.Errorf("boom")); err != nil || tripped {
		t.Fatalf("first failure: tripped=%v err=%v", tripped, err)
	}
	// A redelivered result of the same tick counts once.
	if rec, _, _ := h.RecordTick(ctx, "mon", "drift", "t1", slot, schedule.ResultFailed, nil); rec.ConsecutiveFailures != 1 {
		t.Fatalf("redelivery counted: %d failures", rec.ConsecutiveFailures)
	}
	rec, tripped, err := h.RecordTick(ctx, "mon", "drift", "t2", slot, schedule.ResultTimeout, nil)
	if err != nil || !tripped || rec.State != schedule.StateSuspended {
		t.Fatalf("second failure: %+v tripped=%v err=%v", rec, tripped, err)
	}
	rep, err := r.Reconcile(ctx)
	if err != nil || len(rep.Removed) != 1 || len(rep.Suspended) != 1 {
		t.Fatalf("pass after trip: %v %v", rep, err)
	}
	if got := scheduleMessages(t, js); len(got) != 0 {
		t.Fatalf("a suspended schedule still has its message: %v", got)
	}
	if _, err := h.Resume(ctx, "mon", "drift"); err != nil {
		t.Fatal(err)
	}
	rep, err = r.Reconcile(ctx)
	if err != nil || len(rep.Added) != 1 {
		t.Fatalf("pass after resume: %v %v", rep, err)
	}
	rec, _ = h.Get(ctx, "mon", "drift")
	if rec.State != schedule.StateActive || rec.ConsecutiveFailures != 0 {
		t.Fatalf("after resume: %+v", rec)
	}
}

func TestDowntimeFiresOnceNotOncePerMissedSlot(t *testing.T) {
	if testing.Short() {
		t.Skip("waits through several slots of downtime")
	}
	dir := t.TempDir()
	srv := natstest.RunServer(t, natstest.WithDir(dir))
	js := setup(t, srv.ClientURL())
	r := newReconciler(t, js, newDefs(monitor("@every 1s")))
	if _, err := r.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := collectTicks(t, js)
	c.wait(t, 1, 30*time.Second)
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Downtime is the scenario: five slots pass while no server runs.
	time.Sleep(5 * time.Second)
	srv = natstest.RunServer(t, natstest.WithDir(dir))
	restarted := time.Now()
	_, js = natstest.Connect(t, srv.ClientURL())
	c = collectTicks(t, js)
	before, _ := c.snapshot()
	c.wait(t, len(before)+3, 30*time.Second)
	ticks, times := c.snapshot()
	var after []schedule.Tick
	var early int
	for i, tk := range ticks {
		if times[i].After(restarted) {
			after = append(after, tk)
			if times[i].Sub(restarted) < 1500*time.Millisecond {
				early++
			}
		}
	}
	distinctSlots(t, after)
	// One catch-up tick at start, then at most the next slot: five
	// replayed slots would arrive together.
	if early > 2 {
		t.Fatalf("%d ticks within 1.5 s of the restart: missed slots were replayed", early)
	}
}

func TestTicksContinueAcrossLeaderFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	ctx := context.Background()
	cl := natstest.RunCluster(t, 3)
	nc, err := cl.Connect(nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := streams.Provision(ctx, js, streams.Options{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	r := newReconciler(t, js, newDefs(monitor("@every 1s")))
	if _, err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	c := collectTicks(t, js)
	c.wait(t, 2, 30*time.Second)

	s, _ := js.Stream(ctx, "JL_IN")
	info, _ := s.Info(ctx)
	for i, n := range cl.Nodes() {
		if n != nil && n.Name() == info.Cluster.Leader {
			cl.Stop(i)
		}
	}
	before, _ := c.snapshot()
	c.wait(t, 3, 60*time.Second)
	ticks, _ := c.snapshot()
	// The server may fire a slot again when the leader changes mid-fire;
	// such a tick has the same id, and jetloop processes it once.
	seen := map[string]bool{}
	var unique []schedule.Tick
	for _, tk := range ticks {
		if !seen[tk.ID] {
			seen[tk.ID] = true
			unique = append(unique, tk)
		}
	}
	distinctSlots(t, unique)
	if len(unique) < len(before)+2 {
		t.Fatalf("only %d distinct ticks after failover (had %d)", len(unique), len(before))
	}
}

// A new schedule message is refused while JL_IN holds half its limits:
// the pass reports it, the schedule's health records why, and the next
// pass with room installs it.
func TestNewScheduleWaitsForRoomInJLIN(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	n := streams.Default()
	if _, err := streams.Provision(ctx, js, streams.Options{Limits: map[string]streams.Limit{n.StreamIn(): {Bytes: 1 << 20, Msgs: 4}}}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := js.Publish(ctx, "jl.in.other.s", []byte("held")); err != nil {
			t.Fatal(err)
		}
	}
	r := newReconciler(t, js, newDefs(monitor("@every 1h")))
	rep, err := r.Reconcile(ctx)
	if err != nil || len(rep.Added) != 0 || len(rep.Errors) != 1 || !errors.Is(rep.Errors[0], streams.ErrFull) {
		t.Fatalf("pass with JL_IN at half its limits: %v %v", rep, err)
	}
	if h, err := r.Health().Get(ctx, "mon", "drift"); err != nil || !strings.Contains(h.InstallError, "half its max_msgs") {
		t.Fatalf("health of the refused schedule: %+v %v", h, err)
	}
	s, _ := js.Stream(ctx, n.StreamIn())
	if err := s.Purge(ctx, jetstream.WithPurgeSubject("jl.in.other.s")); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		rep, err := r.Reconcile(ctx)
		if err != nil || len(rep.Added) != 1 {
			return fmt.Errorf("pass with room: %v %v", rep, err)
		}
		return nil
	})
	if h, err := r.Health().Get(ctx, "mon", "drift"); err != nil || h.InstallError != "" {
		t.Fatalf("health once installed: %+v %v", h, err)
	}
}
