package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/internal/logtest"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/schedule"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/worker"
)

// scheduleDefs serves one definition to the worker and the reconciler.
type scheduleDefs struct{ defs }

func (d scheduleDefs) List(context.Context) ([]policies.Definition, error) {
	var out []policies.Definition
	for _, def := range d.defs {
		out = append(out, def)
	}
	return out, nil
}

func (d scheduleDefs) Watch(ctx context.Context) (<-chan policies.Change, error) {
	return make(chan policies.Change), nil
}

// runSchedule installs def's schedules and runs a worker for it.
func runSchedule(t *testing.T, e *env, def policies.Definition) *schedule.Reconciler {
	t.Helper()
	d := scheduleDefs{defs{def.Name: def}}
	r, err := schedule.NewReconciler(context.Background(), schedule.Config{Names: e.names}, e.js, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.start(t, worker.Config{Definitions: d, Agents: []string{def.Name}})
	return r
}

func monitorDef(sched policies.Schedule, script ...policies.ScriptEntry) policies.Definition {
	return policies.Definition{Name: "mon", Model: scripted(script...), Schedules: []policies.Schedule{sched}}
}

// waitHealth waits until the schedule's record satisfies ok.
func waitHealth(t *testing.T, r *schedule.Reconciler, ok func(schedule.Health) error) schedule.Health {
	t.Helper()
	var h schedule.Health
	natstest.WaitFor(t, 60*time.Second, func() error {
		var err error
		if h, err = r.Health().Get(context.Background(), "mon", "drift"); err != nil {
			return err
		}
		return ok(h)
	})
	return h
}

func ticksIn(tr record.Transcript) int {
	n := 0
	for _, e := range tr.Transcript {
		if e.Kind == record.KindEvent && e.Name == "dev.jetloop.tick" {
			n++
		}
	}
	return n
}

func TestPersistentScheduleContinuesOneSession(t *testing.T) {
	e := setup(t)
	r := runSchedule(t, e, monitorDef(policies.Schedule{Name: "drift", Cron: "@every 1s"},
		policies.ScriptEntry{Text: "checked"}))
	ref := e.ref(t, "mon", "drift")
	natstest.WaitFor(t, 60*time.Second, func() error {
		tr, err := record.Show(context.Background(), e.js, e.names, ref)
		if err != nil {
			return err
		}
		if n := ticksIn(tr); n < 3 {
			return fmt.Errorf("%d ticks in the session so far", n)
		}
		return nil
	})
	h := waitHealth(t, r, func(h schedule.Health) error {
		if h.LastResult != schedule.ResultOK {
			return fmt.Errorf("last result %q", h.LastResult)
		}
		return nil
	})
	if h.ConsecutiveFailures != 0 || h.State != schedule.StateActive {
		t.Fatalf("health %+v", h)
	}
}

func TestEphemeralScheduleRunsASessionPerTick(t *testing.T) {
	e := setup(t)
	runSchedule(t, e, monitorDef(policies.Schedule{Name: "drift", Cron: "@every 1s", Session: schedule.Ephemeral},
		policies.ScriptEntry{Text: "digest"}))
	natstest.WaitFor(t, 60*time.Second, func() error {
		sums, err := record.List(context.Background(), e.js, e.names)
		if err != nil {
			return err
		}
		done := 0
		for _, s := range sums {
			if s.Agent == "mon" && s.Session != "drift" && s.Status == record.StatusDone {
				done++
			}
		}
		if done < 2 {
			return fmt.Errorf("%d ephemeral sessions done", done)
		}
		return nil
	})
}

func TestOverlapSkipDoesNotPileUp(t *testing.T) {
	e := setup(t)
	// Each run takes 2.5 slots: with skip, the ticks that fire meanwhile
	// are dropped, not queued behind it.
	slow := policies.ScriptEntry{Text: "slow check", Delay: policies.Duration(2500 * time.Millisecond)}
	r := runSchedule(t, e, monitorDef(policies.Schedule{Name: "drift", Cron: "@every 1s", Overlap: schedule.OverlapSkip}, slow))
	waitHealth(t, r, func(h schedule.Health) error {
		if h.LastResult != schedule.ResultSkipped {
			return fmt.Errorf("last result %q", h.LastResult)
		}
		return nil
	})
	ref := e.ref(t, "mon", "drift")
	var tr record.Transcript
	natstest.WaitFor(t, 60*time.Second, func() error {
		var err error
		tr, err = record.Show(context.Background(), e.js, e.names, ref)
		if err != nil {
			return err
		}
		if ticksIn(tr) < 2 {
			return fmt.Errorf("%d runs", ticksIn(tr))
		}
		return nil
	})
	// Every run began from a tick that fired after the previous run ended.
	var lastEnd time.Time
	for _, en := range tr.Transcript {
		switch {
		case en.Kind == record.KindEvent && en.Name == "dev.jetloop.tick":
			if !lastEnd.IsZero() && en.Time.Before(lastEnd) {
				t.Errorf("tick of %s ran though it fired before the previous run ended at %s", en.Time, lastEnd)
			}
		case en.Kind == record.KindAssistant:
			lastEnd = en.Time
		}
	}
}

func TestBreakerTripsOnFailingTicksAndResumes(t *testing.T) {
	e := setup(t)
	failing := policies.ScriptEntry{Error: "server_error"}
	r := runSchedule(t, e, monitorDef(policies.Schedule{Name: "drift", Cron: "@every 1s", MaxFailures: 2}, failing))
	h := waitHealth(t, r, func(h schedule.Health) error {
		if h.State != schedule.StateSuspended {
			return fmt.Errorf("state %s after %d failures", h.State, h.ConsecutiveFailures)
		}
		return nil
	})
	if h.ConsecutiveFailures != 2 || h.LastResult != schedule.ResultFailed {
		t.Fatalf("tripped with %+v", h)
	}
	rep, err := r.Reconcile(context.Background())
	if err != nil || len(rep.Suspended) != 1 {
		t.Fatalf("reconcile after trip: %v %v", rep, err)
	}
	if _, err := r.Health().Resume(context.Background(), "mon", "drift"); err != nil {
		t.Fatal(err)
	}
	if rep, err := r.Reconcile(context.Background()); err != nil || len(rep.Added) != 1 {
		t.Fatalf("reconcile after resume: %v %v", rep, err)
	}
}

func TestTickTimeoutFailsTheRunNotTheSession(t *testing.T) {
	e := setup(t)
	slow := policies.ScriptEntry{Text: "slow", Delay: policies.Duration(time.Minute)}
	r := runSchedule(t, e, monitorDef(policies.Schedule{Name: "drift", Cron: "@every 1s", Timeout: policies.Duration(500 * time.Millisecond), MaxFailures: 100}, slow))
	waitHealth(t, r, func(h schedule.Health) error {
		if h.LastResult != schedule.ResultTimeout {
			return fmt.Errorf("last result %q", h.LastResult)
		}
		return nil
	})
	tr, err := record.Show(context.Background(), e.js, e.names, e.ref(t, "mon", "drift"))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status.Final() {
		t.Fatalf("a tick timeout ended the session: %s (%s)", tr.Status, tr.Reason)
	}
}

// TestCancelPreviousEndsTheRunningRun runs a schedule whose runs outlast
// their slot with overlap cancel_previous: each newer tick cancels the
// running run ("cancelled by a newer tick", its model call aborted) and
// starts its own; the session never becomes final, and a superseded run
// is not a failure: with max_failures 2 the breaker never trips.
func TestCancelPreviousEndsTheRunningRun(t *testing.T) {
	e := setup(t)
	slow := policies.ScriptEntry{Text: "slow", Delay: policies.Duration(time.Minute)}
	r := runSchedule(t, e, monitorDef(policies.Schedule{Name: "drift", Cron: "@every 1s", Overlap: schedule.OverlapCancelPrevious, MaxFailures: 2}, slow))
	ref := e.ref(t, "mon", "drift")
	var tr record.Transcript
	natstest.WaitFor(t, 60*time.Second, func() error {
		var err error
		if tr, err = record.Show(context.Background(), e.js, e.names, ref); err != nil {
			return err
		}
		superseded := 0
		for _, en := range tr.Transcript {
			if en.Kind == record.KindSystem && strings.HasPrefix(en.Text, "cancelled by a newer tick") {
				superseded++
			}
		}
		if superseded < 2 || ticksIn(tr) < 3 {
			return fmt.Errorf("%d runs cancelled by newer ticks of %d", superseded, ticksIn(tr))
		}
		// A run a tick replaces before its model call began aborts
		// none: wait for two that did.
		if tr.Budget.Usage.UnknownUsageCalls < 2 {
			return fmt.Errorf("aborted model calls counted: %+v", tr.Budget.Usage)
		}
		return nil
	})
	if tr.Status.Final() || tr.Pending != nil && tr.Pending.Kind != record.StepModel {
		t.Fatalf("session %s (%s), pending %+v", tr.Status, tr.Reason, tr.Pending)
	}
	h := waitHealth(t, r, func(h schedule.Health) error {
		if h.LastResult != schedule.ResultSuperseded || !strings.Contains(h.LastError, "cancelled by a newer tick") {
			return fmt.Errorf("last result %q (%s)", h.LastResult, h.LastError)
		}
		return nil
	})
	if h.State != schedule.StateActive || h.ConsecutiveFailures != 0 {
		t.Fatalf("health %+v", h)
	}
}

// fireTick publishes one tick of spec's schedule to the schedule's
// session by hand, as the worker routes a tick (the server lets no client
// set its own schedule headers): a tick without a server schedule behind
// it, so the test decides when ticks come. next names the slot.
func fireTick(t *testing.T, e *env, spec schedule.Spec, next time.Time) {
	t.Helper()
	m, err := spec.Message(e.names)
	if err != nil {
		t.Fatal(err)
	}
	scheduler := m.Subject
	m.Subject = e.names.In(e.ref(t, spec.Agent, spec.Session))
	for k := range m.Header {
		if strings.HasPrefix(k, "Nats-") {
			m.Header.Del(k)
		}
	}
	schedule.Route(m.Header, scheduler, next.UTC().Format(time.RFC3339Nano))
	if _, err := e.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

func resolve(t *testing.T, agent string, s policies.Schedule) schedule.Spec {
	t.Helper()
	spec, err := schedule.Resolve(agent, s)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestTickTimeoutAppliesToItsOwnRunOnly runs a persistent scheduled
// session: a tick whose run is done, then a user's message whose model
// call outlasts the tick's timeout. The message's run is not the tick's:
// it finishes, and the tick keeps its recorded result.
func TestTickTimeoutAppliesToItsOwnRunOnly(t *testing.T) {
	e := setup(t)
	sched := policies.Schedule{Name: "drift", Cron: "@every 1h", Timeout: policies.Duration(300 * time.Millisecond)}
	def := monitorDef(sched,
		policies.ScriptEntry{Text: "checked"},
		policies.ScriptEntry{Text: "answered slowly", Delay: policies.Duration(time.Second)})
	e.start(t, worker.Config{Definitions: defs{"mon": def}, Agents: []string{"mon"}})
	ref := e.ref(t, "mon", "drift")
	fireTick(t, e, resolve(t, "mon", sched), time.Now().Add(time.Hour))
	natstest.WaitFor(t, 30*time.Second, func() error {
		tr, err := record.Show(context.Background(), e.js, e.names, ref)
		if err != nil {
			return err
		}
		if st := state(t, e, ref); st.Tick == nil || st.Tick.Result == "" {
			return fmt.Errorf("status %s, tick result not recorded: %+v", tr.Status, st.Tick)
		}
		return nil
	})
	e.send(t, ref, "what changed?")
	natstest.WaitFor(t, 30*time.Second, func() error {
		tr, err := record.Show(context.Background(), e.js, e.names, ref)
		if err != nil {
			return err
		}
		if tr.Status == record.StatusFailed {
			t.Fatalf("the message's run failed: %s", tr.Reason)
		}
		if tr.Status != record.StatusDone || count(tr, record.KindAssistant, "") != 2 {
			return fmt.Errorf("status %s, transcript %s", tr.Status, kinds(tr))
		}
		return nil
	})
	st := state(t, e, ref)
	if st.Tick != nil && (st.Tick.TimedOut || st.Tick.Result != schedule.ResultOK) {
		t.Fatalf("the tick's record changed after its run: %+v", st.Tick)
	}
}

// sleeper is a replay-unsafe tool that runs until its context ends.
type sleeper struct{ started chan string }

func (sleeper) Spec() tools.Spec {
	return tools.Spec{Name: "sleep", Description: "sleep", Schema: json.RawMessage(`{"type":"object"}`), State: tools.Resource}
}

func (s sleeper) Call(ctx context.Context, c tools.Call) (tools.Result, error) {
	select {
	case s.started <- c.ID:
	default:
	}
	<-ctx.Done()
	return tools.Result{}, ctx.Err()
}

// TestTimeoutDuringToolCall ends a run while the first of its two tool
// calls runs, by the tick's timeout and by the run's deadline: the call
// that was running is answered "may or may not have run" (the model must
// not take it for undone and run it again), the one after it "not run".
func TestTimeoutDuringToolCall(t *testing.T) {
	two := policies.ScriptEntry{Text: "Two things.", ToolCalls: []policies.ScriptToolCall{
		{Name: "sleep", Args: map[string]any{"n": 1}}, {Name: "sleep", Args: map[string]any{"n": 2}}}}
	sched := policies.Schedule{Name: "drift", Cron: "@every 1h", Timeout: policies.Duration(300 * time.Millisecond)}
	tests := []struct {
		name      string
		def       policies.Definition
		start     func(t *testing.T, e *env)
		status    record.Status
		inflight  string
		notRunPfx string
	}{
		{
			name: "tick timeout",
			def:  monitorDef(sched, two),
			start: func(t *testing.T, e *env) {
				fireTick(t, e, resolve(t, "mon", sched), time.Now().Add(time.Hour))
			},
			status:    record.StatusFailed,
			inflight:  "cancelled by the tick timeout; may or may not have run",
			notRunPfx: "not run: tick timeout",
		},
		{
			name: "run deadline",
			def: policies.Definition{Name: "mon", Tools: []string{"sleep"}, Model: scripted(two),
				Budget: policies.Budget{Deadline: policies.Duration(300 * time.Millisecond)}},
			start: func(t *testing.T, e *env) {
				e.send(t, e.ref(t, "mon", "drift"), "go")
			},
			status:    record.StatusBudgetExceeded,
			inflight:  "cancelled by the run's deadline; may or may not have run",
			notRunPfx: "not run: budget exceeded",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			tc.def.Tools = []string{"sleep"}
			started := make(chan string, 4)
			e.start(t, worker.Config{Definitions: defs{"mon": tc.def}, Agents: []string{"mon"}, Tools: worker.ToolMap{"sleep": sleeper{started}}})
			ref := e.ref(t, "mon", "drift")
			tc.start(t, e)
			tr := e.waitStatus(t, ref, tc.status)
			checkCalls(t, tr)
			if len(started) != 1 {
				t.Fatalf("%d calls started, want 1", len(started))
			}
			var calls []string
			results := map[string]record.Entry{}
			for _, en := range tr.Transcript {
				switch en.Kind {
				case record.KindToolCall:
					calls = append(calls, en.CallID)
				case record.KindToolResult:
					results[en.CallID] = en
				}
			}
			if len(calls) != 2 {
				t.Fatalf("transcript %s", kinds(tr))
			}
			if r := results[calls[0]]; !strings.HasPrefix(r.Result, tc.inflight) || !r.IsError {
				t.Errorf("the running call's result %q, want %q…", r.Result, tc.inflight)
			}
			if r := results[calls[1]]; !strings.HasPrefix(r.Result, tc.notRunPfx) || !r.IsError {
				t.Errorf("the next call's result %q, want %q…", r.Result, tc.notRunPfx)
			}
		})
	}
}

// TestJitterDelaysTicks runs an @every 4s schedule with a jitter of 3s:
// each tick the server fires runs once, no sooner than its slot plus its
// stable delay (a delayed message on the session's timer subject fires
// it), and nothing is held while it waits.
func TestJitterDelaysTicks(t *testing.T) {
	e := setup(t)
	runSchedule(t, e, monitorDef(policies.Schedule{Name: "drift", Cron: "@every 4s", Jitter: policies.Duration(3 * time.Second)},
		policies.ScriptEntry{Text: "checked"}))
	ref := e.ref(t, "mon", "drift")
	var tr record.Transcript
	natstest.WaitFor(t, 60*time.Second, func() error {
		var err error
		if tr, err = record.Show(context.Background(), e.js, e.names, ref); err != nil {
			return err
		}
		if n := ticksIn(tr); n < 3 {
			return fmt.Errorf("%d ticks so far", n)
		}
		return nil
	})
	// Where each tick was fired, and where it ran from.
	in, err := e.js.Stream(context.Background(), e.names.StreamIn())
	if err != nil {
		t.Fatal(err)
	}
	fired := map[string]time.Time{}
	ran := map[uint64]bool{}
	for seq := uint64(1); ; seq++ {
		m, err := in.GetMsg(context.Background(), seq, jetstream.WithGetMsgSubject(e.names.In(ref)))
		if err != nil {
			break
		}
		seq = m.Sequence
		tk, err := schedule.ParseTick(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
		if err != nil {
			t.Fatal(err)
		}
		if !tk.Jittered {
			fired[tk.ID] = m.Time
		}
		ran[seq] = tk.Jittered
	}
	seen := map[string]bool{}
	delayed := 0
	for _, en := range tr.Transcript {
		if en.Kind != record.KindEvent || en.Name != "dev.jetloop.tick" {
			continue
		}
		id := en.Event.ID
		if seen[id] {
			t.Fatalf("tick %s ran twice", id)
		}
		seen[id] = true
		d := schedule.JitterDelay(id, 3*time.Second)
		if d > 0 {
			delayed++
			if !ran[en.Event.Seq] {
				t.Errorf("tick %s (delay %s) ran from the server's message, not its delayed copy", id, d)
			}
		}
		if got := en.Time.Sub(fired[id]); got < d-time.Second || got > d+2*time.Second {
			t.Errorf("tick %s ran %s after it fired, want about %s", id, got, d)
		}
	}
	t.Logf("%d of %d ticks delayed", delayed, len(seen))
}

// TestTickTimeoutDoesNotCountWaiting runs a tick whose run blocks on an
// approval for longer than the tick's timeout: the time it waited does
// not count, so once approved the run finishes and the tick's result is
// ok, not timeout.
func TestTickTimeoutDoesNotCountWaiting(t *testing.T) {
	e := setup(t)
	led := &ledger{path: filepath.Join(t.TempDir(), "ledger")}
	sched := policies.Schedule{Name: "drift", Cron: "@every 1h", Timeout: policies.Duration(time.Second)}
	def := monitorDef(sched, callLedger("Writing."), policies.ScriptEntry{Text: "Written."})
	def.Tools = []string{"ledger"}
	def.Approvals = []policies.Approval{{Name: "ledger", When: `tool.name == "ledger"`}}
	e.start(t, worker.Config{Definitions: defs{"mon": def}, Tools: worker.ToolMap{"ledger": led}, Agents: []string{"mon"}})
	ref := e.ref(t, "mon", "drift")
	fireTick(t, e, resolve(t, "mon", sched), time.Now().Add(time.Hour))
	tr := e.waitStatus(t, ref, record.StatusBlocked)
	// Waiting past the timeout is what is tested: time has to pass.
	time.Sleep(1500 * time.Millisecond)
	publish(t, e, ref, control.Message{Verb: control.Approve, CallID: tr.WaitingFor})
	tr = e.waitStatus(t, ref, record.StatusDone)
	natstest.WaitFor(t, 30*time.Second, func() error {
		if st := state(t, e, ref); st.Tick == nil || st.Tick.Result != schedule.ResultOK || st.Tick.TimedOut {
			return fmt.Errorf("tick %+v", st.Tick)
		}
		return nil
	})
	if got := led.lines(t); len(got) != 1 {
		t.Fatalf("ledger %v", got)
	}
}

// TestTickTimeoutDoesNotCountDowntime stops the worker while a tick's run
// has its model call in flight and starts it again after longer than the
// tick's timeout: the time nobody ran the session does not count, so the
// call is made again, the run finishes and the tick's result is ok, not
// timeout.
func TestTickTimeoutDoesNotCountDowntime(t *testing.T) {
	e := setup(t)
	sched := policies.Schedule{Name: "drift", Cron: "@every 1h", Timeout: policies.Duration(2 * time.Second)}
	def := monitorDef(sched, policies.ScriptEntry{Text: "Checked."})
	p := newProbe(true)
	cfg := worker.Config{ID: "w1", WorkDir: t.TempDir(), Definitions: defs{"mon": def}, Agents: []string{"mon"}, Models: p.factory,
		ShutdownGrace: 100 * time.Millisecond, Log: logtest.ForTest(t)}
	ctx, stop := context.WithCancel(context.Background())
	w, err := worker.New(ctx, e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	ref := e.ref(t, "mon", "drift")
	fireTick(t, e, resolve(t, "mon", sched), time.Now().Add(time.Hour))
	select {
	case <-p.calling:
	case <-time.After(30 * time.Second):
		t.Fatal("no model call")
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("worker: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("worker did not stop")
	}
	if st := state(t, e, ref); st.Status != record.StatusWorking || st.Tick == nil || st.Tick.Deadline.IsZero() {
		t.Fatalf("stopped with status %s, tick %+v", st.Status, st.Tick)
	}
	// The downtime outlasting the timeout is what is tested: time has to
	// pass while no worker runs.
	time.Sleep(2500 * time.Millisecond)
	e.start(t, worker.Config{ID: "w1", Definitions: defs{"mon": def}, Agents: []string{"mon"}, Models: p.factory})
	tr := e.waitStatus(t, ref, record.StatusDone)
	natstest.WaitFor(t, 30*time.Second, func() error {
		if st := state(t, e, ref); st.Tick == nil || st.Tick.Result != schedule.ResultOK || st.Tick.TimedOut {
			return fmt.Errorf("tick %+v, reason %q", st.Tick, st.Reason)
		}
		return nil
	})
	if n := len(p.requests()); n != 2 {
		t.Errorf("%d model calls, want the interrupted one and the one made again", n)
	}
	if strings.Contains(tr.Reason, "tick timeout") {
		t.Errorf("reason %q", tr.Reason)
	}
}
