package worker

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/schedule"
)

// tickSource is the jl_dedupe source of ticks consumed: a slot runs once,
// however often a backfill or the server offers it within the store's TTL.
const tickSource = schedule.DedupeSource

// tickSeen reports whether the tick with id was consumed before.
func (w *Worker) tickSeen(ctx context.Context, id string) (bool, error) {
	_, seen, err := w.ticks.Seen(ctx, tickSource, id)
	if err != nil {
		return false, fmt.Errorf("worker: look up tick %s: %w", id, err)
	}
	return seen, nil
}

// rememberTick records the tick with id consumed, once the state that
// records it is durable. A failure is logged: the state's LastTickID
// still drops a repeat of the last tick.
func (w *Worker) rememberTick(ctx context.Context, id string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := w.ticks.Record(rctx, tickSource, id, nil); err != nil {
		w.log.Warn("remember tick", "tick", id, "err", err)
	}
}

// jitter defers a tick the server fired by its schedule's jitter: an @at
// schedule message on the session's timer subject fires the same tick
// (marked jittered) at its slot plus the delay, and this delivery is
// consumed. Nothing is held while it waits. deferred is false when the
// schedule has no jitter or the delay has passed already.
func (s *session) jitter(ctx context.Context, in *input, t schedule.Tick) (deferred bool, err error) {
	j := t.Spec.Jitter.D()
	if j <= 0 {
		return false, nil
	}
	base := t.Slot
	if base.IsZero() {
		base = in.time
	}
	at := base.Add(schedule.JitterDelay(t.ID, j)).UTC().Truncate(time.Second)
	if !at.After(time.Now()) {
		return false, nil
	}
	subject, err := s.w.names.Timer(s.r.ref, t.ID)
	if err != nil {
		return false, fmt.Errorf("worker: jitter tick %s: %w", t.ID, err)
	}
	h := nats.Header{}
	for k, v := range in.header {
		if !strings.HasPrefix(strings.ToLower(k), "nats-") {
			h[k] = v
		}
	}
	schedule.Route(h, t.Scheduler, t.NextHeader)
	h.Set(schedule.HeaderJittered, "1")
	h.Set(schedule.HeaderAt, "@at "+at.Format(time.RFC3339))
	h.Set(schedule.HeaderTarget, s.w.names.In(s.r.ref))
	h.Set(nats.MsgIdHdr, t.ID+"-jitter")
	if err := s.w.inRoom(ctx, s.r.ref, writerJitter, true, len(in.data)); err != nil {
		return false, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.w.js.PublishMsg(pctx, &nats.Msg{Subject: subject, Header: h, Data: in.data}, jetstream.WithExpectStream(s.w.names.StreamIn())); err != nil {
		return false, fmt.Errorf("worker: jitter tick %s on %s: %w", t.ID, subject, err)
	}
	s.log.Info("tick delayed by its schedule's jitter", "schedule", t.Spec.Schedule, "tick", t.ID, "until", at)
	return true, nil
}
