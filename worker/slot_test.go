package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
)

func slotsOf(t *testing.T, owner string, ttl time.Duration) *slots {
	t.Helper()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	ctx := context.Background()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	names := streams.Default()
	kv, err := js.KeyValue(ctx, names.BucketSlots())
	if err != nil {
		t.Fatal(err)
	}
	return &slots{js: js, kv: kv, names: names, bucket: names.BucketSlots(), ttl: ttl, owner: owner}
}

// The slot table of one key: a holder keeps its slot while it renews it
// and loses it to its TTL when it stops (a dead worker); waiters get
// slots in the order of their events, whoever asks first.
func TestSlotTable(t *testing.T) {
	ctx := context.Background()
	s := slotsOf(t, "w1", 2*time.Second)
	slot := record.Slot{Key: "octo/repo", Limit: 1}
	ref := func(name string) streams.SessionRef { r, _ := streams.NewSessionRef("a", name); return r }
	want := func(name string, seq uint64, granted bool, ahead int) {
		t.Helper()
		g, err := s.acquire(ctx, ref(name), slot, seq)
		if err != nil || g.granted != granted || g.ahead != ahead {
			t.Fatalf("%s (seq %d): %+v %v, want granted %v ahead %d", name, seq, g, err, granted, ahead)
		}
	}
	want("dead", 1, true, 0)
	want("late", 9, false, 0)
	want("early", 5, false, 0)
	want("late", 9, false, 1) // early came before it
	want("dead", 1, true, 0)  // a holder asking again keeps its slot

	// "dead" stops renewing: its slot lapses, and goes to the first in line.
	natstest.WaitFor(t, 10*time.Second, func() error {
		g, err := s.acquire(ctx, ref("early"), slot, 5)
		if err != nil {
			return err
		}
		if !g.granted {
			return fmt.Errorf("not granted yet: %+v", g)
		}
		return nil
	})
	if held, err := s.renew(ctx, ref("dead"), slot); err != nil || held {
		t.Fatalf("renew of a lapsed slot: held %v, %v", held, err)
	}
	if held, err := s.renew(ctx, ref("early"), slot); err != nil || !held {
		t.Fatalf("renew: held %v, %v", held, err)
	}
	want("late", 9, false, 0)
	if err := s.release(ctx, ref("early"), slot); err != nil {
		t.Fatal(err)
	}
	want("late", 9, true, 0)
	if hs, err := s.holders(ctx, "a", slot); err != nil || len(hs) != 1 || hs[0] != "late" {
		t.Fatalf("holders %v, %v", hs, err)
	}
	// Another key has slots of its own.
	if g, err := s.acquire(ctx, ref("other"), record.Slot{Key: "octo/other", Limit: 1}, 10); err != nil || !g.granted {
		t.Fatalf("another key: %+v %v", g, err)
	}
}

// A slot is the session's lease holder's: a worker that only asks for a
// queued session (wait) takes none; the worker that takes the session
// over takes its slot; the worker that lost it can neither renew nor
// release it.
func TestSlotBelongsToTheLeaseHolder(t *testing.T) {
	ctx := context.Background()
	s1 := slotsOf(t, "w1", time.Minute)
	s2 := *s1
	s2.owner = "w2"
	slot := record.Slot{Limit: 1}
	ref := func(name string) streams.SessionRef { r, _ := streams.NewSessionRef("a", name); return r }
	if g, err := s1.acquire(ctx, ref("x"), slot, 1); err != nil || !g.granted {
		t.Fatalf("w1 takes x's slot: %+v %v", g, err)
	}
	// w2 got a delivery of x and of y: asking takes nothing.
	if g, err := s2.wait(ctx, ref("x"), slot, 1); err != nil || !g.granted {
		t.Fatalf("w2 asks for x: %+v %v", g, err)
	}
	if g, err := s2.wait(ctx, ref("y"), slot, 2); err != nil || g.granted {
		t.Fatalf("w2 asks for y: %+v %v", g, err)
	}
	if hs, _ := s1.holders(ctx, "a", slot); len(hs) != 1 || hs[0] != "x" {
		t.Fatalf("holders after asking: %v", hs)
	}
	// w2 takes x over (w1's lease lapsed): x's slot is w2's now.
	if g, err := s2.acquire(ctx, ref("x"), slot, 1); err != nil || !g.granted {
		t.Fatalf("w2 takes x over: %+v %v", g, err)
	}
	if held, err := s1.renew(ctx, ref("x"), slot); err != nil || held {
		t.Fatalf("w1 renews x's slot: held %v, %v", held, err)
	}
	if err := s1.release(ctx, ref("x"), slot); err != nil {
		t.Fatal(err)
	}
	if hs, _ := s1.holders(ctx, "a", slot); len(hs) != 1 || hs[0] != "x" {
		t.Fatalf("w1's release freed w2's slot: holders %v", hs)
	}
	if g, err := s2.acquire(ctx, ref("y"), slot, 2); err != nil || g.granted {
		t.Fatalf("y while x runs: %+v %v", g, err)
	}
}

// A crowd of sessions waiting for one key's slot never makes its table
// too large to write: past a bound the queue keeps no more places, and a
// session that finds it full still waits (not granted, no error), its
// event in JL_IN, until it drains.
func TestSlotQueueIsBounded(t *testing.T) {
	ctx := context.Background()
	s := slotsOf(t, "w1", time.Minute)
	slot := record.Slot{Key: "k", Limit: 1}
	long := func(i int) string { return fmt.Sprintf("%0250d", i) }
	ref := func(name string) streams.SessionRef { r, _ := streams.NewSessionRef("a", name); return r }
	if g, err := s.acquire(ctx, ref("runs"), slot, 1); err != nil || !g.granted {
		t.Fatalf("first: %+v %v", g, err)
	}
	// The sessions that queued before, as many as one message holds.
	key, _ := s.names.SlotKey("a", slot.Key)
	e, err := s.kv.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var tb slotTable
	if err := json.Unmarshal(e.Value(), &tb); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour)
	for i := 0; ; i++ {
		tb.Queue = append(tb.Queue, slotWaiter{Session: long(i), Seq: uint64(10 + i), Expires: exp})
		if i%64 != 0 {
			continue
		}
		if b, _ := json.Marshal(tb); len(b) > 1<<20-16<<10 {
			if _, err := s.kv.Put(ctx, key, b); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	queued := len(tb.Queue)
	for i := range 40 {
		g, err := s.wait(ctx, ref(long(100_000+i)), slot, uint64(1_000_000+i))
		if err != nil {
			t.Fatalf("session %d more asks: %v", i+1, err)
		}
		if g.granted {
			t.Fatalf("session %d more granted a slot that runs", i+1)
		}
	}
	e, err = s.kv.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(e.Value(), &tb); err != nil || len(tb.Queue) > queued {
		t.Fatalf("queue of %d places, %d before: %v", len(tb.Queue), queued, err)
	}
	// The crowd is gone (its places lapsed): the next to ask gets one.
	tb.Queue = tb.Queue[:2]
	b, _ := json.Marshal(tb)
	if _, err := s.kv.Put(ctx, key, b); err != nil {
		t.Fatal(err)
	}
	if g, err := s.wait(ctx, ref("next"), slot, 2_000_000); err != nil || g.granted || g.ahead != 2 {
		t.Fatalf("next: %+v %v", g, err)
	}
	if e, err = s.kv.Get(ctx, key); err != nil || json.Unmarshal(e.Value(), &tb) != nil || len(tb.Queue) != 3 || tb.Queue[2].Session != "next" {
		t.Fatalf("next has no place: %v %+v", err, tb.Queue)
	}
}
