package record

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/streams"
)

// A session's children are recorded among its own keys
// (streams.Names.ChildKey), one key each, written before the child's
// start is published: a reader finds every session a session delegated
// to, in any of its runs, by reading that session's keys and its
// children's states, whatever else the deployment holds.

// MaxChildren bounds the children Children returns.
const MaxChildren = 100_000

// NoteChild records that parent's delegate call callID starts session
// child. Writing it again is a no-op; it is removed with parent's other
// keys.
func (s *Store) NoteChild(ctx context.Context, parent, child streams.SessionRef, callID string) error {
	if _, err := s.kv.Put(ctx, s.names.ChildKey(parent, child), []byte(callID)); err != nil {
		return fmt.Errorf("record: note child %s of %s: %w", child, parent, err)
	}
	return nil
}

// ChildRefs returns the sessions parent's delegate calls started, as its
// child keys name them (some may not have started, or may be gone).
func ChildRefs(ctx context.Context, js jetstream.JetStream, names streams.Names, parent streams.SessionRef) ([]streams.SessionRef, error) {
	kv, err := js.KeyValue(ctx, names.BucketSessions())
	if err != nil {
		return nil, fmt.Errorf("record: open bucket %s: %w", names.BucketSessions(), err)
	}
	lister, err := kv.ListKeysFiltered(ctx, names.ChildKeys(parent))
	if err != nil {
		return nil, fmt.Errorf("record: children of %s: %w", parent, err)
	}
	defer lister.Stop()
	var out []streams.SessionRef
	for k := range lister.Keys() {
		ref, err := names.ParseChildKey(parent, k)
		if err != nil {
			continue
		}
		if len(out) >= MaxChildren {
			return nil, fmt.Errorf("record: children of %s: more than %d", parent, MaxChildren)
		}
		out = append(out, ref)
	}
	return out, nil
}

// Children returns the summaries of the sessions parent delegated to
// that have a state, ordered by agent and session: its child keys, then
// one state read each. What it reads grows with parent's children, not
// with the deployment.
func Children(ctx context.Context, js jetstream.JetStream, names streams.Names, parent streams.SessionRef) ([]Summary, error) {
	refs, err := ChildRefs(ctx, js, names, parent)
	if err != nil {
		return nil, err
	}
	got, err := Summaries(ctx, js, names, refs)
	if err != nil {
		return nil, err
	}
	out := got[:0]
	for _, x := range got {
		if x.DelegatedBy == parent.String() {
			out = append(out, x)
		}
	}
	slices.SortFunc(out, func(a, b Summary) int {
		if c := strings.Compare(a.Agent, b.Agent); c != 0 {
			return c
		}
		return strings.Compare(a.Session, b.Session)
	})
	return out, nil
}
