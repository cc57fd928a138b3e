package record

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
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
