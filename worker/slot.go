package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
)

// Bounds of the concurrency slots.
const (
	// maxSlotAttempts bounds compare-and-set retries of one slot table
	// under contention.
	maxSlotAttempts = 32
	// queueTTL is how long a queued session keeps its place without
	// asking again; a queued session asks every queueRetry or so, so only
	// one whose event no longer comes back (its consumer deleted, say)
	// loses it.
	queueTTL = 2 * time.Minute
	// queueRetry is how long a queued session's event waits in JL_IN
	// before its session asks for a slot again.
	queueRetry = time.Second
	// slotTableTTL is how long a table outlives its last holder or
	// waiter, so that an idle key costs nothing.
	slotTableTTL = time.Minute
	// maxSlotTableBytes bounds one table as written, well under a NATS
	// message: past it the queue keeps no more places, and a session
	// that finds it full waits without one (its event still waits in
	// JL_IN and asks again) until places free up.
	maxSlotTableBytes = 512 << 10
)

// slotTable is one jl_slots key: the runs that hold a slot of an agent's
// concurrency key and the sessions waiting for one. Each holder and
// waiter has an expiry its worker renews: a dead worker's slot frees
// itself, and a waiter that stopped asking loses its place.
type slotTable struct {
	Agent   string       `json:"agent"`
	Key     string       `json:"key"`
	Limit   int          `json:"limit"`
	Holders []slotHolder `json:"holders,omitempty"`
	Queue   []slotWaiter `json:"queue,omitempty"`
}

type slotHolder struct {
	Session string    `json:"session"`
	Owner   string    `json:"owner"`
	Expires time.Time `json:"expires"`
}

type slotWaiter struct {
	Session string    `json:"session"`
	Seq     uint64    `json:"seq"`
	Expires time.Time `json:"expires"`
}

// prune drops the holders and waiters whose expiry passed.
func (t *slotTable) prune(now time.Time) {
	t.Holders = slices.DeleteFunc(t.Holders, func(h slotHolder) bool { return !h.Expires.After(now) })
	t.Queue = slices.DeleteFunc(t.Queue, func(w slotWaiter) bool { return !w.Expires.After(now) })
}

func (t *slotTable) holder(session string) int {
	return slices.IndexFunc(t.Holders, func(h slotHolder) bool { return h.Session == session })
}

func (t *slotTable) waiter(session string) int {
	return slices.IndexFunc(t.Queue, func(w slotWaiter) bool { return w.Session == session })
}

// ahead counts the waiters before a session waiting with seq: sessions
// get slots in the order of the JL_IN sequence of what they wait to run.
func (t *slotTable) ahead(session string, seq uint64) int {
	n := 0
	for _, w := range t.Queue {
		if w.Session != session && cmp.Or(cmp.Compare(w.Seq, seq), cmp.Compare(w.Session, session)) < 0 {
			n++
		}
	}
	return n
}

// slots keeps the concurrency slots of agents' runs in jl_slots: one key
// per agent and concurrency key, rewritten by compare-and-set on its
// revision, so every worker shares one count.
type slots struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	names  streams.Names
	bucket string
	// ttl is how long a held slot lives without renewal: the lease TTL,
	// renewed with the lease.
	ttl   time.Duration
	owner string
	now   func() time.Time
}

// slotGrant is the answer to a request for a slot.
type slotGrant struct {
	granted bool
	// ahead is how many sessions wait before this one when it was not
	// granted.
	ahead int
}

// acquire takes a slot of slot for the session's run, whose place in line
// is seq, for this worker, which holds the session's lease: a slot the
// session holds already (this worker's, or a dead owner's it took the
// session over from) is renewed as this worker's. Without a free slot, or
// with sessions ahead of it that wait for one, the session joins (or
// keeps its place in) the queue.
func (s *slots) acquire(ctx context.Context, ref streams.SessionRef, slot record.Slot, seq uint64) (slotGrant, error) {
	var g slotGrant
	err := s.change(ctx, ref.Agent, slot, func(t *slotTable, now time.Time) bool {
		t.Limit = slot.Limit
		if i := t.holder(ref.Session); i >= 0 {
			t.Holders[i].Owner, t.Holders[i].Expires = s.owner, now.Add(s.ttl)
			g = slotGrant{granted: true}
			return true
		}
		if g = t.wouldGrant(ref.Session, seq); g.granted {
			if i := t.waiter(ref.Session); i >= 0 {
				t.Queue = slices.Delete(t.Queue, i, i+1)
			}
			t.Holders = append(t.Holders, slotHolder{Session: ref.Session, Owner: s.owner, Expires: now.Add(s.ttl)})
			return true
		}
		t.wait(ref.Session, seq, now)
		return true
	})
	return g, err
}

// wait asks, for a queued session whose lease this worker does not hold
// yet, whether a slot would be granted, without taking one (the worker
// that runs the session takes it, under the lease): granted when one is
// free for it now, or when the session holds one already (it runs
// elsewhere). Otherwise the session keeps its place in the queue.
func (s *slots) wait(ctx context.Context, ref streams.SessionRef, slot record.Slot, seq uint64) (slotGrant, error) {
	var g slotGrant
	err := s.change(ctx, ref.Agent, slot, func(t *slotTable, now time.Time) bool {
		if t.holder(ref.Session) >= 0 {
			g = slotGrant{granted: true}
			return false
		}
		if g = t.wouldGrant(ref.Session, seq); g.granted {
			return false
		}
		t.wait(ref.Session, seq, now)
		return true
	})
	return g, err
}

// wouldGrant says whether a session waiting with seq, holding no slot,
// gets one now: a slot is free for each session ahead of it and for it.
func (t *slotTable) wouldGrant(session string, seq uint64) slotGrant {
	ahead := t.ahead(session, seq)
	if len(t.Holders)+ahead < t.Limit {
		return slotGrant{granted: true}
	}
	return slotGrant{ahead: ahead}
}

// wait puts a session waiting with seq in the queue, or renews its place.
func (t *slotTable) wait(session string, seq uint64, now time.Time) {
	w := slotWaiter{Session: session, Seq: seq, Expires: now.Add(queueTTL)}
	if i := t.waiter(session); i >= 0 {
		w.Seq = min(w.Seq, t.Queue[i].Seq)
		t.Queue[i] = w
		return
	}
	t.Queue = append(t.Queue, w)
}

// renew extends the session's slot; held is false when this worker holds
// none for it any more (it lapsed and went to another run, or to another
// worker that took the session over).
func (s *slots) renew(ctx context.Context, ref streams.SessionRef, slot record.Slot) (held bool, err error) {
	err = s.change(ctx, ref.Agent, slot, func(t *slotTable, now time.Time) bool {
		i := t.holder(ref.Session)
		if held = i >= 0 && t.Holders[i].Owner == s.owner; held {
			t.Holders[i].Owner, t.Holders[i].Expires = s.owner, now.Add(s.ttl)
		}
		return held
	})
	return held, err
}

// release gives the session's slot back, if this worker holds it, and
// its place in the queue.
func (s *slots) release(ctx context.Context, ref streams.SessionRef, slot record.Slot) error {
	return s.change(ctx, ref.Agent, slot, func(t *slotTable, _ time.Time) bool {
		h, w := t.holder(ref.Session), t.waiter(ref.Session)
		if h >= 0 && t.Holders[h].Owner != s.owner {
			h = -1 // another worker runs the session now
		}
		if h >= 0 {
			t.Holders = slices.Delete(t.Holders, h, h+1)
		}
		if w >= 0 {
			t.Queue = slices.Delete(t.Queue, w, w+1)
		}
		return h >= 0 || w >= 0
	})
}

// leave gives up the session's place in the queue of slot, if it has
// one, and nothing else: for a queued session that no longer waits (its
// event went another way, or it was cancelled), so that the sessions
// behind it do not wait for the place to lapse.
func (s *slots) leave(ctx context.Context, ref streams.SessionRef, slot record.Slot) error {
	return s.change(ctx, ref.Agent, slot, func(t *slotTable, _ time.Time) bool {
		w := t.waiter(ref.Session)
		if w >= 0 {
			t.Queue = slices.Delete(t.Queue, w, w+1)
		}
		return w >= 0
	})
}

// holders returns the sessions holding a slot of slot now, for tests and
// status.
func (s *slots) holders(ctx context.Context, agent string, slot record.Slot) ([]string, error) {
	var out []string
	err := s.change(ctx, agent, slot, func(t *slotTable, _ time.Time) bool {
		for _, h := range t.Holders {
			out = append(out, h.Session)
		}
		return false
	})
	return out, err
}

// change reads the table of slot, prunes what expired, applies fn and,
// when fn reports a change, writes the table back conditional on the
// revision it read, with a TTL past its last expiry; a lost race reads
// again.
func (s *slots) change(ctx context.Context, agent string, slot record.Slot, fn func(t *slotTable, now time.Time) bool) error {
	key, err := s.names.SlotKey(agent, slot.Key)
	if err != nil {
		return fmt.Errorf("worker: slot key of %s: %w", agent, err)
	}
	for attempt := range maxSlotAttempts {
		now := time.Now()
		t := slotTable{Agent: agent, Key: slot.Key, Limit: slot.Limit}
		var rev uint64
		e, err := s.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		case err != nil:
			return fmt.Errorf("worker: read slots %s: %w", key, err)
		default:
			rev = e.Revision()
			if err := json.Unmarshal(e.Value(), &t); err != nil {
				return fmt.Errorf("worker: slots %s: %w", key, err)
			}
		}
		before := len(t.Holders) + len(t.Queue)
		t.prune(now)
		queued := len(t.Queue)
		changed := fn(&t, now)
		if !changed && len(t.Holders)+len(t.Queue) == before {
			return nil
		}
		b, _ := json.Marshal(t)
		if len(b) > maxSlotTableBytes && len(t.Queue) > queued {
			// The queue is full: the newcomer (wait appends it last)
			// waits without a place.
			t.Queue = t.Queue[:queued]
			if len(t.Holders)+len(t.Queue) == before {
				return nil
			}
			b, _ = json.Marshal(t)
		}
		ttl := slotTableTTL
		for _, h := range t.Holders {
			ttl = max(ttl, h.Expires.Sub(now)+slotTableTTL)
		}
		for _, w := range t.Queue {
			ttl = max(ttl, w.Expires.Sub(now)+slotTableTTL)
		}
		if rev == 0 {
			_, err = s.kv.Create(ctx, key, b, jetstream.KeyTTL(ttl))
		} else {
			// KeyValue.Update takes no TTL: write the compare-and-set as
			// the bucket's own message, with one.
			m := &nats.Msg{Subject: streams.KVSubject(s.bucket, key), Header: nats.Header{}, Data: b}
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
			_, err = s.js.PublishMsg(ctx, m, jetstream.WithMsgTTL(ttl))
		}
		if err == nil {
			return nil
		}
		if !record.IsConflict(err) && !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("worker: write slots %s: %w", key, err)
		}
		d := time.Millisecond << min(attempt, 6)
		t2 := time.NewTimer(d/2 + rand.N(d))
		select {
		case <-ctx.Done():
			t2.Stop()
			return fmt.Errorf("worker: slots %s: %w", key, ctx.Err())
		case <-t2.C:
		}
	}
	return fmt.Errorf("worker: slots %s: too much contention", key)
}
