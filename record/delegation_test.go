package record

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Workers that make the delegate event of one step at once (a stale one
// and its successor) each store theirs create-only: one is stored, and
// every one of them is answered with it, so all publish the same event.
// Another step's event has a key of its own.
func TestReserveDelegationOneWins(t *testing.T) {
	s, parent := testStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if got, err := s.Delegation(ctx, parent, 2); err != nil || got != nil {
		t.Fatalf("before any: %q, %v; want none", got, err)
	}
	const n = 8
	got := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = s.ReserveDelegation(ctx, parent, 2, fmt.Appendf(nil, `{"budget":%d}`, i))
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("writer %d: %v", i, errs[i])
		}
		if !bytes.Equal(got[i], got[0]) {
			t.Fatalf("writer %d was answered %q, writer 0 %q: want one event", i, got[i], got[0])
		}
	}
	stored, err := s.Delegation(ctx, parent, 2)
	if err != nil || !bytes.Equal(stored, got[0]) {
		t.Fatalf("stored %q (%v), want %q", stored, err, got[0])
	}
	other, err := s.ReserveDelegation(ctx, parent, 5, []byte(`{"budget":99}`))
	if err != nil || string(other) != `{"budget":99}` {
		t.Fatalf("another step's event: %q, %v", other, err)
	}
}

// A successor whose direct gets of the step's key are answered by a
// replica without the stored event (a direct get may be served by any
// replica) still finds the event: recovery would otherwise take the
// delegation for one never published and make it again, judging it
// anew against what the run has left. A create-only write that loses to
// it is answered with it too.
func TestDelegationReadBehindTheLeader(t *testing.T) {
	s, parent := testStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := []byte(`{"budget":500}`)
	if _, err := s.ReserveDelegation(ctx, parent, 2, first); err != nil {
		t.Fatal(err)
	}
	successor, err := Open(ctx, s.js, s.names)
	if err != nil {
		t.Fatal(err)
	}
	successor.kv = behindKV{KeyValue: successor.kv, key: s.names.DelegationKey(parent, 2)}
	if _, err := successor.kv.Get(ctx, s.names.DelegationKey(parent, 2)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the replica behind answers %v, want no key", err)
	}
	if got, err := successor.Delegation(ctx, parent, 2); err != nil || !bytes.Equal(got, first) {
		t.Fatalf("the successor finds %q, %v: want the stored %q", got, err, first)
	}
	if got, err := successor.ReserveDelegation(ctx, parent, 2, []byte(`{"budget":50}`)); err != nil || !bytes.Equal(got, first) {
		t.Fatalf("the successor's own event is answered with %q, %v: want the stored %q", got, err, first)
	}
}
