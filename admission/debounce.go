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
	// maxRepair bounds, past the sender's cancellation, the check that a
	// slow replacement survived the fire of the burst it replaced and
	// the debounce again of one that did not.
	maxRepair = 30 * time.Second
)

// Headers of NATS message schedules (nats-server 2.14+, server/stream.go).
const (
	hdrRollup         = "Nats-Rollup"
	rollupSubject     = "sub"
	hdrSchedule       = "Nats-Schedule"
	hdrScheduleTarget = "Nats-Schedule-Target"
	// hdrScheduler names, on a fired message, the schedule subject it
	// was fired from (and purged).
	hdrScheduler = "Nats-Scheduler"
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
// event inside the duplicate window count once too. Such a retry of a
// message that the fire of the burst it replaced purged (see below: its
// sender gave up waiting for the acknowledgement, or died, before it
// could debounce it again) is debounced again: each message records the
// sequence it replaced (HeaderReplaces), so the fire that took it tells
// whether it counted it.
//
// A pending burst that is due to fire, or will be within a guard (half the
// window, at most a second), is never replaced: when the server fires an
// @at message it copies it, then stores the copy on the target and purges
// the whole debounce subject, so a message written in between would be
// acknowledged and then purged without firing. Debounce instead waits
// until the fire has removed the pending message and starts a new burst
// with e. The guard also covers a small skew between this process's clock
// and the server's.
//
// A replacement decided before the guard can still be stored after the
// fire's copy when the publish itself is slow (a cluster without quorum
// holds it for seconds while the server's timer goes off). So when the
// publish is acknowledged within half the guard of the replaced burst's
// @at or later, Debounce looks for the first fire of the debounce subject
// stored after its message: one carrying a smaller count is the replaced
// burst's, whose purge took the message with it, and e is debounced again
// (under a message id of its own, since the stream remembers the first).
// A clustered stream checks the expected last sequence when its leader
// proposes a write, not when it applies it, so such a replacement can
// also be proposed after the fire and stored after it, on the subject the
// fire emptied, counting the fired burst's events again: Debounce finds
// that fire between the replaced message and its own, and replaces its
// message with e alone.
// That check, and the debounce again, outlive ctx's cancellation (a
// sender that gave up retries, and its retry is a duplicate of the
// purged message): they are bounded by maxRepair instead.
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
	msgID := dedupe.MsgID(e, subject)
	repairs := 0
	var alone uint64 // our message that counts a burst fired before it was stored
	for attempt := range maxDebounceAttempts {
		var last uint64
		var replacedAt time.Time // @at of the pending burst replaced, if any
		count := 1
		now := a.now()
		first := now
		raw, err := a.in.GetLastMsgForSubject(ctx, subject)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return 0, fmt.Errorf("%w: read pending debounce on %s: %w", ErrState, subject, err)
		case raw.Sequence == alone:
			// Replaced by e alone, under a message id of its own.
			last = raw.Sequence
		default:
			at, ok := scheduledAt(raw.Header)
			if ok && !at.After(a.now().Add(guard)) {
				if err := a.awaitFired(ctx, subject, raw.Sequence, at); err != nil {
					return 0, err
				}
				// The burst fired: read again and start a new one.
				continue
			}
			last, replacedAt = raw.Sequence, at
			if n := burstCount(raw.Subject, raw.Header, raw.Data); n > 0 {
				count = n + 1
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
		m.Header.Set(HeaderReplaces, strconv.FormatUint(last, 10))
		m.Header.Set(hdrScheduleTarget, target)
		m.Header.Set(hdrRollup, rollupSubject)
		m.Header.Set(nats.MsgIdHdr, msgID)
		ack, err := a.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(last))
		if err != nil {
			if !streams.IsConflict(err) {
				return 0, fmt.Errorf("admission: debounce publish on %s: %w", subject, err)
			}
			if err := backoff(ctx, attempt); err != nil {
				return 0, err
			}
			continue
		}
		if ack.Duplicate {
			// A retry of an event stored before: in the burst, unless the
			// fire of the burst it replaced purged it (its sender gave up
			// waiting for the acknowledgement, or died, before it could
			// debounce it again).
			lost, err := a.droppedUnfired(ctx, subject, target, ack.Sequence, e.ID())
			if err != nil {
				return 0, err
			}
			if !lost {
				return count - 1, nil
			}
			repairs++
			a.log.Warn("retried debounced event was purged by the fire of the burst it replaced; debouncing it again",
				"subject", subject, "seq", ack.Sequence, "id", e.ID())
			msgID = fmt.Sprintf("%s.%d", dedupe.MsgID(e, subject), repairs)
			continue
		}
		if last == 0 || last == alone || a.now().Add(guard/2).Before(replacedAt) {
			// Stored well before the replaced burst was due: the server
			// fires this message, or one that counts it, not that burst.
			return count, nil
		}
		if repairs == 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), maxRepair)
			defer cancel()
		}
		// A clustered stream checks the expected last sequence when the
		// leader proposes a write, not when it applies it: a write
		// proposed after the fire of the burst it replaced, but before
		// that fire was applied, is stored on the subject the fire emptied
		// and counts the fired burst's events again. It is replaced by e
		// alone.
		fired, err := a.firedBetween(ctx, subject, target, last, ack.Sequence)
		if err != nil {
			return 0, err
		}
		if fired {
			alone = ack.Sequence
			a.log.Warn("debounced event stored after the fire of the burst it replaced counts that burst again; debouncing it alone",
				"subject", subject, "seq", ack.Sequence, "id", e.ID(), "count", count)
			msgID = fmt.Sprintf("%s.alone", dedupe.MsgID(e, subject))
			continue
		}
		lost, err := a.purgedByFire(ctx, subject, target, ack.Sequence, count, replacedAt)
		if err != nil {
			return 0, err
		}
		if !lost {
			return count, nil
		}
		repairs++
		a.log.Warn("debounced event purged by the fire of the burst it replaced; debouncing it again",
			"subject", subject, "seq", ack.Sequence, "id", e.ID(), "count", count)
		msgID = fmt.Sprintf("%s.%d", dedupe.MsgID(e, subject), repairs)
	}
	return 0, fmt.Errorf("%w: debounce on %s: too much contention", ErrState, subject)
}

// HeaderReplaces is, on a pending debounce message (and the burst it
// fires), the sequence of the pending message it replaced; 0 for a
// burst's first.
const HeaderReplaces = "Jl-Burst-Replaces"

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

// burstCount is the count (ExtCount) of a debounce message or of a fired
// burst; 0 if it has none.
func burstCount(subject string, h nats.Header, data []byte) int {
	ev, err := events.FromMsg(&nats.Msg{Subject: subject, Header: h, Data: data})
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(fmt.Sprint(ev.Extensions()[ExtCount]))
	if err != nil {
		return 0
	}
	return n
}

// purgedByFire reports whether the debounce message seq on subject, whose
// burst counts count events and which replaced a burst due at
// replacedAt, was purged unfired. The first fire of subject stored on
// target after seq is the one that purged it: it carries seq's burst
// (count or more) if seq replaced the pending burst in time, or the
// replaced burst (a smaller count) if the server had copied that one
// before seq was stored. If no fire of subject comes within maxFireWait
// of replacedAt while seq (or a message replacing it) is still pending,
// seq replaced the burst before its timer went off, and fires at its own
// @at.
func (a *Admitter) purgedByFire(ctx context.Context, subject, target string, seq uint64, count int, replacedAt time.Time) (bool, error) {
	// From the acknowledgement, if that came after the @at: a publish
	// held past it is the case this check is for.
	deadline := later(replacedAt, a.now()).Add(maxFireWait)
	from := seq + 1
	delay := 5 * time.Millisecond
	for {
		m, err := streams.GetMsg(ctx, a.js, a.in, from, target)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return false, fmt.Errorf("%w: read the fires on %s after %s seq %d: %w", ErrState, target, subject, seq, err)
		case m.Header.Get(hdrScheduler) != subject:
			from = m.Sequence + 1
			continue
		default:
			return burstCount(m.Subject, m.Header, m.Data) < count, nil
		}
		if a.now().After(deadline) {
			// Still pending: no fire took it. Gone with no fire in
			// sight: the replica read is behind; read again.
			raw, err := a.in.GetLastMsgForSubject(ctx, subject)
			switch {
			case errors.Is(err, jetstream.ErrMsgNotFound):
			case err != nil:
				return false, fmt.Errorf("%w: read pending debounce on %s: %w", ErrState, subject, err)
			case raw.Sequence >= seq:
				return false, nil
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, fmt.Errorf("admission: debounce on %s: wait for the fire of the burst seq %d replaced: %w", subject, seq, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// droppedUnfired reports whether the debounce message seq on subject,
// carrying event id, was purged by a fire that does not count it. The
// first fire of subject on target after seq counts it if it fired seq
// itself (its latest event is id) or a message that replaced seq, directly
// or not (it replaced seq or a later message); otherwise it is the fire
// of a burst copied before seq was stored. With no fire after seq, seq or
// a message that replaced it is still pending. A fire is looked for up to
// maxFireWait while the subject holds nothing from seq on (the fire that
// purged it not yet readable here).
func (a *Admitter) droppedUnfired(ctx context.Context, subject, target string, seq uint64, id string) (bool, error) {
	deadline := a.now().Add(maxFireWait)
	delay := 5 * time.Millisecond
	for {
		pending := false
		raw, err := a.in.GetLastMsgForSubject(ctx, subject)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return false, fmt.Errorf("%w: read pending debounce on %s: %w", ErrState, subject, err)
		default:
			pending = raw.Sequence >= seq
		}
		for from := seq + 1; ; {
			m, err := streams.GetMsg(ctx, a.js, a.in, from, target)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				return false, fmt.Errorf("%w: read the fires on %s after %s seq %d: %w", ErrState, target, subject, seq, err)
			}
			if m.Header.Get(hdrScheduler) != subject {
				from = m.Sequence + 1
				continue
			}
			replaced, err := strconv.ParseUint(m.Header.Get(HeaderReplaces), 10, 64)
			if err != nil {
				// A burst from before the header: counted, as before.
				return false, nil
			}
			ev, err := events.FromMsg(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
			return !(replaced >= seq || (err == nil && ev.ID() == id)), nil
		}
		if pending || a.now().After(deadline) {
			return false, nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, fmt.Errorf("admission: debounce on %s: wait for the fire that took seq %d: %w", subject, seq, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// firedBetween reports whether a fire of subject is stored on target
// after sequence after and before sequence before.
func (a *Admitter) firedBetween(ctx context.Context, subject, target string, after, before uint64) (bool, error) {
	for from := after + 1; from < before; {
		m, err := streams.GetMsg(ctx, a.js, a.in, from, target)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("%w: read the fires on %s between %s seq %d and %d: %w", ErrState, target, subject, after, before, err)
		case m.Sequence >= before:
			return false, nil
		case m.Header.Get(hdrScheduler) == subject:
			return true, nil
		}
		from = m.Sequence + 1
	}
	return false, nil
}
