package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
)

// maxRateAttempts bounds compare-and-set retries of one token bucket under
// contention.
const maxRateAttempts = 24

// limiter is a token bucket per (agent, trigger, key) whose state lives in
// KV, so every ingest process draws from the same bucket. Each take is a
// read and a compare-and-set write on the key's revision; a lost race
// reads again.
type limiter struct {
	js    jetstream.JetStream
	kv    jetstream.KeyValue
	names streams.Names
	now   func() time.Time
}

// Bounds of a bucket's clock and lifetime.
const (
	// maxClockSkew is how far ahead of this process's clock a bucket's
	// time may be and still be trusted; a bucket written by a clock
	// further ahead refills from now instead of staying empty until that
	// clock's time comes.
	maxClockSkew = time.Minute
	// maxRateTTL bounds how long an idle bucket is kept (a tiny per_minute
	// would otherwise need years to refill, past what a Duration holds).
	maxRateTTL = streams.DefaultDedupeTTL
)

// Bounds of the events a bucket remembers having taken a token.
const (
	// takerHorizon is how long a take is remembered: a sender's retry
	// after a failed publish comes well within it.
	takerHorizon = 15 * time.Minute
	// maxTakers bounds the takes remembered, newest kept. It matters
	// only for buckets that refill fast, whose retries find tokens anyway.
	maxTakers = 128
)

// bucketState is the stored state of one bucket: the tokens left at At,
// and the events that took a token lately, so that a retry of the same
// event (after a failed publish, or delivered twice at once) takes none.
type bucketState struct {
	Tokens float64   `json:"tokens"`
	At     time.Time `json:"at"`
	Takers []taker   `json:"takers,omitempty"`
}

// taker is one event that took a token: its id and when, in Unix seconds.
type taker struct {
	ID string `json:"i"`
	At int64  `json:"t"`
}

// took reports whether event took a token lately.
func (s *bucketState) took(event string) bool {
	for _, t := range s.Takers {
		if t.ID == event {
			return true
		}
	}
	return false
}

// remember records event's take at now, dropping takes past the horizon
// and the oldest beyond maxTakers.
func (s *bucketState) remember(event string, now time.Time) {
	cutoff := now.Add(-takerHorizon).Unix()
	kept := s.Takers[:0]
	for _, t := range s.Takers {
		if t.At >= cutoff {
			kept = append(kept, t)
		}
	}
	kept = append(kept, taker{ID: event, At: now.Unix()})
	if n := len(kept) - maxTakers; n > 0 {
		kept = kept[n:]
	}
	s.Takers = kept
}

// capacity is the bucket size of r: its burst, else one minute's worth.
func capacity(r policies.Rate) float64 {
	if r.Burst > 0 {
		return float64(r.Burst)
	}
	return math.Max(1, math.Floor(r.PerMinute))
}

// take takes one token for key on behalf of event (an id naming the
// event) and reports whether there was one. The take is idempotent per
// event: an event that took a token lately is granted again without
// taking another, so that a retry of a delivery whose publish failed is
// not refused by its own first attempt, and two concurrent deliveries of
// one event take one token.
func (l *limiter) take(ctx context.Context, agent, trigger, key, event string, r policies.Rate) (bool, error) {
	k, err := l.names.RateKey(agent, trigger, key)
	if err != nil {
		return false, fmt.Errorf("%w: rate key of %s/%s: %w", ErrState, agent, trigger, err)
	}
	cap := capacity(r)
	perSec := r.PerMinute / 60
	// The key outlives a full refill by a margin, then expires: an idle
	// key costs nothing. Every write carries the TTL, so it counts from
	// the last take.
	ttl := maxRateTTL
	if refill := cap / perSec; refill < (maxRateTTL - time.Minute).Seconds() {
		ttl = time.Duration(refill*float64(time.Second)) + time.Minute
	}
	for attempt := range maxRateAttempts {
		now := l.now()
		st := bucketState{Tokens: cap, At: now}
		var rev uint64
		e, err := l.kv.Get(ctx, k)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		case err != nil:
			return false, fmt.Errorf("%w: read rate bucket %s: %w", ErrState, k, err)
		default:
			rev = e.Revision()
			var old bucketState
			if json.Unmarshal(e.Value(), &old) == nil {
				if old.took(event) {
					return true, nil
				}
				at := old.At
				if at.After(now.Add(maxClockSkew)) {
					// Written by a clock far ahead: trusting it would
					// keep the bucket from refilling until then. The
					// server's time of the write stands in for it.
					at = e.Created()
					if at.After(now) {
						at = now
					}
				}
				elapsed := max(0, now.Sub(at).Seconds())
				st.Tokens = math.Min(cap, old.Tokens+elapsed*perSec)
				st.Takers = old.Takers
				if at.After(now) {
					// Another process's clock runs a little ahead: keep
					// its time so tokens are not granted twice.
					st.At = at
				}
			}
		}
		if st.Tokens < 1 {
			return false, nil
		}
		st.Tokens--
		st.remember(event, now)
		val, _ := json.Marshal(st)
		if rev == 0 {
			_, err = l.kv.Create(ctx, k, val, jetstream.KeyTTL(ttl))
		} else {
			// KeyValue.Update takes no TTL: write the compare-and-set
			// as the bucket's own message, with one.
			_, err = l.js.Publish(ctx, streams.KVSubject(l.names.BucketDedupe(), k), val,
				jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(ttl))
		}
		if err == nil {
			return true, nil
		}
		if !streams.IsConflict(err) {
			return false, fmt.Errorf("%w: write rate bucket %s: %w", ErrState, k, err)
		}
		if err := backoff(ctx, attempt); err != nil {
			return false, err
		}
	}
	return false, fmt.Errorf("%w: rate bucket for %s/%s key %q: too much contention", ErrState, agent, trigger, key)
}

// backoff waits before compare-and-set attempt+1 after a lost race: a
// short, growing and jittered delay, so that writers that collided do not
// collide again in lockstep.
func backoff(ctx context.Context, attempt int) error {
	d := time.Millisecond << min(attempt, 6)
	d = d/2 + rand.N(d)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("admission: retry after a conflicting write: %w", ctx.Err())
	case <-t.C:
		return nil
	}
}
