package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/dlq"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/schedule"
	"github.com/jetloop/jetloop/streams"
)

// tickTimeoutText is the reason a run ended by its tick's timeout.
const tickTimeoutText = "tick timeout"

// tickInput applies DESIGN §10's worker side to a tick: the routing of
// ephemeral ticks to their own session, dedupe by tick id, the breaker and
// the overlap policy. It returns the tick's event for a tick that starts
// a run; handled reports an input consumed without a run (next then
// records it).
func (s *session) tickInput(ctx context.Context, in *input, next *record.State) (ev event.Event, handled bool, err error) {
	msg := &nats.Msg{Subject: in.subject, Header: in.header, Data: in.data}
	t, err := schedule.ParseTick(msg)
	if err != nil {
		if err := s.w.deadLetter(ctx, in.subject, in.header, in.data, in.seq, dlq.BadTick, "unreadable tick: "+err.Error()); err != nil {
			return ev, false, err
		}
		return ev, true, nil
	}
	log := s.log.With("schedule", t.Spec.Schedule, "tick", t.ID, "slot", t.Slot)
	if t.Spec.Mode == schedule.Ephemeral && s.r.ref.Session == t.Spec.Session {
		// The schedule's own session only routes: each tick gets a session
		// named by its slot.
		err := s.w.forwardTick(ctx, t)
		if errors.Is(err, streams.ErrFull) {
			// No session is started: the tick goes to JL_DLQ (a redrive
			// routes it again) and its schedule records it failed.
			if err := s.w.deadLetter(ctx, in.subject, in.header, in.data, in.seq, dlq.NoRoom, err.Error()); err != nil {
				return ev, false, err
			}
			s.w.recordTick(ctx, s.r.ref.Agent, t.Spec.Schedule, t.ID, t.Slot, schedule.ResultFailed, err)
			return ev, true, nil
		}
		if err != nil {
			return ev, false, err
		}
		log.Info("ephemeral tick routed", "to", t.Session)
		return ev, true, nil
	}
	if next.LastTickID == t.ID {
		log.Info("tick fired twice (a leader change); processed once")
		return ev, true, nil
	}
	if seen, err := s.w.tickSeen(ctx, t.ID); err != nil {
		return ev, false, err
	} else if seen {
		// A backfill of a slot that ran, or a tick redelivered after the
		// one that followed it.
		log.Info("tick processed before; not again", "kind", t.Kind)
		return ev, true, nil
	}
	if !t.Manual() && !t.Jittered {
		if w := t.Spec.CatchupWindow.D(); w > 0 && !t.Slot.IsZero() {
			if late := time.Since(t.Slot); late > w {
				why := fmt.Sprintf("slot %s missed by %s, more than catchup_window %s", t.Slot.Format(time.RFC3339), late.Round(time.Second), w)
				next.LastTickID = t.ID
				log.Info("missed tick skipped", "why", why)
				s.w.recordTick(ctx, s.r.ref.Agent, t.Spec.Schedule, t.ID, t.Slot, schedule.ResultSkipped, errors.New(why))
				return ev, true, nil
			}
		}
		if deferred, err := s.jitter(ctx, in, t); err != nil || deferred {
			return ev, deferred, err
		}
	}
	next.LastTickID = t.ID
	if t.Spec.Mode == schedule.Ephemeral {
		// A session of its own for this tick (retention: sessions
		// ephemeral).
		next.Ephemeral = true
	}
	if s.w.schedules != nil {
		h, err := s.w.schedules.Get(ctx, s.r.ref.Agent, t.Spec.Schedule)
		if err == nil && h.State == schedule.StateSuspended {
			log.Warn("tick of a suspended schedule skipped")
			return ev, true, nil
		}
	}
	if skip, why := s.overlap(ctx, in, t); skip {
		log.Info("tick skipped", "overlap", t.Spec.Overlap, "why", why)
		s.w.recordTick(ctx, s.r.ref.Agent, t.Spec.Schedule, t.ID, t.Slot, schedule.ResultSkipped, errors.New(why))
		return ev, true, nil
	}
	run := &record.TickRun{ID: t.ID, Schedule: t.Spec.Schedule, Slot: t.Slot, Overlap: t.Spec.Overlap}
	if d := t.Spec.Timeout.D(); d > 0 {
		run.Deadline = time.Now().UTC().Add(d)
	}
	next.Tick = run
	return t.Event, false, nil
}

// overlap applies the schedule's overlap policy to a tick about to start a
// run, and says why it is skipped. A session runs one input at a time, so
// a tick that fired while the previous run went on is read only after it:
// skip drops such a tick; queue_one keeps only the latest of the ticks
// that queued up; cancel_previous lets the latest run (and the newer tick
// has already ended the previous run: see supersededRun).
//
// A tick published by hand (a trigger, a backfill's slots) is exempt: it
// was asked for, and waits its turn. A tick behind which a later tick of
// its schedule is queued is a slot missed while nothing ran it (the
// worker was down): only the latest of them runs, whatever the policy.
func (s *session) overlap(ctx context.Context, in *input, t schedule.Tick) (bool, string) {
	if t.Manual() {
		return false, ""
	}
	firedDuringRun := !s.st.RunStarted.IsZero() && in.time.After(s.st.RunStarted) &&
		(s.st.RunEnded.Before(s.st.RunStarted) || in.time.Before(s.st.RunEnded))
	switch t.Spec.Overlap {
	case schedule.OverlapSkip:
		if s.st.Status.Waiting() {
			return true, "the previous run is still waiting (" + string(s.st.Status) + ")"
		}
		if firedDuringRun {
			return true, "fired while the previous run was still going"
		}
		if later, ok := s.laterTick(ctx, in.seq, t.Spec.Schedule); ok {
			return true, fmt.Sprintf("a missed slot: a later tick (seq %d) is queued", later)
		}
	case schedule.OverlapQueueOne, schedule.OverlapCancelPrevious:
		if later, ok := s.laterTick(ctx, in.seq, t.Spec.Schedule); ok {
			return true, fmt.Sprintf("a later tick (seq %d) is queued", later)
		}
	}
	return false, ""
}

// laterTick finds a tick of the same schedule queued after seq for this
// session.
func (s *session) laterTick(ctx context.Context, seq uint64, sched string) (uint64, bool) {
	return s.r.laterTick(ctx, seq, sched)
}

// laterTick finds a tick of schedule sched in JL_IN after seq for the
// runner's session.
func (r *runner) laterTick(ctx context.Context, seq uint64, sched string) (uint64, bool) {
	subject := r.w.names.In(r.ref)
	for n := 0; n < 1000; n++ {
		m, err := streams.GetMsg(ctx, r.w.js, r.w.in, seq+1, subject)
		if err != nil {
			return 0, false
		}
		if schedule.IsTick(&nats.Msg{Header: m.Header}) {
			// Ticks asked for by hand replace nothing.
			if t, err := schedule.ParseTick(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}); err == nil && t.Spec.Schedule == sched && !t.Manual() {
				return m.Sequence, true
			}
		}
		seq = m.Sequence
	}
	return 0, false
}

// checkSupersede ends the working cancel_previous tick run when d is a
// newer tick of its schedule. It is called with r.mu held.
func (r *runner) checkSupersede(d delivery) {
	r.ctlMu.Lock()
	sched, from := r.runTick, r.runInSeq
	r.ctlMu.Unlock()
	if sched == "" || d.seq <= from || !schedule.IsTick(&nats.Msg{Header: d.msg.Headers()}) {
		return
	}
	t, err := schedule.ParseTick(&nats.Msg{Subject: d.msg.Subject(), Header: d.msg.Headers(), Data: d.msg.Data()})
	if err != nil || t.Spec.Schedule != sched {
		return
	}
	r.supersede()
}

// pollSupersede looks in JL_IN for a newer tick of the working
// cancel_previous tick run, for when the tick was delivered to another
// worker.
func (r *runner) pollSupersede(ctx context.Context) {
	r.ctlMu.Lock()
	sched, from, done := r.runTick, r.runInSeq, r.superseded
	r.ctlMu.Unlock()
	if sched == "" || done {
		return
	}
	if _, ok := r.laterTick(ctx, from, sched); ok {
		r.supersede()
	}
}

// supersededRun reports whether the session's working run was started by
// a tick of a cancel_previous schedule that a newer tick of the same
// schedule now replaces.
func (s *session) supersededRun(ctx context.Context) bool {
	t := s.st.Tick
	if s.st.Status != record.StatusWorking || t == nil || t.Overlap != schedule.OverlapCancelPrevious || t.Superseded || t.Result != "" {
		return false
	}
	s.r.ctlMu.Lock()
	flagged := s.r.superseded
	s.r.ctlMu.Unlock()
	if flagged {
		return true
	}
	_, ok := s.laterTick(ctx, s.st.InSeq, t.Schedule)
	return ok
}

// endSuperseded ends a run a newer tick replaces, settling the step it
// aborted and the calls left open. It is what cancel_previous asks for,
// not a failure: the session rests idle (the newer tick starts the next
// run) and the tick's result is superseded, which the breaker does not
// count.
func (s *session) endSuperseded(ctx context.Context) error {
	next := s.st.Clone()
	e := s.entry(&next, record.KindSystem)
	e.Text = fmt.Sprintf("%s: tick %s of schedule %s replaced this run", supersededText, next.Tick.ID, next.Tick.Schedule)
	entries := append([]record.Entry{e}, s.settleOpen(&next, supersededText)...)
	next.Tick.Superseded = true
	next.SetStatus(record.StatusIdle, supersededText, time.Now().UTC())
	s.log.Info("run cancelled by a newer tick", "schedule", next.Tick.Schedule, "tick", next.Tick.ID)
	return s.commit(ctx, entries, next)
}

// forwardTick publishes an ephemeral tick to its own session, once per
// tick id.
func (w *Worker) forwardTick(ctx context.Context, t schedule.Tick) error {
	ref, err := streams.NewSessionRef(t.Spec.Agent, t.Session)
	if err != nil {
		return fmt.Errorf("worker: route tick %s: %w", t.ID, err)
	}
	subject := w.names.In(ref)
	m, err := events.ToMsg(subject, t.Event)
	if err != nil {
		return fmt.Errorf("worker: route tick %s: %w", t.ID, err)
	}
	// The session reads it as the same tick.
	schedule.Route(m.Header, t.Scheduler, t.NextHeader)
	if t.Manual() {
		m.Header.Set(schedule.HeaderKind, t.Kind)
		m.Header.Set(schedule.HeaderSlot, t.Slot.Format(time.RFC3339Nano))
	}
	if t.Jittered {
		m.Header.Set(schedule.HeaderJittered, "1")
	}
	m.Header.Set(nats.MsgIdHdr, t.ID)
	if err := w.inRoom(ctx, ref, writerEphemeralTick, false, len(m.Data)); err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := w.js.PublishMsg(pctx, m); err != nil {
		return fmt.Errorf("worker: route tick %s to %s: %w", t.ID, subject, err)
	}
	return nil
}

// tickTimeout ends the run its tick's timeout ran out on, as failed: the
// session is not final, the next tick starts another run.
func (s *session) tickTimeout(ctx context.Context) error {
	reason := fmt.Sprintf("%s: the run of tick %s outlived its schedule's timeout", tickTimeoutText, s.st.Tick.ID)
	s.log.Warn("tick timeout", "schedule", s.st.Tick.Schedule, "tick", s.st.Tick.ID)
	return s.failStepWith(ctx, reason, func(next *record.State) { next.Tick.TimedOut = true })
}

// recordTickResult records the result of the tick that started the run
// that has just come to rest, once, and remembers it in the state.
func (s *session) recordTickResult(ctx context.Context) error {
	t := s.st.Tick
	result := schedule.ResultOK
	var terr error
	switch {
	case t.Superseded:
		result, terr = schedule.ResultSuperseded, errors.New(supersededText)
	case t.TimedOut:
		result, terr = schedule.ResultTimeout, errors.New(s.st.Reason)
	case s.st.Status == record.StatusDone || s.st.Status == record.StatusIdle:
	default:
		result, terr = schedule.ResultFailed, fmt.Errorf("%s: %s", s.st.Status, s.st.Reason)
	}
	s.w.recordTick(ctx, s.r.ref.Agent, t.Schedule, t.ID, t.Slot, result, terr)
	next := s.st.Clone()
	next.Tick.Result = result
	return s.commit(ctx, nil, next)
}

// recordTick writes a tick's result to jl_schedules; the breaker trips
// there. A failure to record is logged: the run itself has settled.
func (w *Worker) recordTick(ctx context.Context, agent, sched, id string, slot time.Time, result string, terr error) {
	if w.schedules == nil {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	h, tripped, err := w.schedules.RecordTick(rctx, agent, sched, id, slot, result, terr)
	if err != nil {
		w.log.Warn("record tick result", "agent", agent, "schedule", sched, "tick", id, "err", err)
		return
	}
	if tripped {
		w.log.Warn("schedule suspended: too many consecutive failures", "agent", agent, "schedule", sched,
			"failures", h.ConsecutiveFailures, "resume", "jetloop schedules resume "+agent+"/"+sched)
	}
}
