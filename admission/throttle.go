package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
)

// MaxThrottleWait bounds how long a throttled event may wait for its turn:
// an event whose turn is further away is not delayed but refused as
// rate-limited, so a backlog cannot grow without bound.
const MaxThrottleWait = 24 * time.Hour

// throttleState is the stored queue of one throttle key: the earliest
// time the next event may go, and the events that took a turn lately
// with theirs, so a retry of an event gets the turn it got.
type throttleState struct {
	Next   time.Time `json:"next"`
	Takers []turn    `json:"takers,omitempty"`
}

type turn struct {
	ID string    `json:"i"`
	At time.Time `json:"a"`
}

// turn reserves the next turn of a throttle for event and returns when it
// is: now for an event that may go at once, later for one that waits. An
// event that took a turn lately gets the same one again. Turns are spaced
// 60/per_minute seconds apart; the state lives in jl_dedupe and is
// updated by compare-and-set, so every ingest process shares the queue.
func (l *limiter) turn(ctx context.Context, agent, trigger, key, event string, th policies.Throttle) (time.Time, error) {
	k, err := l.names.ThrottleKey(agent, trigger, key)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: throttle key of %s/%s: %w", ErrState, agent, trigger, err)
	}
	gap := time.Duration(float64(time.Minute) / th.PerMinute)
	for attempt := range maxRateAttempts {
		now := l.now()
		var st throttleState
		var rev uint64
		e, err := l.kv.Get(ctx, k)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		case err != nil:
			return time.Time{}, fmt.Errorf("%w: read throttle %s: %w", ErrState, k, err)
		default:
			rev = e.Revision()
			if json.Unmarshal(e.Value(), &st) == nil {
				for _, t := range st.Takers {
					if t.ID == event {
						return t.At, nil
					}
				}
			}
		}
		at := now
		if st.Next.After(now) {
			at = st.Next
		}
		if at.Sub(now) > MaxThrottleWait {
			// Refused, not queued: nothing to write.
			return at, nil
		}
		st.Next = at.Add(gap)
		cutoff := now.Add(-takerHorizon)
		kept := st.Takers[:0]
		for _, t := range st.Takers {
			if t.At.After(cutoff) {
				kept = append(kept, t)
			}
		}
		st.Takers = append(kept, turn{ID: event, At: at})
		if n := len(st.Takers) - maxTakers; n > 0 {
			st.Takers = st.Takers[n:]
		}
		val, _ := json.Marshal(st)
		ttl := st.Next.Sub(now) + takerHorizon
		if rev == 0 {
			_, err = l.kv.Create(ctx, k, val, jetstream.KeyTTL(ttl))
		} else {
			_, err = l.js.Publish(ctx, streams.KVSubject(l.names.BucketDedupe(), k), val,
				jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(ttl))
		}
		if err == nil {
			return at, nil
		}
		if !streams.IsConflict(err) && !errors.Is(err, jetstream.ErrKeyExists) {
			return time.Time{}, fmt.Errorf("%w: write throttle %s: %w", ErrState, k, err)
		}
		if err := backoff(ctx, attempt); err != nil {
			return time.Time{}, err
		}
	}
	return time.Time{}, fmt.Errorf("%w: throttle of %s/%s key %q: too much contention", ErrState, agent, trigger, key)
}

// Delay stores e, stamped for the throttled decision d, as a delayed
// message that the server delivers to d's session at d.At: one schedule
// message per event on jl.throttle.<agent>.<session>.<event-hash>. It
// returns once JetStream has stored it; a retry of the same event inside
// the stream's duplicate window stores nothing more.
func (a *Admitter) Delay(ctx context.Context, e event.Event, d Decision) error {
	ref, err := d.Ref()
	if err != nil {
		return fmt.Errorf("admission: throttle %s/%s: %w", d.Agent, d.Session, err)
	}
	subject := a.names.Throttle(ref, events.MsgID(e))
	m, err := events.ToMsg(subject, Stamp(e, d))
	if err != nil {
		return fmt.Errorf("admission: throttle %s: %w", subject, err)
	}
	at := d.At
	if t := at.Truncate(time.Second); t.Before(at) {
		at = t.Add(time.Second)
	}
	m.Header.Set(hdrSchedule, "@at "+at.UTC().Format(time.RFC3339))
	m.Header.Set(hdrScheduleTarget, a.names.In(ref))
	m.Header.Set(nats.MsgIdHdr, dedupe.MsgID(e, subject))
	if _, err := a.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("admission: throttle publish on %s: %w", subject, err)
	}
	return nil
}
