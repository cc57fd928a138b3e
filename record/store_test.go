package record

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

func testStore(t *testing.T) (*Store, streams.SessionRef) {
	t.Helper()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, js, streams.Default())
	if err != nil {
		t.Fatal(err)
	}
	ref, err := streams.NewSessionRef("demo", "s1")
	if err != nil {
		t.Fatal(err)
	}
	return s, ref
}

// TestSettleWhoseAnswerWasLost settles a batch that lands but whose
// answer never comes (the commit request times out): the store reads the
// state back, finds its own write, and reports success with its revision
// instead of failing (or, on the retry, taking its own write for another
// worker's).
func TestSettleWhoseAnswerWasLost(t *testing.T) {
	s, ref := testStore(t)
	ctx := context.Background()
	now := time.Now().UTC()
	st := NewState(ref.Agent, ref.Session, now)
	rev, err := s.Create(ctx, ref, st)
	if err != nil {
		t.Fatal(err)
	}
	published := 0
	s.publish = func(ctx context.Context, msgs []*nats.Msg) (uint64, error) {
		published++
		if _, err := s.publishBatch(ctx, msgs); err != nil {
			return 0, err
		}
		return 0, context.DeadlineExceeded
	}
	var retries []string
	s.Retried = func(_ streams.SessionRef, why string, _ error) { retries = append(retries, why) }
	next := st.Clone()
	var entries []Entry
	for range 2 {
		entries = append(entries, Entry{ID: next.NextEntry, Kind: KindSystem, Text: "note", Time: now})
		next.NextEntry++
	}
	next.Steps = 1
	nrev, err := s.Settle(ctx, ref, entries, next, rev)
	if err != nil {
		t.Fatalf("settle: %v (retries %v)", err, retries)
	}
	got, grev, err := s.Load(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if grev != nrev || got.Steps != 1 {
		t.Fatalf("settle returned revision %d; state is at %d with %d steps", nrev, grev, got.Steps)
	}
	if published != 1 {
		t.Fatalf("batch published %d times, want once", published)
	}
	tr, err := s.Entries(ctx, ref, got.NextEntry)
	if err != nil || len(tr) != 2 {
		t.Fatalf("transcript %v, %v", tr, err)
	}
}

// TestSettleFencedIsNotRetried settles at a stale revision: fenced at
// once.
func TestSettleFencedIsNotRetried(t *testing.T) {
	s, ref := testStore(t)
	ctx := context.Background()
	st := NewState(ref.Agent, ref.Session, time.Now().UTC())
	rev, err := s.Create(ctx, ref, st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, ref, st, rev); err != nil {
		t.Fatal(err)
	}
	s.Retried = func(_ streams.SessionRef, why string, err error) { t.Errorf("retried (%s): %v", why, err) }
	e := Entry{ID: 1, Kind: KindSystem, Text: "late"}
	next := st.Clone()
	next.NextEntry = 2
	if _, err := s.Settle(ctx, ref, []Entry{e}, next, rev); !errors.Is(err, ErrFenced) {
		t.Fatalf("settle at a stale revision: %v, want ErrFenced", err)
	}
}
