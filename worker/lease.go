package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
)

// DefaultLeaseTTL is how long a session lease lives without renewal.
const DefaultLeaseTTL = 30 * time.Second

// leaseValue is what a lease key holds: who owns the session, since when.
type leaseValue struct {
	Owner string `json:"owner"`
	// Incarnation is the run of the owner's process that holds it.
	Incarnation string    `json:"incarnation,omitempty"`
	Acquired    time.Time `json:"acquired"`
	Renewed     time.Time `json:"renewed"`
}

// leases creates, renews and releases session leases in jl_leases. A lease
// is a key with a per-key TTL; renewal rewrites it by compare-and-set with
// a fresh TTL, so a worker that stopped renewing loses it to the TTL.
type leases struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	names  streams.Names
	bucket string
	ttl    time.Duration
	owner  string
	// incarnation is this process's run of owner.
	incarnation string
	// predecessor reports whether a lease's holder is a dead earlier
	// incarnation of this worker, whose lease can be taken at once.
	predecessor func(context.Context, leaseValue) bool
}

// lease is one held session lease.
type lease struct {
	key      string
	rev      uint64
	acquired time.Time
	// expires is when the lease lapses unless renewed, by this worker's
	// clock (taken before the write, so it errs early).
	expires time.Time
}

// acquire creates the session's lease; ErrLeased when another worker
// holds it.
func (l *leases) acquire(ctx context.Context, ref streams.SessionRef) (*lease, error) {
	key := l.names.LeaseKey(ref)
	now := time.Now()
	b, _ := json.Marshal(leaseValue{Owner: l.owner, Incarnation: l.incarnation, Acquired: now, Renewed: now})
	rev, err := l.kv.Create(ctx, key, b, jetstream.KeyTTL(l.ttl))
	if errors.Is(err, jetstream.ErrKeyExists) && l.takeFromPredecessor(ctx, key) {
		rev, err = l.kv.Create(ctx, key, b, jetstream.KeyTTL(l.ttl))
	}
	if errors.Is(err, jetstream.ErrKeyExists) {
		return nil, fmt.Errorf("worker: lease %s: %w", ref, ErrLeased)
	}
	if err != nil {
		return nil, fmt.Errorf("worker: lease %s: %w", ref, err)
	}
	return &lease{key: key, rev: rev, acquired: now, expires: now.Add(l.ttl)}, nil
}

// renew extends the lease by its TTL. It fails with ErrLeaseLost when the
// lease lapsed or another worker holds it now.
func (l *leases) renew(ctx context.Context, ls *lease) error {
	now := time.Now()
	b, _ := json.Marshal(leaseValue{Owner: l.owner, Incarnation: l.incarnation, Acquired: ls.acquired, Renewed: now})
	// The KV API's Update cannot set a TTL, and an update without one
	// would make the lease immortal: publish the conditional write itself.
	m := &nats.Msg{Subject: streams.KVSubject(l.bucket, ls.key), Header: nats.Header{}, Data: b}
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(ls.rev, 10))
	ack, err := l.js.PublishMsg(ctx, m, jetstream.WithMsgTTL(l.ttl))
	if record.IsConflict(err) {
		return fmt.Errorf("worker: renew lease %s: %w", ls.key, ErrLeaseLost)
	}
	if err != nil {
		return fmt.Errorf("worker: renew lease %s: %w", ls.key, err)
	}
	ls.rev, ls.expires = ack.Sequence, now.Add(l.ttl)
	return nil
}

// release deletes the lease if it is still this worker's.
func (l *leases) release(ctx context.Context, ls *lease) error {
	err := l.kv.Delete(ctx, ls.key, jetstream.LastRevision(ls.rev))
	if err != nil && !record.IsConflict(err) {
		return fmt.Errorf("worker: release lease %s: %w", ls.key, err)
	}
	return nil
}

// takeFromPredecessor deletes the lease at key when a dead earlier
// incarnation of this worker holds it, and reports whether it did.
func (l *leases) takeFromPredecessor(ctx context.Context, key string) bool {
	if l.predecessor == nil {
		return false
	}
	e, err := l.kv.Get(ctx, key)
	if err != nil {
		return false
	}
	var v leaseValue
	if json.Unmarshal(e.Value(), &v) != nil || !l.predecessor(ctx, v) {
		return false
	}
	return l.kv.Delete(ctx, key, jetstream.LastRevision(e.Revision())) == nil
}
