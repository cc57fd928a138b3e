package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/dlq"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
)

// delivery is one message of the agent's consumers held for a session.
type delivery struct {
	msg jetstream.Msg
	seq uint64 // in JL_IN, or in JL_CTL when ctl
	ctl bool
}

// input is one event for a session, read from the stream or delivered.
type input struct {
	subject string
	header  nats.Header
	data    []byte
	seq     uint64
	time    time.Time
}

// runner is a session's presence in this worker while it has work; it
// exists only then (idle sessions hold nothing). It holds the deliveries
// for the session until the session's state records them consumed.
type runner struct {
	w   *Worker
	ref streams.SessionRef
	log *slog.Logger

	mu   sync.Mutex
	held []delivery

	// ctlHint tells the loop to read JL_CTL at its next step boundary.
	ctlHint atomic.Bool
	// applied is the state's CtlSeq, for the control subscription.
	applied atomic.Uint64

	ctlMu sync.Mutex
	// abort stops the effect in flight, nil between effects.
	abort context.CancelCauseFunc
	// cancelSeq is a cancel confirmed in JL_CTL; it aborts every effect
	// until the state's CtlSeq reaches it.
	cancelSeq uint64
	// superseded: a newer tick ends the current cancel_previous tick run.
	superseded bool
	// runTick is the schedule of the working cancel_previous tick run, and
	// runInSeq the input it started from.
	runTick  string
	runInSeq uint64

	// runSeq is the input that started the working run, and interruptSeq
	// an input after it that interrupts it (both under ctlMu).
	runSeq       uint64
	interruptSeq uint64
	// busyWatch: the working run's definition takes inputs that act on
	// it (on_busy interrupt or steer); steerHint: one may have come.
	busyWatch atomic.Bool
	steerHint atomic.Bool

	slotMu sync.Mutex
	// slot is the concurrency slot this runner holds for the session's
	// run, nil when it holds none.
	slot *record.Slot
}

// add holds a delivery; a redelivery replaces the earlier one. A control
// message makes the loop read JL_CTL at its next boundary (a cancel aborts
// the step in flight); a newer tick of the running cancel_previous
// schedule ends the run.
func (r *runner) add(d delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d.ctl {
		r.ctlHint.Store(true)
		if d.seq > r.applied.Load() {
			if m, err := control.ParseJS(d.msg); err == nil && m.Verb == control.Cancel {
				r.requestCancel(d.seq)
			}
		}
	} else {
		r.checkSupersede(d)
		r.noteBusyDelivery(d)
	}
	for i := range r.held {
		if r.held[i].seq == d.seq && r.held[i].ctl == d.ctl {
			r.held[i] = d
			return
		}
	}
	r.held = append(r.held, d)
	slices.SortFunc(r.held, func(a, b delivery) int {
		if a.ctl != b.ctl {
			if a.ctl {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.seq, b.seq)
	})
}

// consumedBy reports whether st records d as consumed: an input (a
// control message) before the last one recorded (applied), or that one
// once the session rests. The last one is kept in progress while a run
// goes on, so that a crash of the owner leads to its redelivery, and the
// redelivery to recovery: a run a resume or an approve started has no
// unacknowledged input but that control message.
func consumedBy(d delivery, st record.State) bool {
	last := st.InSeq
	if d.ctl {
		last = st.CtlSeq
	}
	return d.seq < last || (d.seq == last && st.Status.Resting() && st.Pending == nil && !owesAnswer(st) && !owesCancels(st))
}

// ack acknowledges the held deliveries that st records as consumed.
func (r *runner) ack(st record.State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held = slices.DeleteFunc(r.held, func(d delivery) bool {
		if consumedBy(d, st) {
			if err := d.msg.Ack(); err != nil {
				r.log.Warn("ack", "seq", d.seq, "control", d.ctl, "err", err)
			}
			return true
		}
		return false
	})
}

// heldAfter returns the held delivery of the kind with the lowest
// sequence above seq, if any.
func (r *runner) heldAfter(seq uint64, ctl bool) (delivery, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.held {
		if d.ctl == ctl && d.seq > seq {
			return d, true
		}
	}
	return delivery{}, false
}

// allConsumed reports whether st records every held delivery consumed,
// the last input included.
func (r *runner) allConsumed(st record.State) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.held {
		if d.ctl && d.seq > st.CtlSeq || !d.ctl && d.seq > st.InSeq {
			return false
		}
	}
	return true
}

// progress tells the server the held deliveries are being worked on.
func (r *runner) progress() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.held {
		_ = d.msg.InProgress()
	}
}

// release gives the held deliveries back for redelivery after delay.
func (r *runner) release(delay time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.held {
		if delay > 0 {
			_ = d.msg.NakWithDelay(delay)
		} else {
			_ = d.msg.Nak()
		}
	}
	r.held = nil
}

// run works the session until it rests with nothing more to consume, then
// removes the runner from the worker.
func (r *runner) run(ctx context.Context) {
	defer r.w.m.active.Dec()
	for {
		err := r.session(ctx)
		// The session rests (or runs elsewhere): it holds no MCP
		// connection. Closed while the runner is still the session's in
		// this worker, so no new run's connection is closed with it.
		r.w.closeMCP(r.ref.Agent, r.ref.Session)
		r.w.mu.Lock()
		r.mu.Lock()
		more := len(r.held) > 0
		r.mu.Unlock()
		if err == nil && more && ctx.Err() == nil {
			// Deliveries arrived while the session was being put to rest.
			r.w.mu.Unlock()
			continue
		}
		delete(r.w.runners, r.ref.Key())
		r.w.mu.Unlock()
		switch {
		case err == nil:
			r.release(0) // nothing left: only deliveries of a stopping worker
		case errors.Is(err, errQueued):
			// The event waits in JL_IN; its session asks again when it
			// comes back.
			r.release(queueRetry + rand.N(queueRetry/4))
		case errors.Is(err, ErrLeased):
			// The owner reads the session's events from the stream; these
			// come back later and are acked once consumed.
			r.log.Debug("session leased elsewhere; leaving its events to the owner")
			r.release(2 * time.Second)
		case ctx.Err() != nil:
			r.release(0)
		case errors.Is(err, record.ErrFenced), errors.Is(err, ErrLeaseLost):
			r.w.m.fenced.Inc()
			r.log.Warn("session dropped: fenced", "err", err)
			r.release(time.Second)
		default:
			r.log.Error("session run failed; its events will be redelivered", "err", err)
			r.release(5 * time.Second)
		}
		return
	}
}

// session runs the session under its lease until it rests with nothing
// more to consume.
func (r *runner) session(ctx context.Context) error {
	w := r.w
	// A slot is held only while the runner runs the session.
	defer r.giveBackSlot(ctx)
	// A redelivery of messages already consumed needs no lease; those the
	// state records consumed are acknowledged even while another worker
	// runs the session (the last input and the last control message stay
	// unacknowledged until the run rests: they bring recovery if its owner
	// dies).
	if st, _, err := w.store.Load(ctx, r.ref); err == nil {
		r.ack(st)
		if st.Status.Resting() && st.Pending == nil && r.allConsumed(st) && !owesAnswer(st) && !owesCancels(st) &&
			(st.Tick == nil || st.Tick.Result != "" || st.Status.Waiting()) {
			return nil
		}
		if err := r.queuedSlot(ctx, st); err != nil {
			return err
		}
	} else if !errors.Is(err, ErrNotFound) {
		return err
	} else if first, err := r.firstInput(ctx); err != nil {
		return err
	} else if first == nil {
		// No state and no event to start one: a control message never
		// creates a session.
		return r.orphanControls(ctx)
	}
	ls, err := w.leases.acquire(ctx, r.ref)
	if err != nil {
		return err
	}
	// Steps run under sctx: it outlives ctx by the shutdown grace, and ends
	// at once when the lease is lost.
	sctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	var keeper sync.WaitGroup
	keeper.Go(func() { r.keep(ctx, sctx, cancel, ls) })
	defer func() {
		cancel(nil)
		keeper.Wait()
		if errors.Is(context.Cause(sctx), ErrLeaseLost) {
			return
		}
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer rcancel()
		if err := w.leases.release(rctx, ls); err != nil {
			r.log.Warn("release lease", "err", err)
		}
	}()
	// The owner hears control messages at once; the loop reads them from
	// JL_CTL (from the state's CtlSeq on, so none published before the
	// subscription is missed).
	sub, err := w.nc.Subscribe(w.names.Ctl(r.ref), func(m *nats.Msg) { r.onControl(sctx, m) })
	if err != nil {
		return fmt.Errorf("worker: subscribe to %s: %w", w.names.Ctl(r.ref), err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// It hears the session's new inputs too: one may act on the run.
	isub, err := w.nc.Subscribe(w.names.In(r.ref), func(m *nats.Msg) { r.onInput(sctx, m) })
	if err != nil {
		return fmt.Errorf("worker: subscribe to %s: %w", w.names.In(r.ref), err)
	}
	defer func() { _ = isub.Unsubscribe() }()
	r.ctlHint.Store(true)
	s, err := r.claim(sctx)
	if errors.Is(err, errNoSession) {
		return r.orphanControls(ctx)
	}
	if err != nil {
		return err
	}
	defer s.endRun("", "")
	if err := s.loop(ctx, sctx); err != nil {
		return err
	}
	// Resting, under the lease: what it consumed past its horizon goes.
	if _, err := w.trimConsumed(sctx, r.ref, s.st.InSeq); err != nil {
		r.log.Warn("consumed events past the horizon stay until the session rests again", "err", err)
	}
	return nil
}

// keep renews the lease and keeps the held deliveries in progress until
// sctx ends; it cancels sctx when the lease is lost, and after the grace
// period once ctx ends.
func (r *runner) keep(ctx, sctx context.Context, cancel context.CancelCauseFunc, ls *lease) {
	w := r.w
	every := min(w.cfg.LeaseTTL/3, w.cfg.AckWait/3)
	t := time.NewTicker(every)
	defer t.Stop()
	var grace <-chan time.Time
	done := ctx.Done()
	for {
		select {
		case <-sctx.Done():
			return
		case <-done:
			done = nil
			g := time.NewTimer(w.cfg.ShutdownGrace)
			defer g.Stop()
			grace = g.C
		case <-grace:
			cancel(context.Canceled)
			return
		case <-t.C:
			r.progress()
			// A safety net for control messages the subscription missed
			// (a replica that lagged when the loop last read JL_CTL).
			r.ctlHint.Store(true)
			r.pollSupersede(sctx)
			r.lookForBusyInputs(sctx)
			rctx, rcancel := context.WithTimeout(sctx, every)
			err := w.leases.renew(rctx, ls)
			if err == nil {
				r.renewSlot(rctx)
			}
			rcancel()
			switch {
			case err == nil:
			case errors.Is(err, ErrLeaseLost) || time.Now().After(ls.expires):
				r.log.Warn("lease lost; cancelling the session's steps", "err", err)
				cancel(ErrLeaseLost)
				return
			default:
				r.log.Warn("renew lease; retrying", "err", err, "expires", ls.expires)
			}
		}
	}
}

// nextInput returns the session's first event after seq: read from the
// stream, so events are consumed in order whichever worker they were
// delivered to, or taken from a held delivery.
func (r *runner) nextInput(ctx context.Context, seq uint64) (*input, error) {
	var in *input
	m, err := streams.GetMsg(ctx, r.w.js, r.w.in, seq+1, r.w.names.In(r.ref))
	switch {
	case err == nil:
		in = &input{subject: m.Subject, header: m.Header, data: m.Data, seq: m.Sequence, time: m.Time}
	case errors.Is(err, jetstream.ErrMsgNotFound):
	default:
		return nil, err
	}
	// A replica may lag behind a delivery it has not seen yet.
	if d, ok := r.heldAfter(seq, false); ok && (in == nil || d.seq < in.seq) {
		meta, _ := d.msg.Metadata()
		var t time.Time
		if meta != nil {
			t = meta.Timestamp
		}
		in = &input{subject: d.msg.Subject(), header: d.msg.Headers(), data: d.msg.Data(), seq: d.seq, time: t}
	}
	return in, nil
}

// errNoSession: the session has no state and no event to start one.
var errNoSession = errors.New("no session and no event to start one")

// firstInput returns the session's first event in JL_IN (or held), nil
// when it has none: the event that starts a session without state.
func (r *runner) firstInput(ctx context.Context) (*input, error) {
	return r.nextInput(ctx, 0)
}

// orphanControls dead-letters the held control messages of a session that
// does not exist and that no event waits to start, and acknowledges them:
// applying one would create the session (a cancel of a session that did
// not exist yet would make a cancelled one that refuses every later
// event).
func (r *runner) orphanControls(ctx context.Context) error {
	r.mu.Lock()
	held := slices.Clone(r.held)
	r.mu.Unlock()
	for _, d := range held {
		if !d.ctl {
			continue
		}
		verb := "invalid"
		if m, err := control.ParseJS(d.msg); err == nil {
			verb = string(m.Verb)
		}
		detail := fmt.Sprintf("%s for %s: no such session, and no event waits to start it; a control message never creates a session", verb, r.ref)
		if err := r.w.deadLetter(ctx, d.msg.Subject(), d.msg.Headers(), d.msg.Data(), d.seq, dlq.NoSession, detail); err != nil {
			return err
		}
		r.w.m.controls.WithLabelValues(verb, "no_session").Inc()
		if err := d.msg.Ack(); err != nil {
			r.log.Warn("ack", "seq", d.seq, "control", true, "err", err)
		}
		r.mu.Lock()
		r.held = slices.DeleteFunc(r.held, func(h delivery) bool { return h.ctl && h.seq == d.seq })
		r.mu.Unlock()
	}
	return nil
}

// maxOrphanScan bounds the control messages a new session skips as sent
// before it existed.
const maxOrphanScan = 10_000

// skipOrphans dead-letters the control messages JL_CTL holds for a
// session that is being created and that were published before the event
// that starts it (at start): they were sent to a session that did not
// exist, and a control message never creates one, so the new session does
// not apply them either. It returns the sequence the new state's CtlSeq
// starts from.
func (r *runner) skipOrphans(ctx context.Context, start time.Time) (uint64, error) {
	var seq uint64
	subject := r.w.names.Ctl(r.ref)
	for range maxOrphanScan {
		m, err := streams.GetMsg(ctx, r.w.js, r.w.ctl, seq+1, subject)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return seq, nil
		case err != nil:
			return 0, fmt.Errorf("worker: read control messages of new session %s: %w", r.ref, err)
		}
		if !m.Time.Before(start) {
			return seq, nil
		}
		verb := "invalid"
		if cm, err := control.Parse(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}); err == nil {
			verb = string(cm.Verb)
		}
		detail := fmt.Sprintf("%s for %s: sent at %s, before the session's first event (%s); a control message never creates a session",
			verb, r.ref, m.Time.UTC().Format(time.RFC3339Nano), start.UTC().Format(time.RFC3339Nano))
		if err := r.w.deadLetter(ctx, m.Subject, m.Header, m.Data, m.Sequence, dlq.NoSession, detail); err != nil {
			return 0, err
		}
		r.w.m.controls.WithLabelValues(verb, "no_session").Inc()
		seq = m.Sequence
	}
	r.log.Warn("more control messages before the session's first event than are skipped; the rest apply", "skipped", maxOrphanScan)
	return seq, nil
}
