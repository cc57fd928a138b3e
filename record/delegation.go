package record

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/streams"
)

// A delegate call's effect is the publish of an event its worker builds
// from what the run has left (the child's budget carved from it, its
// inputs read): built again later, it would differ. So the event is made
// durable before its first publish, create-only under a key its step
// reserves (streams.Names.DelegationKey), and every publish of the call
// (the first, a retry, a recovery's, a racing stale worker's) publishes
// the stored bytes: recovery looks the event up, it does not make it
// again. A key that is absent means no event of that step was ever
// published. Like a session's child keys, the key stays until the
// session's keys are removed (retention).

// ReserveDelegation stores event, the encoded delegate event of parent's
// delegate call of step, with a create-only write, and returns the event
// the step publishes: event, or the one stored first (by an earlier
// attempt, or by another worker that made the same step), which wins.
// An event the server's max payload cannot hold is refused with
// ErrTooLarge, and not stored.
func (s *Store) ReserveDelegation(ctx context.Context, parent streams.SessionRef, step uint64, event []byte) ([]byte, error) {
	key := s.names.DelegationKey(parent, step)
	if maxPayload := int(s.nc.MaxPayload()); len(event) > maxPayload-1024 {
		// The write would fail every time it is made: the event cannot
		// be stored, so it is never published.
		return nil, fmt.Errorf("record: the delegate event of step %d of %s is %d bytes, over the server's max payload %d: %w", step, parent, len(event), maxPayload, ErrTooLarge)
	}
	_, err := s.kv.Create(ctx, key, event)
	if err == nil {
		return event, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		// A create whose answer was lost may have landed: the lookup
		// says, and a later attempt finds it.
		return nil, fmt.Errorf("record: store the delegate event of step %d of %s: %w", step, parent, err)
	}
	stored, err := s.Delegation(ctx, parent, step)
	if err != nil {
		return nil, err
	}
	if stored == nil {
		return nil, fmt.Errorf("record: store the delegate event of step %d of %s: key %s exists and holds nothing", step, parent, key)
	}
	return stored, nil
}

// Delegation returns the delegate event stored for parent's delegate
// call of step (ReserveDelegation), nil when none is: then none was
// published. It reads the stream's leader, as Stored does: the event
// was written after the state its reader loaded, so a replica behind
// it (which may answer a direct get) would say none is, and recovery
// would make the delegation again.
func (s *Store) Delegation(ctx context.Context, parent streams.SessionRef, step uint64) ([]byte, error) {
	data, _, ok, err := s.leaderValue(ctx, s.names.DelegationKey(parent, step), fmt.Sprintf("the delegate event of step %d of %s", step, parent))
	if err != nil || !ok {
		return nil, err
	}
	return data, nil
}
