package worker

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
)

// What an event does when its session is busy is its trigger's on_busy,
// which admission stamps on it (admission.ExtOnBusy): enqueue (nothing
// stamped) waits its turn in JL_IN, as every input does; reject is
// consumed without a run, its decision recorded in JL_AUDIT; interrupt
// stops the running run at once, as a cancel stops a step, and starts its
// own; steer joins the running run before its next model call.
//
// Inputs are consumed in the order of JL_IN, so an interrupt or a steer
// acts when it is the session's next input: one that waits behind others
// acts on the run going when its turn comes. The owner of a running
// session learns of such an input through its deliveries, its
// subscription to the session's input subject, and a look at JL_IN when
// it renews its lease.

// errInterrupted aborts the effect of a run a newer event interrupts.
var errInterrupted = fmt.Errorf("%w: %s", errAborted, interruptedRunText)

// interruptedRunText is what an interrupted run's open calls are answered
// with.
const interruptedRunText = "interrupted by a newer event"

// onBusyOf is the on_busy policy stamped on an input's headers, "" for
// enqueue.
func onBusyOf(h nats.Header) string {
	v, _ := events.Attribute(h, admission.ExtOnBusy)
	return v
}

// arrivedBusy reports whether an input that came at t found the session
// busy: waiting for a human in a run, or before the last run came to rest
// (running, or with inputs queued before it).
func arrivedBusy(st record.State, t time.Time) bool {
	return st.Status.Waiting() || !st.RunEnded.IsZero() && t.Before(st.RunEnded)
}

// takesBusyInputs reports whether def has a trigger whose events act on a
// running run (interrupt or steer): only then does the owner look for
// them while a run goes on.
func takesBusyInputs(def *policies.Definition) bool {
	return def != nil && slices.ContainsFunc(def.Triggers, func(t policies.Trigger) bool {
		return t.OnBusy == policies.OnBusyInterrupt || t.OnBusy == policies.OnBusySteer
	})
}

// busyInput applies on_busy to an input that found the session busy: a
// reject is consumed without a run and recorded; an interrupt of a run
// waiting for a human ends that run first (the input then starts its own
// at the next boundary). busy reports an input so handled.
func (s *session) busyInput(ctx context.Context, in *input, ev event.Event) (busy bool, err error) {
	switch onBusyOf(in.header) {
	case policies.OnBusyReject:
		if !arrivedBusy(s.st, in.time) {
			return false, nil
		}
		d := admission.Decision{Agent: s.r.ref.Agent, Session: s.r.ref.Session, Outcome: admission.Busy,
			Version: s.st.DefinitionVersion, OnBusy: policies.OnBusyReject,
			Reason: fmt.Sprintf("the session's run was still going when the event came (on_busy: reject); status %s", s.st.Status)}
		if t, ok := ev.Extensions()[admission.ExtTrigger].(string); ok {
			d.Trigger = t
		}
		m, err := admission.DecisionMessage(s.w.names, ev, d, time.Now())
		if err != nil {
			return true, err
		}
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		// Recorded before it is consumed: a crash in between records it
		// twice (the record's message id makes that once within the
		// stream's window), never not at all.
		if err := admission.Publish(actx, s.w.js, []*nats.Msg{m}); err != nil {
			return true, fmt.Errorf("worker: record the rejection of event %s: %w", ev.ID(), err)
		}
		s.w.m.busy.WithLabelValues(policies.OnBusyReject).Inc()
		s.log.Info("event rejected: the session was busy", "seq", in.seq, "id", ev.ID(), "on_busy", policies.OnBusyReject)
		next := s.st.Clone()
		next.InSeq = in.seq
		return true, s.commit(ctx, nil, next)
	case policies.OnBusyInterrupt:
		if !s.st.Status.Waiting() {
			return false, nil
		}
		return true, s.endInterrupted(ctx, ev.ID())
	}
	return false, nil
}

// interrupt records that the input at seq interrupts the running run and
// aborts the effect in flight.
func (r *runner) interrupt(seq uint64) {
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	if seq <= r.runSeq || seq <= r.interruptSeq {
		return
	}
	r.interruptSeq = seq
	if r.abort != nil {
		r.abort(errInterrupted)
	}
}

// interrupting reports an interrupt waiting for the run started by the
// input at seq.
func (r *runner) interrupting(seq uint64) bool {
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	return r.interruptSeq > seq
}

// lookForBusyInputs reads the session's next input in JL_IN and, when it
// interrupts, interrupts the running run; one that steers makes the loop
// look at its next boundary. It is for the owner of a working run whose
// definition takes such inputs.
func (r *runner) lookForBusyInputs(ctx context.Context) {
	if !r.busyWatch.Load() {
		return
	}
	r.ctlMu.Lock()
	seq := r.runSeq
	r.ctlMu.Unlock()
	m, err := streams.GetMsg(ctx, r.w.js, r.w.in, seq+1, r.w.names.In(r.ref))
	if err != nil {
		return
	}
	switch onBusyOf(m.Header) {
	case policies.OnBusyInterrupt:
		r.interrupt(m.Sequence)
	case policies.OnBusySteer:
		r.steerHint.Store(true)
	}
}

// onInput is the owner's subscription to the session's input subject: an
// event published for the session that acts on a busy run is looked up
// in JL_IN at once.
func (r *runner) onInput(ctx context.Context, m *nats.Msg) {
	switch onBusyOf(m.Header) {
	case policies.OnBusyInterrupt, policies.OnBusySteer:
		r.lookForBusyInputs(ctx)
	}
}

// noteBusyDelivery is add's part: a held delivery that acts on a busy
// run.
func (r *runner) noteBusyDelivery(d delivery) {
	if !r.busyWatch.Load() {
		return
	}
	switch onBusyOf(d.msg.Headers()) {
	case policies.OnBusyInterrupt:
		r.ctlMu.Lock()
		next := d.seq == r.runSeq+1
		r.ctlMu.Unlock()
		if next {
			r.interrupt(d.seq)
		} else {
			r.steerHint.Store(true) // the loop looks in JL_IN
		}
	case policies.OnBusySteer:
		r.steerHint.Store(true)
	}
}

// interruptedRun reports whether the working run is interrupted by the
// session's next input.
func (s *session) interruptedRun(ctx context.Context) bool {
	if s.st.Status != record.StatusWorking || !takesBusyInputs(s.def) {
		return false
	}
	if s.r.interrupting(s.st.InSeq) {
		return true
	}
	if !s.r.steerHint.Load() {
		return false
	}
	in, err := s.r.nextInput(ctx, s.st.InSeq)
	return err == nil && in != nil && onBusyOf(in.header) == policies.OnBusyInterrupt
}

// endInterrupted ends the session's run for the input that interrupts it
// (id names its event): the step it aborted and the calls left open are
// settled, and the session rests, so the input starts its run next.
func (s *session) endInterrupted(ctx context.Context, id string) error {
	next := s.st.Clone()
	if id == "" {
		if in, err := s.r.nextInput(ctx, s.st.InSeq); err == nil && in != nil {
			if ev, err := events.FromMsg(&nats.Msg{Subject: in.subject, Header: in.header, Data: in.data}); err == nil {
				id = ev.ID()
			}
		}
	}
	e := s.entry(&next, record.KindSystem)
	e.Text = fmt.Sprintf("%s: event %s (on_busy: interrupt) ended this run", interruptedRunText, id)
	entries := append([]record.Entry{e}, s.settleOpen(&next, interruptedRunText)...)
	next.SetStatus(record.StatusIdle, interruptedRunText+" ("+id+")", time.Now().UTC())
	s.w.m.busy.WithLabelValues(policies.OnBusyInterrupt).Inc()
	s.log.Info("run interrupted by a newer event", "event", id)
	return s.commit(ctx, entries, next)
}

// steerWaiting reports, when a steer may have come, whether the input
// after inSeq is one waiting to join the run (before the next model call,
// which must then not ride on a settlement).
func (s *session) steerWaiting(ctx context.Context, inSeq uint64) bool {
	if !takesBusyInputs(s.def) || !s.r.steerHint.Swap(false) {
		return false
	}
	in, err := s.r.nextInput(ctx, inSeq)
	if err != nil || in == nil || onBusyOf(in.header) != policies.OnBusySteer {
		return false
	}
	s.r.steerHint.Store(true) // for steerInput
	return true
}

// steerInput joins the session's next input to the running run when its
// trigger says steer: its entry goes into the transcript, where the next
// model call sees it, and the run goes on. joined is false when the next
// input is not one.
func (s *session) steerInput(ctx context.Context) (joined bool, err error) {
	if !takesBusyInputs(s.def) {
		return false, nil
	}
	s.r.steerHint.Store(false)
	in, err := s.r.nextInput(ctx, s.st.InSeq)
	if err != nil || in == nil || onBusyOf(in.header) != policies.OnBusySteer {
		return false, err
	}
	ev, err := events.FromMsg(&nats.Msg{Subject: in.subject, Header: in.header, Data: in.data})
	if err != nil {
		// Not an event: input() dead-letters it once the run rests.
		return false, nil
	}
	next := s.st.Clone()
	next.InSeq = in.seq
	e := s.eventEntry(&next, in, ev)
	e.Text = s.eventText(ctx, ev, in.seq, e.Event.Count)
	s.w.m.busy.WithLabelValues(policies.OnBusySteer).Inc()
	s.log.Info("event joins the running run (on_busy: steer)", "seq", in.seq, "id", ev.ID())
	if err := s.commit(ctx, []record.Entry{e}, next); err != nil {
		return true, err
	}
	return true, nil
}
