package worker

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/streams"
)

// delivery is one message of the agent's consumer held for a session.
type delivery struct {
	msg jetstream.Msg
	seq uint64 // in JL_IN
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
}

// add holds a delivery; a redelivery replaces the earlier one.
func (r *runner) add(d delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.held {
		if r.held[i].seq == d.seq {
			r.held[i] = d
			return
		}
	}
	r.held = append(r.held, d)
	slices.SortFunc(r.held, func(a, b delivery) int { return cmpU64(a.seq, b.seq) })
}

// ack acknowledges the held deliveries that st records as consumed: every
// input before the last recorded one, and that one too once the run it
// started rests.
func (r *runner) ack(st State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held = slices.DeleteFunc(r.held, func(d delivery) bool {
		if d.seq < st.InSeq || (d.seq == st.InSeq && st.Status.Resting() && st.Pending == nil) {
			if err := d.msg.Ack(); err != nil {
				r.log.Warn("ack", "seq", d.seq, "err", err)
			}
			return true
		}
		return false
	})
}

// pendingAfter returns the held delivery with the lowest sequence above
// seq, if any.
func (r *runner) pendingAfter(seq uint64) (delivery, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.held {
		if d.seq > seq {
			return d, true
		}
	}
	return delivery{}, false
}

// allAtOrBelow reports whether every held delivery is at or below seq.
func (r *runner) allAtOrBelow(seq uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.held {
		if d.seq > seq {
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
		case errors.Is(err, ErrLeased):
			// The owner reads the session's events from the stream; these
			// come back later and are acked once consumed.
			r.log.Debug("session leased elsewhere; leaving its events to the owner")
			r.release(2 * time.Second)
		case ctx.Err() != nil:
			r.release(0)
		case errors.Is(err, ErrFenced), errors.Is(err, ErrLeaseLost):
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
	// A redelivery of inputs already consumed needs no lease.
	if st, _, err := w.store.load(ctx, r.ref); err == nil && st.Status.Resting() && st.Pending == nil && r.allAtOrBelow(st.InSeq) &&
		(st.Tick == nil || st.Tick.Result != "" || st.Status.Waiting()) {
		r.ack(st)
		return nil
	} else if err != nil && !errors.Is(err, ErrNotFound) {
		return err
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
	s, err := r.claim(sctx)
	if err != nil {
		return err
	}
	return s.loop(ctx, sctx)
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
			rctx, rcancel := context.WithTimeout(sctx, every)
			err := w.leases.renew(rctx, ls)
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
	m, err := r.w.in.GetMsg(ctx, seq+1, jetstream.WithGetMsgSubject(r.w.names.In(r.ref)))
	switch {
	case err == nil:
		in = &input{subject: m.Subject, header: m.Header, data: m.Data, seq: m.Sequence, time: m.Time}
	case errors.Is(err, jetstream.ErrMsgNotFound):
	default:
		return nil, err
	}
	// A replica may lag behind a delivery it has not seen yet.
	if d, ok := r.pendingAfter(seq); ok && (in == nil || d.seq < in.seq) {
		meta, _ := d.msg.Metadata()
		var t time.Time
		if meta != nil {
			t = meta.Timestamp
		}
		in = &input{subject: d.msg.Subject(), header: d.msg.Headers(), data: d.msg.Data(), seq: d.seq, time: t}
	}
	return in, nil
}
