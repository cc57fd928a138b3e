package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
)

// errQueued: the session waits for a concurrency slot; its state says so
// and its event waits in JL_IN, to be delivered again.
var errQueued = errors.New("session queued for a concurrency slot")

// A run of an agent with a concurrency limit holds a slot (jl_slots) from
// its first step until it rests or waits for a human: the event that
// starts it takes one (input), and a run that continues in a worker that
// does not hold its slot (after a resume, or a takeover) takes it again
// before its next step (withSlot). Without a free slot the session is
// queued: its state says what it waits for, the event stays unconsumed in
// JL_IN and comes back every queueRetry, and sessions get slots in the
// order of their events. The runner holds the slot, renews it with the
// lease, and gives it back when the run rests or waits (commit), or when
// it lets the session go.

// heldSlot is the slot this runner holds for the session's run, if any.
func (r *runner) heldSlot() *record.Slot {
	r.slotMu.Lock()
	defer r.slotMu.Unlock()
	return r.slot
}

func (r *runner) setSlot(sl *record.Slot) {
	r.slotMu.Lock()
	r.slot = sl
	r.slotMu.Unlock()
}

// giveBackSlot releases the slot this runner holds, if any.
func (r *runner) giveBackSlot(ctx context.Context) {
	sl := r.heldSlot()
	if sl == nil {
		return
	}
	r.setSlot(nil)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := r.w.slots.release(rctx, r.ref, *sl); err != nil {
		// The slot lapses with its TTL.
		r.log.Warn("release concurrency slot", "key", sl.Key, "err", err)
	}
}

// leaveQueue gives up the session's place in the queue of slot.
func (s *session) leaveQueue(ctx context.Context, slot record.Slot) {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.w.slots.leave(lctx, s.r.ref, slot); err != nil {
		// The place lapses with its TTL.
		s.log.Warn("leave the concurrency queue", "key", slot.Key, "err", err)
	}
}

// renewSlot renews the held slot; a slot that lapsed and went to another
// run is forgotten, so the run takes one again before its next step.
func (r *runner) renewSlot(ctx context.Context) {
	sl := r.heldSlot()
	if sl == nil {
		return
	}
	held, err := r.w.slots.renew(ctx, r.ref, *sl)
	switch {
	case err != nil:
		r.log.Warn("renew concurrency slot; retrying", "key", sl.Key, "err", err)
	case !held:
		r.log.Warn("concurrency slot lapsed; the run takes one again before its next step", "key", sl.Key)
		r.setSlot(nil)
	}
}

// takeSlot asks for slot for the session's run, whose place in line is
// the event seq. A slot this runner holds already is kept.
func (s *session) takeSlot(ctx context.Context, slot record.Slot, seq uint64) (slotGrant, error) {
	if held := s.r.heldSlot(); held != nil {
		if *held == slot {
			return slotGrant{granted: true}, nil
		}
		s.r.giveBackSlot(ctx)
	}
	g, err := s.w.slots.acquire(ctx, s.r.ref, slot, seq)
	if err != nil {
		return g, err
	}
	if g.granted {
		s.r.setSlot(&slot)
		s.w.m.slots.WithLabelValues("granted").Inc()
	}
	return g, nil
}

// runSlot is the slot a run of def started by ev takes, nil when def has
// no concurrency limit. An event the key does not evaluate on (a tick,
// say, for a key over a webhook's data) counts against the agent's pool.
func (s *session) runSlot(ctx context.Context, def *policies.Definition, ev event.Event) *record.Slot {
	cc := def.Concurrency
	if cc == nil {
		return nil
	}
	slot := &record.Slot{Limit: cc.Limit}
	if cc.Key == "" {
		return slot
	}
	c, err := s.w.compiled(s.r.ref.Agent, *def)
	if err == nil && c.ConcurrencyKey != nil {
		var vars policies.Vars
		if vars, err = policies.EventVars(ev); err == nil {
			slot.Key, err = c.ConcurrencyKey.EvalString(ctx, vars)
		}
	}
	if err != nil {
		s.log.Warn("concurrency key does not evaluate on this event; its run counts against the agent's pool", "err", err)
		slot.Key = ""
	}
	return slot
}

// queue writes the session as queued for slot: the event seq waits to
// start a run (run false; the state's input cursor stays before it), or
// the run it started waits to continue (run true). It returns errQueued.
func (s *session) queue(ctx context.Context, slot record.Slot, seq uint64, run bool, ahead int) error {
	next := s.st.Clone()
	// The next step's intent, if it rode on the last settlement, is
	// decided again once the run has its slot.
	s.withdraw(&next)
	now := time.Now().UTC()
	what := fmt.Sprintf("a concurrency slot of agent %s (limit %d", s.r.ref.Agent, slot.Limit)
	if slot.Key != "" {
		what += fmt.Sprintf(" per key; key %q", slot.Key)
	}
	what += fmt.Sprintf(", %d waiting ahead)", ahead)
	q := &record.Queued{Slot: slot, Seq: seq, Run: run, Was: s.st.Status}
	if s.st.Status == record.StatusQueued && s.st.Queued != nil {
		q.Was = s.st.Queued.Was
	}
	if s.st.Status == record.StatusQueued && s.st.Queued != nil && *s.st.Queued == *q {
		// Already written; only the count ahead changed.
		s.w.m.slots.WithLabelValues("queued").Inc()
		return errQueued
	}
	next.SetStatus(record.StatusQueued, "", now)
	next.WaitingFor, next.Queued = what, q
	if err := s.commit(ctx, nil, next); err != nil {
		return err
	}
	s.w.m.slots.WithLabelValues("queued").Inc()
	s.log.Info("session queued for a concurrency slot", "key", slot.Key, "limit", slot.Limit, "ahead", ahead, "seq", seq)
	return errQueued
}

// withSlot runs step once the runner holds the slot of the session's
// working run, taking it again when it does not (a run resumed, or taken
// over from a worker that died): without a free one the run is queued.
func (s *session) withSlot(ctx context.Context, step func(context.Context) error) error {
	slot := s.st.Slot
	if slot == nil {
		return step(ctx)
	}
	if held := s.r.heldSlot(); held != nil && *held == *slot {
		return step(ctx)
	}
	g, err := s.takeSlot(ctx, *slot, s.st.InSeq)
	if err != nil {
		return err
	}
	if !g.granted {
		return s.queue(ctx, *slot, s.st.InSeq, true, g.ahead)
	}
	return step(ctx)
}

// continueQueued takes the slot a queued run waits for and makes it
// working again.
func (s *session) continueQueued(ctx context.Context) error {
	q := *s.st.Queued
	g, err := s.takeSlot(ctx, q.Slot, q.Seq)
	if err != nil {
		return err
	}
	if !g.granted {
		return s.queue(ctx, q.Slot, q.Seq, true, g.ahead)
	}
	next := s.st.Clone()
	next.SetStatus(record.StatusWorking, "", time.Now().UTC())
	s.log.Info("run continues with a concurrency slot", "key", q.Key)
	return s.commit(ctx, nil, next)
}

// queuedSlot asks, for a session in st that is queued, before its lease
// is taken, whether its slot is free now: while it is not, the event's
// every return costs one read (and write) of the slot table, not a lease
// and a state write. The slot itself is taken under the lease (input,
// continueQueued); a slot is only ever held by the worker that holds the
// session's lease.
func (r *runner) queuedSlot(ctx context.Context, st record.State) error {
	if st.Status != record.StatusQueued || st.Queued == nil {
		return nil
	}
	q := *st.Queued
	g, err := r.w.slots.wait(ctx, r.ref, q.Slot, q.Seq)
	if err != nil {
		return err
	}
	if !g.granted {
		r.w.m.slots.WithLabelValues("queued").Inc()
		return errQueued
	}
	return nil
}
