package admission

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/streams"
)

// maxDebounceAttempts bounds compare-and-set retries of one pending
// debounce message under contention.
const maxDebounceAttempts = 24

// Bounds of the wait for a pending burst that is due to fire.
const (
	// maxFireGuard is the most time before a pending burst's @at within
	// which Debounce no longer replaces it but waits for it to fire; the
	// guard is half the window, up to this.
	maxFireGuard = time.Second
	// maxFireWait bounds the wait past the burst's @at for the server to
	// fire it and remove it.
	maxFireWait = 5 * time.Second
)

// Headers of NATS message schedules (nats-server 2.14+, server/stream.go).
const (
	hdrRollup         = "Nats-Rollup"
	rollupSubject     = "sub"
	hdrSchedule       = "Nats-Schedule"
	hdrScheduleTarget = "Nats-Schedule-Target"
)

// Debounce adds e to the pending burst of d's session (of its debounce
// key, when the trigger has one): it replaces the burst's delayed message
// on jl.debounce.<agent>.<session>[.<key-hash>] with one that carries e
// (stamped for d, with ExtCount one more than the message it replaces)
// and fires on jl.in.<agent>.<session> d.Window after now, or d.MaxWait
// after the burst's first event if that is sooner. The server fires it
// once, after the burst has been quiet for the window (or grew as old as
// max_wait), with the latest event's data. It returns the burst's count so
// far once JetStream has stored the message.
//
// The replacement is a compare-and-set on the debounce subject's last
// sequence, so concurrent events from several ingest processes each count
// once; the message's Nats-Msg-Id makes a retried delivery of the same
// event inside the duplicate window count once too.
//
// A pending burst that is due to fire, or will be within a guard (half the
// window, at most a second), is never replaced: when the server fires an
// @at message it copies it, then stores the copy on the target and purges
// the whole debounce subject, so a message written in between would be
// acknowledged and then purged without firing. Debounce instead waits
// until the fire has removed the pending message and starts a new burst
// with e. The guard also covers the publish's own latency and a small
// skew between this process's clock and the server's.
func (a *Admitter) Debounce(ctx context.Context, e event.Event, d Decision) (int, error) {
	ref, err := d.Ref()
	if err != nil {
		return 0, fmt.Errorf("admission: debounce %s/%s: %w", d.Agent, d.Session, err)
	}
	subject, target := a.names.Debounce(ref), a.names.In(ref)
	if d.DebounceKey != "" {
		subject = a.names.DebounceKey(ref, d.DebounceKey)
	}
	stamped := Stamp(e, d)
	guard := min(maxFireGuard, d.Window/2)
	for attempt := range maxDebounceAttempts {
		var last uint64
		count := 1
		now := a.now()
		first := now
		raw, err := a.in.GetLastMsgForSubject(ctx, subject)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return 0, fmt.Errorf("%w: read pending debounce on %s: %w", ErrState, subject, err)
		default:
			if at, ok := scheduledAt(raw.Header); ok && !at.After(a.now().Add(guard)) {
				if err := a.awaitFired(ctx, subject, raw.Sequence, at); err != nil {
					return 0, err
				}
				// The burst fired: read again and start a new one.
				continue
			}
			last = raw.Sequence
			if prev, err := events.FromMsg(&nats.Msg{Subject: raw.Subject, Header: raw.Header, Data: raw.Data}); err == nil {
				if n, err := strconv.Atoi(fmt.Sprint(prev.Extensions()[ExtCount])); err == nil && n > 0 {
					count = n + 1
				}
			}
			if t, err := time.Parse(time.RFC3339Nano, raw.Header.Get(HeaderBurstStart)); err == nil && t.Before(now) {
				first = t
			}
		}
		stamped.SetExtension(ExtCount, strconv.Itoa(count))
		m, err := events.ToMsg(subject, stamped)
		if err != nil {
			return 0, fmt.Errorf("admission: debounce %s: %w", subject, err)
		}
		m.Header.Set(hdrSchedule, "@at "+fireAt(now, first, d.Window, d.MaxWait).UTC().Format(time.RFC3339))
		m.Header.Set(HeaderBurstStart, first.UTC().Format(time.RFC3339Nano))
		m.Header.Set(hdrScheduleTarget, target)
		m.Header.Set(hdrRollup, rollupSubject)
		m.Header.Set(nats.MsgIdHdr, dedupe.MsgID(e, subject))
		ack, err := a.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(last))
		if err == nil {
			if ack.Duplicate {
				// A retry of an event already in the burst.
				count--
			}
			return count, nil
		}
		if !streams.IsConflict(err) {
			return 0, fmt.Errorf("admission: debounce publish on %s: %w", subject, err)
		}
		if err := backoff(ctx, attempt); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("%w: debounce on %s: too much contention", ErrState, subject)
}

// HeaderBurstStart is, on a pending debounce message, when the burst's
// first event came: max_wait counts from it.
const HeaderBurstStart = "Jl-Burst-Start"

// fireAt is when a burst whose first event came at first and whose
// latest comes now fires: the quiet window after now, rounded up to the
// whole second @at takes so the window is never shorter than asked, but
// no later than maxWait after first (rounded down, so never later than
// asked either), and never before the next whole second.
func fireAt(now, first time.Time, window, maxWait time.Duration) time.Time {
	ceil := func(t time.Time) time.Time {
		if r := t.Truncate(time.Second); r.Before(t) {
			return r.Add(time.Second)
		}
		return t
	}
	at := ceil(now.Add(window))
	if maxWait > 0 {
		if bound := first.Add(maxWait).Truncate(time.Second); bound.Before(at) {
			at = bound
			if soonest := ceil(now); at.Before(soonest) {
				at = soonest
			}
		}
	}
	return at
}

// scheduledAt reads the fire time of a pending @at schedule message.
func scheduledAt(h nats.Header) (time.Time, bool) {
	v, ok := strings.CutPrefix(h.Get(hdrSchedule), "@at ")
	if !ok {
		return time.Time{}, false
	}
	at, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(v))
	return at, err == nil
}

// awaitFired waits until the pending message seq on subject, due at at,
// is gone (fired and purged) or replaced. It polls with a growing delay,
// as the server signals neither, up to maxFireWait past at.
func (a *Admitter) awaitFired(ctx context.Context, subject string, seq uint64, at time.Time) error {
	deadline := at.Add(maxFireWait)
	delay := 5 * time.Millisecond
	for {
		raw, err := a.in.GetLastMsgForSubject(ctx, subject)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return nil
		case err != nil:
			return fmt.Errorf("%w: read pending debounce on %s: %w", ErrState, subject, err)
		case raw.Sequence != seq:
			return nil
		}
		if a.now().After(deadline) {
			return fmt.Errorf("%w: debounce on %s: the pending burst due at %s has not fired", ErrState, subject, at.Format(time.RFC3339))
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("admission: debounce on %s: wait for the pending burst to fire: %w", subject, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}
