package record

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

func TestLive(t *testing.T) {
	st := NewState("a", "s", time.Now())
	if st.Live() != nil {
		t.Fatalf("a new session's context: %v", st.Live())
	}
	st.NextEntry = 40
	if got := st.Live(); !slices.Equal(got, []Span{{1, 39}}) {
		t.Fatalf("before compaction: %v", got)
	}
	// Compacted at entry 30: the head is 1-4, the summary (id 30) stands
	// for 5-19, the tail is 20-29 and 31-39 around it.
	st.HeadEnd, st.Summary, st.From = 5, 30, 20
	if got := st.Live(); !slices.Equal(got, []Span{{1, 4}, {30, 30}, {20, 29}, {31, 39}}) {
		t.Fatalf("after compaction: %v", got)
	}
	st.NextEntry = 31
	st.HeadEnd = 1
	if got := st.Live(); !slices.Equal(got, []Span{{30, 30}, {20, 29}}) {
		t.Fatalf("no head, nothing after the summary: %v", got)
	}
}

func writeEntries(t testing.TB, s *Store, ref streams.SessionRef, n int) {
	t.Helper()
	var es []Entry
	for i := 1; i <= n; i++ {
		es = append(es, Entry{ID: uint64(i), Kind: KindEvent, Text: fmt.Sprintf("entry %d %s", i, strings.Repeat("x", 200))})
	}
	if err := s.WriteEntries(context.Background(), ref, es); err != nil {
		t.Fatal(err)
	}
}

// ReadSpans reads exactly the entries asked for, in the order asked,
// across batches of the server's limit, and names an entry that is not
// there.
func TestReadSpans(t *testing.T) {
	s, ref := testStore(t)
	ctx := context.Background()
	writeEntries(t, s, ref, 1500)
	other, _ := streams.NewSessionRef("demo", "s2")
	writeEntries(t, s, other, 3)
	got, err := s.ReadSpans(ctx, ref, []Span{{1, 2}, {1400, 1400}, {100, 1300}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, e := range got {
		ids = append(ids, e.ID)
	}
	want := []uint64{1, 2, 1400}
	for i := uint64(100); i <= 1300; i++ {
		want = append(want, i)
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("read %d entries, want %d; first %v", len(ids), len(want), ids[:min(5, len(ids))])
	}
	if !strings.HasPrefix(got[2].Text, "entry 1400 ") {
		t.Fatalf("entry 1400 reads %q", got[2].Text[:20])
	}
	if _, err := s.ReadSpans(ctx, ref, []Span{{1499, 1501}}, 0); err == nil || !strings.Contains(err.Error(), "lacks entry 1501") {
		t.Fatalf("missing entry: %v", err)
	}
	if _, err := s.ReadSpans(ctx, other, []Span{{5, 6}}, 0); err == nil || !strings.Contains(err.Error(), "lacks entry 5") {
		t.Fatalf("no entry at all: %v", err)
	}
}

// TestReadSpansWaitsForTheState reads entries for a state revision the
// replica answering does not hold yet (as a replica behind the leader
// would answer): the read waits until it does, and names the revision
// it waited for when it never comes.
func TestReadSpansWaitsForTheState(t *testing.T) {
	s, ref := testStore(t)
	ctx := context.Background()
	st := NewState(ref.Agent, ref.Session, time.Now().UTC())
	rev, err := s.Create(ctx, ref, st)
	if err != nil {
		t.Fatal(err)
	}
	writeEntries(t, s, ref, 3)
	st.NextEntry = 4
	if _, err := s.ReadSpans(ctx, ref, st.Live(), rev); err != nil {
		t.Fatalf("read at the state's revision: %v", err)
	}
	// The state's next write is not made yet: a read for it waits.
	next := rev + 4 // three entries, then the state
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		es, err := s.ReadSpans(ctx, ref, st.Live(), next)
		done <- result{len(es), err}
	}()
	select {
	case r := <-done:
		t.Fatalf("read for revision %d returned before the state was there: %d entries, %v", next, r.n, r.err)
	case <-time.After(100 * time.Millisecond):
	}
	wrev, err := s.Update(ctx, ref, st, rev)
	if err != nil {
		t.Fatal(err)
	}
	if wrev != next {
		t.Fatalf("state written at %d, the test expected %d", wrev, next)
	}
	select {
	case r := <-done:
		if r.err != nil || r.n != 3 {
			t.Fatalf("read once the state is there: %d entries, %v", r.n, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the read did not end once the state was there")
	}
	defer func(d time.Duration) { spansCatchUp = d }(spansCatchUp)
	spansCatchUp = 200 * time.Millisecond
	if _, err := s.ReadSpans(ctx, ref, st.Live(), next+10); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("revision %d, behind %d", next, next+10)) {
		t.Fatalf("read for a revision never written: %v", err)
	}
}

// BenchmarkReadContext reads the last 50 entries of a transcript of n,
// three ways: what a claim read before (a watch over every entry of the
// session), one direct get per key, and one batched direct get. Only the
// last does not grow with n.
func BenchmarkReadContext(b *testing.B) {
	for _, n := range []int{100, 2000} {
		srv := natstest.RunServer(b)
		_, js := natstest.Connect(b, srv.ClientURL())
		ctx := context.Background()
		if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
			b.Fatal(err)
		}
		s, err := Open(ctx, js, streams.Default())
		if err != nil {
			b.Fatal(err)
		}
		ref, _ := streams.NewSessionRef("demo", "s1")
		writeEntries(b, s, ref, n)
		last := []Span{{uint64(n - 49), uint64(n)}}
		b.Run(fmt.Sprintf("watch-all/entries=%d", n), func(b *testing.B) {
			for b.Loop() {
				if got := watchAll(b, s, ref); got != n {
					b.Fatalf("watch read %d entries, want %d", got, n)
				}
			}
		})
		b.Run(fmt.Sprintf("get-each/entries=%d", n), func(b *testing.B) {
			for b.Loop() {
				for id := n - 49; id <= n; id++ {
					if _, err := s.kv.Get(ctx, s.names.LogKey(ref, uint64(id))); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		b.Run(fmt.Sprintf("batch-get/entries=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := s.ReadSpans(ctx, ref, last, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// watchAll reads every entry of ref's transcript with a watch over its
// keys, as claims read before, and returns how many it read.
func watchAll(b *testing.B, s *Store, ref streams.SessionRef) int {
	b.Helper()
	w, err := s.kv.Watch(context.Background(), s.names.LogKeys(ref), jetstream.IgnoreDeletes())
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	n := 0
	timeout := time.After(30 * time.Second)
	for {
		select {
		case kve := <-w.Updates():
			if kve == nil {
				return n
			}
			var e Entry
			if err := json.Unmarshal(kve.Value(), &e); err != nil {
				b.Fatal(err)
			}
			n++
		case <-timeout:
			b.Fatalf("watch read %d entries, then nothing", n)
		}
	}
}

// TestEntriesOfLargeEntries reads a transcript of large entries (tool
// results near the size cap), more bytes than a client or the server
// holds for one subscription: the read is cut into batches the server
// bounds by bytes, and every entry comes back, in order.
func TestEntriesOfLargeEntries(t *testing.T) {
	s, ref := testStore(t)
	ctx := context.Background()
	st := NewState(ref.Agent, ref.Session, time.Now().UTC())
	rev, err := s.Create(ctx, ref, st)
	if err != nil {
		t.Fatal(err)
	}
	const n, size = 300, 300 << 10 // 90 MB, over the 64 MB a subscription or a connection holds by default
	big := strings.Repeat("y", size)
	for from := 1; from <= n; from += 50 {
		var es []Entry
		for i := from; i < from+50 && i <= n; i++ {
			es = append(es, Entry{ID: uint64(i), Kind: KindToolResult, CallID: fmt.Sprintf("c%d", i), Result: big})
		}
		if err := s.WriteEntries(ctx, ref, es); err != nil {
			t.Fatal(err)
		}
	}
	st.NextEntry = n + 1
	rev, err = s.Update(ctx, ref, st, rev)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Entries(ctx, ref, st.NextEntry, rev)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("read %d entries, want %d", len(got), n)
	}
	for i, e := range got {
		if e.ID != uint64(i+1) || e.CallID != fmt.Sprintf("c%d", i+1) || len(e.Result) != size {
			t.Fatalf("entry %d reads id %d, call %q, %d bytes", i+1, e.ID, e.CallID, len(e.Result))
		}
	}
	// The connection the store reads on is still up, and reads on.
	if _, err := s.Entries(ctx, ref, 3, rev); err != nil {
		t.Fatalf("a read after the large one: %v", err)
	}
}
