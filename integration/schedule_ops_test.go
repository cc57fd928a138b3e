package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/schedule"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/worker"
)

// opsEnv is one real server with the runtime API, and the reconciler
// and workers a test starts when it wants them.
type opsEnv struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	names  streams.Names
	defs   *policies.Store
	client *api.Client
	wg     sync.WaitGroup
	stop   []context.CancelFunc
}

func newOpsEnv(t *testing.T) *opsEnv {
	t.Helper()
	return newOpsEnvWith(t, streams.Options{})
}

// newOpsEnvWith is newOpsEnv with the streams provisioned by opts.
func newOpsEnvWith(t *testing.T, opts streams.Options) *opsEnv {
	t.Helper()
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := &opsEnv{nc: nc, js: js, names: streams.Default()}
	if _, err := streams.Provision(ctx, js, opts); err != nil {
		t.Fatal(err)
	}
	var err error
	if e.defs, err = policies.NewStore(ctx, js, e.names); err != nil {
		t.Fatal(err)
	}
	svc, err := api.New(ctx, nc, js, api.Config{Names: e.names})
	if err != nil {
		t.Fatal(err)
	}
	e.run(t, svc.Run)
	e.client = api.NewClient(nc, e.names)
	natstest.WaitFor(t, 10*time.Second, func() error {
		_, err := e.client.Agents(context.Background())
		return err
	})
	t.Cleanup(func() {
		for _, c := range e.stop {
			c()
		}
		e.wg.Wait()
	})
	return e
}

// run runs f until the test ends.
func (e *opsEnv) run(t *testing.T, f func(context.Context) error) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	e.stop = append(e.stop, cancel)
	e.wg.Go(func() {
		if err := f(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("component: %v", err)
		}
	})
	return cancel
}

// reconcile installs the schedule messages of the stored definitions.
func (e *opsEnv) reconcile(t *testing.T) {
	t.Helper()
	r, err := schedule.NewReconciler(context.Background(), schedule.Config{Names: e.names}, e.js, e.defs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (e *opsEnv) startWorker(t *testing.T, agents ...string) {
	t.Helper()
	w, err := worker.New(context.Background(), e.js, worker.Config{ID: "w1", Definitions: e.defs, Agents: agents, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e.run(t, w.Run)
}

func (e *opsEnv) put(t *testing.T, name string, scheds ...policies.Schedule) {
	t.Helper()
	d := policies.Definition{Name: name, Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{{Text: "checked"}}}, Schedules: scheds}
	if _, err := e.defs.Put(context.Background(), d); err != nil {
		t.Fatal(err)
	}
}

// ticks returns the tick entries of a session's transcript.
func (e *opsEnv) ticks(t *testing.T, agent, session string) []record.Entry {
	t.Helper()
	ref, _ := streams.NewSessionRef(agent, session)
	tr, err := record.Show(context.Background(), e.js, e.names, ref)
	if errors.Is(err, record.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []record.Entry
	for _, en := range tr.Transcript {
		if en.Kind == record.KindEvent && en.Name == "dev.jetloop.tick" {
			out = append(out, en)
		}
	}
	return out
}

func (e *opsEnv) health(t *testing.T, agent, sched string) schedule.Health {
	t.Helper()
	resp, err := e.client.Schedules(context.Background(), api.SchedulesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range resp.Schedules {
		if h.Agent == agent && h.Schedule == sched {
			return h
		}
	}
	return schedule.Health{}
}

// farCron is a 6-field pattern that fires once an hour, at a minute half
// an hour away: the server fires nothing of it while a test runs.
func farCron(now time.Time) string {
	return fmt.Sprintf("0 %d * * * *", (now.Minute()+30)%60)
}

// TestScheduleTrigger fires a schedule the server will not fire during
// the test by hand: it runs once; the same trigger again (one id) fires
// nothing more; another runs again.
func TestScheduleTrigger(t *testing.T) {
	e := newOpsEnv(t)
	e.put(t, "mon", policies.Schedule{Name: "nightly", Cron: farCron(time.Now())}, policies.Schedule{Name: "pulse", Cron: "@every 1h"})
	e.reconcile(t)
	e.startWorker(t, "mon")
	ctx := context.Background()
	first, err := e.client.Schedules(ctx, api.SchedulesRequest{Action: api.ScheduleTrigger, Agent: "mon", Schedule: "nightly", ID: "now-1"})
	if err != nil || len(first.Ticks) != 1 || first.Ticks[0].Seq == 0 || first.Ticks[0].Session != "nightly" {
		t.Fatalf("trigger: %+v, %v", first, err)
	}
	again, err := e.client.Schedules(ctx, api.SchedulesRequest{Action: api.ScheduleTrigger, Agent: "mon", Schedule: "nightly", ID: "now-1"})
	if err != nil || len(again.Ticks) != 1 || (!again.Ticks[0].Duplicate && again.Ticks[0].Skipped == "") {
		t.Fatalf("the same trigger again: %+v, %v", again, err)
	}
	natstest.WaitFor(t, time.Minute, func() error {
		if h := e.health(t, "mon", "nightly"); h.LastResult != schedule.ResultOK || h.LastTickID != first.Ticks[0].ID {
			return fmt.Errorf("health %+v", h)
		}
		return nil
	})
	if _, err := e.client.Schedules(ctx, api.SchedulesRequest{Action: api.ScheduleTrigger, Agent: "mon", Schedule: "nightly"}); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, time.Minute, func() error {
		if n := len(e.ticks(t, "mon", "nightly")); n != 2 {
			return fmt.Errorf("%d ticks ran", n)
		}
		return nil
	})
	for _, tt := range []struct {
		req  api.SchedulesRequest
		want error
		says string
	}{
		{api.SchedulesRequest{Action: api.ScheduleTrigger, Agent: "mon", Schedule: "hourly"}, api.ErrNotFound, `no schedule "hourly"`},
		{api.SchedulesRequest{Action: api.ScheduleTrigger, Agent: "nobody", Schedule: "x"}, api.ErrNotFound, `no agent "nobody"`},
		{api.SchedulesRequest{Action: api.ScheduleBackfill, Agent: "mon", Schedule: "nightly", From: time.Now().Add(time.Hour), To: time.Now().Add(2 * time.Hour)}, api.ErrBadRequest, "in the future"},
		{api.SchedulesRequest{Action: api.ScheduleBackfill, Agent: "mon", Schedule: "nightly", From: time.Now().Add(-2000 * time.Hour), To: time.Now()}, api.ErrBadRequest, "more than 1000 slots"},
		// The server counts an @every schedule's slots from its last fire:
		// a backfill could not tell which of its slots ran.
		{api.SchedulesRequest{Action: api.ScheduleBackfill, Agent: "mon", Schedule: "pulse", From: time.Now().Add(-3 * time.Hour), To: time.Now()}, api.ErrBadRequest, "no fixed times"},
	} {
		_, err := e.client.Schedules(ctx, tt.req)
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%+v: %v, want %v saying %q", tt.req, err, tt.want, tt.says)
		}
	}
	if _, err := e.client.Schedules(ctx, api.SchedulesRequest{Action: api.ScheduleSuspend, Agent: "mon", Schedule: "nightly"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Schedules(ctx, api.SchedulesRequest{Action: api.ScheduleTrigger, Agent: "mon", Schedule: "nightly"}); !errors.Is(err, api.ErrConflict) {
		t.Errorf("trigger of a suspended schedule: %v, want 409", err)
	}
}

// TestScheduleBackfill backfills the last five hours of an hourly
// schedule: five ticks, one per slot, oldest first, in its persistent
// session; the same backfill again fires none. A slot the server fired
// and ran is skipped by a backfill too: the tick ids are the server's.
func TestScheduleBackfill(t *testing.T) {
	e := newOpsEnv(t)
	now := time.Now()
	e.put(t, "mon", policies.Schedule{Name: "hourly", Cron: farCron(now)},
		policies.Schedule{Name: "often", Cron: "*/2 * * * * *", Overlap: schedule.OverlapSkip})
	e.reconcile(t)
	e.startWorker(t, "mon")
	ctx := context.Background()
	from, to := now.Add(-5*time.Hour), now
	resp, err := e.client.Schedules(ctx, api.SchedulesRequest{Action: api.ScheduleBackfill, Agent: "mon", Schedule: "hourly", From: from, To: to})
	if err != nil || len(resp.Ticks) != 5 {
		t.Fatalf("backfill: %+v, %v", resp, err)
	}
	for i, f := range resp.Ticks {
		if f.Seq == 0 || f.Duplicate || f.Skipped != "" || f.Slot.Before(from) || !f.Slot.Before(to) || (i > 0 && !f.Slot.After(resp.Ticks[i-1].Slot)) {
			t.Errorf("tick %d: %+v", i, f)
		}
	}
	natstest.WaitFor(t, time.Minute, func() error {
		if n := len(e.ticks(t, "mon", "hourly")); n != 5 {
			return fmt.Errorf("%d of 5 ticks ran", n)
		}
		return nil
	})
	for i, en := range e.ticks(t, "mon", "hourly") {
		if en.Event == nil || en.Event.ID != resp.Ticks[i].ID {
			t.Errorf("tick entry %d: %+v, want tick %s (slot %s)", i, en, resp.Ticks[i].ID, resp.Ticks[i].Slot)
		}
	}
	again, err := e.client.Schedules(ctx, api.SchedulesRequest{Action: api.ScheduleBackfill, Agent: "mon", Schedule: "hourly", From: from, To: to})
	if err != nil || len(again.Ticks) != 5 {
		t.Fatalf("backfill again: %+v, %v", again, err)
	}
	for _, f := range again.Ticks {
		if f.Seq != 0 || f.Skipped == "" {
			t.Errorf("a slot that ran fired again: %+v", f)
		}
	}

	// A slot the server fired: its backfill is skipped.
	var fired schedule.Health
	natstest.WaitFor(t, time.Minute, func() error {
		if fired = e.health(t, "mon", "often"); fired.LastResult != schedule.ResultOK || fired.LastSlot.IsZero() {
			return fmt.Errorf("health %+v", fired)
		}
		return nil
	})
	slot := fired.LastSlot
	bf, err := e.client.Schedules(ctx, api.SchedulesRequest{Action: api.ScheduleBackfill, Agent: "mon", Schedule: "often", From: slot, To: slot.Add(time.Second)})
	if err != nil || len(bf.Ticks) != 1 || bf.Ticks[0].ID != fired.LastTickID || bf.Ticks[0].Skipped == "" {
		t.Fatalf("backfill of the slot the server fired (%s, tick %s): %+v, %v", slot, fired.LastTickID, bf, err)
	}
}

// TestScheduleCatchupWindow lets ticks of two schedules fire while no
// worker runs, then stops them and starts a worker once the last slot is
// three seconds old: the schedule with a catch-up window of one minute
// runs once for its missed slots (the latest), the one with a window of a
// second runs none; neither counts a failure.
func TestScheduleCatchupWindow(t *testing.T) {
	e := newOpsEnv(t)
	e.put(t, "mon",
		policies.Schedule{Name: "wide", Cron: "@every 1s", CatchupWindow: policies.Duration(time.Minute)},
		policies.Schedule{Name: "narrow", Cron: "@every 1s", CatchupWindow: policies.Duration(time.Second)})
	e.reconcile(t)
	in, err := e.js.Stream(context.Background(), e.names.StreamIn())
	if err != nil {
		t.Fatal(err)
	}
	// Downtime: ticks pile up with nobody to run them.
	natstest.WaitFor(t, time.Minute, func() error {
		info, err := in.Info(context.Background(), jetstream.WithSubjectFilter("jl.in.mon.>"))
		if err != nil {
			return err
		}
		for _, s := range []string{"jl.in.mon.wide", "jl.in.mon.narrow"} {
			if info.State.Subjects[s] < 3 {
				return fmt.Errorf("%v", info.State.Subjects)
			}
		}
		return nil
	})
	if err := in.Purge(context.Background(), jetstream.WithPurgeSubject("jl.sched.>")); err != nil {
		t.Fatal(err)
	}
	last, err := in.GetLastMsgForSubject(context.Background(), "jl.in.mon.narrow")
	if err != nil {
		t.Fatal(err)
	}
	// The worker comes back when the last slot is past the narrow window.
	time.Sleep(time.Until(last.Time.Add(3 * time.Second)))
	e.startWorker(t, "mon")
	natstest.WaitFor(t, time.Minute, func() error {
		for _, s := range []string{"wide", "narrow"} {
			if h := e.health(t, "mon", s); h.LastResult == "" || h.LastTickID == "" {
				return fmt.Errorf("%s: %+v", s, h)
			}
		}
		// A run's result is recorded once its session has come to rest,
		// so the resting session below does not yet say it is.
		if h := e.health(t, "mon", "wide"); h.LastResult != schedule.ResultOK {
			return fmt.Errorf("wide: last result %q (%s), want %q", h.LastResult, h.LastError, schedule.ResultOK)
		}
		if n := len(e.ticks(t, "mon", "wide")); n != 1 {
			return fmt.Errorf("wide ran %d ticks, want 1", n)
		}
		// Every tick of both sessions consumed.
		for _, s := range []string{"wide", "narrow"} {
			ref, _ := streams.NewSessionRef("mon", s)
			last, err := in.GetLastMsgForSubject(context.Background(), e.names.In(ref))
			if err != nil {
				return err
			}
			tr, err := record.Show(context.Background(), e.js, e.names, ref)
			if err != nil {
				return err
			}
			if tr.InSeq != last.Sequence || !tr.Status.Resting() {
				return fmt.Errorf("%s: in_seq %d of %d, %s", s, tr.InSeq, last.Sequence, tr.Status)
			}
		}
		return nil
	})
	if n := len(e.ticks(t, "mon", "narrow")); n != 0 {
		t.Errorf("narrow ran %d ticks older than its window", n)
	}
	wide, narrow := e.health(t, "mon", "wide"), e.health(t, "mon", "narrow")
	if wide.LastResult != schedule.ResultOK || narrow.LastResult != schedule.ResultSkipped || !strings.Contains(narrow.LastError, "catchup_window") ||
		wide.ConsecutiveFailures != 0 || narrow.ConsecutiveFailures != 0 {
		t.Errorf("wide %+v\nnarrow %+v", wide, narrow)
	}
}
