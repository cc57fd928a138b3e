package record

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

func testStore(t *testing.T) (*Store, streams.SessionRef) {
	t.Helper()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	return openTestStore(t, js, streams.Options{})
}

// testStoreR3 is testStore on a three-node cluster, its buckets
// replicated three times.
func testStoreR3(t *testing.T) (*Store, streams.SessionRef) {
	t.Helper()
	c := natstest.RunCluster(t, 3)
	_, js := natstest.Connect(t, c.URLs())
	return openTestStore(t, js, streams.Options{Replicas: 3})
}

func openTestStore(t *testing.T, js jetstream.JetStream, opts streams.Options) (*Store, streams.SessionRef) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := streams.Provision(ctx, js, opts); err != nil {
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

// TestSettleWhoseAnswerWasLost settles an entry whose create lands but
// whose answer never comes: the store makes the create again, finds the
// id taken by its own bytes, and goes on to the state write instead of
// failing or taking its own entry for another writer's.
func TestSettleWhoseAnswerWasLost(t *testing.T) {
	s, ref := testStore(t)
	ctx := context.Background()
	now := time.Now().UTC()
	st := NewState(ref.Agent, ref.Session, now)
	rev, err := s.Create(ctx, ref, st)
	if err != nil {
		t.Fatal(err)
	}
	sent := 0
	send := s.send
	s.send = func(ctx context.Context, m *nats.Msg) error {
		sent++
		if err := send(ctx, m); err != nil {
			return err
		}
		if sent == 1 {
			return context.DeadlineExceeded
		}
		return nil
	}
	var retries []string
	s.Retried = func(_ streams.SessionRef, why string, _ error) { retries = append(retries, why) }
	next := st.Clone()
	e := Entry{ID: next.NextEntry, Kind: KindSystem, Text: "note", Time: now}
	next.NextEntry++
	next.Steps = 1
	nrev, err := s.Settle(ctx, ref, []Entry{e}, next, rev)
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
	if sent != 2 || len(retries) != 1 || retries[0] != "timeout" {
		t.Fatalf("create sent %d times, retries %v: want twice, one timeout", sent, retries)
	}
	tr, err := s.Entries(ctx, ref, got.NextEntry, grev)
	if err != nil || len(tr) != 1 || tr[0].Text != "note" {
		t.Fatalf("transcript %v, %v", tr, err)
	}
}

// leftover stores an entry at id as a writer would that crashed before
// its state write.
func leftover(t *testing.T, s *Store, ref streams.SessionRef, e Entry) {
	t.Helper()
	b, err := marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.kv.Create(context.Background(), s.names.LogKey(ref, e.ID), b); err != nil {
		t.Fatal(err)
	}
}

// TestSettleReplacesLeftovers settles entries whose ids are taken by
// entries no state names (a writer crashed between its creates and its
// state write): they are replaced, and the transcript is the settlement's.
func TestSettleReplacesLeftovers(t *testing.T) {
	t.Run("R1", func(t *testing.T) { testSettleReplacesLeftovers(t, testStore) })
	t.Run("R3", func(t *testing.T) { testSettleReplacesLeftovers(t, testStoreR3) })
}

func testSettleReplacesLeftovers(t *testing.T, open func(*testing.T) (*Store, streams.SessionRef)) {
	s, ref := open(t)
	ctx := context.Background()
	now := time.Now().UTC()
	st := NewState(ref.Agent, ref.Session, now)
	rev, err := s.Create(ctx, ref, st)
	if err != nil {
		t.Fatal(err)
	}
	leftover(t, s, ref, Entry{ID: 1, Kind: KindAssistant, Text: "left over", Time: now})
	leftover(t, s, ref, Entry{ID: 3, Kind: KindToolCall, Name: "x", Time: now})
	var replaced int
	s.Retried = func(_ streams.SessionRef, why string, _ error) {
		if why == "entry_replaced" {
			replaced++
		}
	}
	next := st.Clone()
	var entries []Entry
	for i := range 3 {
		entries = append(entries, Entry{ID: next.NextEntry, Kind: KindSystem, Text: fmt.Sprintf("note %d", i), Time: now})
		next.NextEntry++
	}
	nrev, err := s.Settle(ctx, ref, entries, next, rev)
	if err != nil {
		t.Fatal(err)
	}
	if replaced != 2 {
		t.Errorf("%d entries replaced, want 2", replaced)
	}
	tr, err := s.Entries(ctx, ref, next.NextEntry, nrev)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range tr {
		if want := fmt.Sprintf("note %d", i); e.Text != want || e.Kind != KindSystem {
			t.Errorf("entry %d: %s %q, want system %q", e.ID, e.Kind, e.Text, want)
		}
	}
}

// TestEntriesReadForTheState reads a transcript whose entry 1 is a
// leftover for the state that replaces it, from a store that does not
// hold that state yet (as a replica behind the leader would answer): the
// leftover is never returned; the read waits for the state, and then
// returns the entry as the state names it.
func TestEntriesReadForTheState(t *testing.T) {
	s, ref := testStore(t)
	ctx := context.Background()
	now := time.Now().UTC()
	st := NewState(ref.Agent, ref.Session, now)
	rev, err := s.Create(ctx, ref, st)
	if err != nil {
		t.Fatal(err)
	}
	leftover(t, s, ref, Entry{ID: 1, Kind: KindAssistant, Text: "left over", Time: now})
	// The replacement of entry 1, then the state naming it.
	want := rev + 3
	defer func(d time.Duration) { spansCatchUp = d }(spansCatchUp)
	spansCatchUp = 200 * time.Millisecond
	if tr, err := s.Entries(ctx, ref, 2, want); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("revision %d, behind %d", rev, want)) {
		t.Fatalf("read for revision %d before it was written: %+v, %v", want, tr, err)
	}
	spansCatchUp = entriesCatchUp
	done := make(chan error, 1)
	var tr []Entry
	go func() {
		var err error
		tr, err = s.Entries(ctx, ref, 2, want)
		done <- err
	}()
	b, err := marshal(Entry{ID: 1, Kind: KindSystem, Text: "note", Time: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.kv.Update(ctx, s.names.LogKey(ref, 1), b, rev+1); err != nil {
		t.Fatal(err)
	}
	st.NextEntry = 2
	if wrev, err := s.Update(ctx, ref, st, rev); err != nil || wrev != want {
		t.Fatalf("state written at %d (%v), the test expected %d", wrev, err, want)
	}
	select {
	case err := <-done:
		if err != nil || len(tr) != 1 || tr[0].Text != "note" {
			t.Fatalf("transcript %+v, %v: want the replacement", tr, err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the read did not end once the state was there")
	}
}

// TestSettleFencedByTakenEntry settles at a revision the state has moved
// on from, over an id another writer created: the create loses, the
// writer is fenced, the other writer's entry stays.
func TestSettleFencedByTakenEntry(t *testing.T) {
	s, ref := testStore(t)
	ctx := context.Background()
	now := time.Now().UTC()
	st := NewState(ref.Agent, ref.Session, now)
	rev, err := s.Create(ctx, ref, st)
	if err != nil {
		t.Fatal(err)
	}
	// The successor claims the session and creates entry 1.
	claimed := st.Clone()
	claimed.Epoch = 2
	crev, err := s.Update(ctx, ref, claimed, rev)
	if err != nil {
		t.Fatal(err)
	}
	theirs := Entry{ID: 1, Kind: KindToolResult, CallID: "c1", Result: "real", Time: now}
	if err := s.createEntries(ctx, ref, []Entry{theirs}, crev, nil); err != nil {
		t.Fatal(err)
	}
	mine := Entry{ID: 1, Kind: KindToolResult, CallID: "c1", Result: "late", Time: now}
	next := st.Clone()
	next.NextEntry = 2
	if _, err := s.Settle(ctx, ref, []Entry{mine}, next, rev); !errors.Is(err, ErrFenced) {
		t.Fatalf("late settle: %v, want ErrFenced", err)
	}
	e, ok, err := s.entry(ctx, ref, 1)
	if err != nil || !ok || e.Result != "real" {
		t.Fatalf("entry 1 after the late create: %+v %v %v", e, ok, err)
	}
}

// TestStored looks up the settlement of an intent under its reserved
// ids: adopted only whole, of the intent's step and one attempt. On a
// cluster the entries are read from the stream's leader.
func TestStored(t *testing.T) {
	t.Run("R1", func(t *testing.T) { testStored(t, testStore) })
	t.Run("R3", func(t *testing.T) { testStored(t, testStoreR3) })
}

// TestStoredWaitsForALeader reads a stored settlement while the stream
// has no leader (the server of its leader and another are down, then
// come back): Stored answers once a leader is elected, rather than
// failing for the election.
func TestStoredWaitsForALeader(t *testing.T) {
	// Restarting two nodes and electing a leader can take longer than
	// the default wait on a loaded machine; the test is of the waiting,
	// not of its bound.
	defer func(d time.Duration) { storedRetry = d }(storedRetry)
	storedRetry = 50 * time.Second
	c := natstest.RunCluster(t, 3)
	_, js := natstest.Connect(t, c.URLs())
	s, ref := openTestStore(t, js, streams.Options{Replicas: 3})
	ctx := context.Background()
	leftover(t, s, ref, Entry{ID: 20, Kind: KindToolResult, Step: 4, Entries: 1, CallID: "c1", Result: "done", Time: time.Now().UTC()})
	stream, err := js.Stream(ctx, streams.KVStream(s.bucket))
	if err != nil {
		t.Fatal(err)
	}
	leader := stream.CachedInfo().Cluster.Leader
	kept := -1
	for i, n := range c.Nodes() {
		if n.Name() != leader {
			kept = i
		}
	}
	// The reader is connected to a follower that stays up.
	_, kjs := natstest.Connect(t, c.Nodes()[kept].ClientURL())
	ks, err := Open(ctx, kjs, streams.Default())
	if err != nil {
		t.Fatal(err)
	}
	var stopped []int
	for i := range c.Nodes() {
		if i != kept {
			c.Stop(i)
			stopped = append(stopped, i)
		}
	}
	type result struct {
		es  []Entry
		err error
	}
	done := make(chan result, 1)
	go func() {
		es, err := ks.Stored(ctx, ref, Intent{Kind: StepTool, Step: 4, Entry: 20, CallID: "c1"})
		done <- result{es, err}
	}()
	for _, i := range stopped {
		c.Restart(i)
	}
	select {
	case r := <-done:
		if r.err != nil || len(r.es) != 1 || r.es[0].Result != "done" {
			t.Fatalf("Stored across the election: %+v, %v", r.es, r.err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Stored did not return once the cluster was back")
	}
}

func testStored(t *testing.T, open func(*testing.T) (*Store, streams.SessionRef)) {
	s, ref := open(t)
	ctx := context.Background()
	now := time.Now().UTC()
	model := Intent{Kind: StepModel, Step: 3, Entry: 10}
	tool := Intent{Kind: StepTool, Step: 4, Entry: 20, CallID: "c1"}
	put := func(es ...Entry) {
		for _, e := range es {
			e.Time = now
			leftover(t, s, ref, e)
		}
	}
	check := func(name string, p Intent, want int) {
		t.Helper()
		got, err := s.Stored(ctx, ref, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != want {
			t.Errorf("%s: %d entries found, want %d: %+v", name, len(got), want, got)
		}
	}
	check("nothing stored", model, 0)
	// A model settlement of three entries, cut after two.
	put(Entry{ID: 10, Kind: KindAssistant, Step: 3, Entries: 3}, Entry{ID: 11, Kind: KindToolCall, Step: 3, CallID: "a"})
	check("cut short", model, 0)
	// Its last entry, but written by another attempt.
	put(Entry{ID: 12, Kind: KindToolCall, Step: 3, Attempt: 1, CallID: "b"})
	check("mixed attempts", model, 0)
	check("another step's intent at the same id", Intent{Kind: StepModel, Step: 2, Entry: 10}, 0)
	check("a tool intent at a model head", Intent{Kind: StepTool, Step: 3, Entry: 10}, 0)
	check("whole head alone", Intent{Kind: StepModel, Step: 3, Entry: 11}, 0)
	put(Entry{ID: 20, Kind: KindToolResult, Step: 4, Entries: 1, CallID: "c1", Result: "done"})
	check("tool result", tool, 1)
	check("tool result of another call", Intent{Kind: StepTool, Step: 4, Entry: 20, CallID: "c2"}, 0)
	put(Entry{ID: 30, Kind: KindAssistant, Step: 5, Attempt: 2, Entries: 2}, Entry{ID: 31, Kind: KindToolCall, Step: 5, Attempt: 2, CallID: "x"})
	check("whole model settlement", Intent{Kind: StepModel, Step: 5, Entry: 30, Attempt: 2}, 2)
	if err := s.kv.Delete(ctx, s.names.LogKey(ref, 20)); err != nil {
		t.Fatal(err)
	}
	check("deleted tool result", tool, 0)
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

// hookKV runs after on every Get of the bucket, once the answer is in.
type hookKV struct {
	jetstream.KeyValue
	after func(key string)
}

func (h hookKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	e, err := h.KeyValue.Get(ctx, key)
	h.after(key)
	return e, err
}

// TestReplaceRacesSuccessorsAdoption replaces a leftover at a reserved id
// while a successor claims the session between the replacing writer's
// read of the state and its write: the successor adopts the leftover (a
// whole settlement of the intent, so it writes no entry) and names it in
// its state. The late replacement must lose: the entry the successor's
// state names stays the one it adopted.
func TestReplaceRacesSuccessorsAdoption(t *testing.T) {
	t.Run("R1", func(t *testing.T) { testReplaceRacesSuccessorsAdoption(t, testStore) })
	t.Run("R3", func(t *testing.T) { testReplaceRacesSuccessorsAdoption(t, testStoreR3) })
}

// claimAgain is a successor's claim of a session as the worker makes it:
// read the state and write it back with the next epoch, again when the
// read came from a replica behind the leader (on R3 a direct get may be
// answered by any replica), which shows as no state or as a revision the
// write is fenced at.
func claimAgain(ctx context.Context, s *Store, ref streams.SessionRef) (State, uint64, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		cur, rev, err := s.Load(ctx, ref)
		if err == nil {
			cur.Epoch++
			if rev, err = s.Update(ctx, ref, cur, rev); err == nil {
				return cur, rev, nil
			}
		}
		if !(errors.Is(err, ErrNotFound) || errors.Is(err, ErrFenced)) || time.Now().After(deadline) {
			return State{}, 0, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func testReplaceRacesSuccessorsAdoption(t *testing.T, open func(*testing.T) (*Store, streams.SessionRef)) {
	s, ref := open(t)
	ctx := context.Background()
	now := time.Now().UTC()
	st := NewState(ref.Agent, ref.Session, now)
	rev, err := s.Create(ctx, ref, st)
	if err != nil {
		t.Fatal(err)
	}
	// The late writer's state: a tool intent reserving entry 1.
	held := st.Clone()
	held.Pending = &Intent{Kind: StepTool, Step: 1, Entry: 1, CallID: "c1", Tool: "x", Replay: ReplaySafe, Owner: "late"}
	held.Calls = []CallRef{{ID: "c1", Name: "x"}}
	rev, err = s.Update(ctx, ref, held, rev)
	if err != nil {
		t.Fatal(err)
	}
	// An earlier writer's result of the same call, whole, no state names.
	older := Entry{ID: 1, Kind: KindToolResult, Name: "x", CallID: "c1", Result: "older", Step: 1, Entries: 1, Time: now}
	leftover(t, s, ref, older)

	successor, err := Open(ctx, s.js, s.names)
	if err != nil {
		t.Fatal(err)
	}
	var once bool
	var successorErr error
	settled := held.Clone()
	settled.Pending, settled.Calls, settled.Steps, settled.NextEntry = nil, nil, 1, 2
	settled.Owner = "successor"
	s.kv = hookKV{KeyValue: s.kv, after: func(key string) {
		if once || key != s.names.StateKey(ref) {
			return
		}
		once = true
		// The successor claims, finds the settlement stored whole, adopts.
		cur, crev, err := claimAgain(ctx, successor, ref)
		var stored []Entry
		if err == nil {
			stored, err = successor.Stored(ctx, ref, *cur.Pending)
		}
		if err == nil && len(stored) != 1 {
			err = fmt.Errorf("successor found %d stored entries, want 1", len(stored))
		}
		if err == nil {
			_, err = successor.Settle(ctx, ref, stored, settled, crev)
		}
		successorErr = err
	}}

	mine := Entry{ID: 1, Kind: KindToolResult, Name: "x", CallID: "c1", Result: "late", Step: 1, Entries: 1, Time: now}
	next := held.Clone()
	next.Pending, next.Calls, next.Steps, next.NextEntry = nil, nil, 1, 2
	_, lateErr := s.Settle(ctx, ref, []Entry{mine}, next, rev)
	if successorErr != nil {
		t.Fatalf("successor: %v", successorErr)
	}
	if !once {
		t.Fatal("the successor never ran: the late writer did not read the state")
	}
	if !errors.Is(lateErr, ErrFenced) {
		t.Errorf("late settlement: %v, want ErrFenced", lateErr)
	}
	got, grev, err := successor.Load(ctx, ref)
	if err != nil || got.Owner != "successor" || got.NextEntry != 2 {
		t.Fatalf("state %+v, %v: want the successor's settlement", got, err)
	}
	tr, err := successor.Entries(ctx, ref, got.NextEntry, grev)
	if err != nil || len(tr) != 1 {
		t.Fatalf("transcript %+v, %v", tr, err)
	}
	if tr[0].Result != "older" {
		t.Errorf("the successor's state names entry 1 = %q, the late writer's, not the %q it adopted", tr[0].Result, "older")
	}
}

// TestAdoptionReadBehindTheLeader settles over an entry whose direct
// gets are answered by a replica behind the leader (a direct get may be
// served by any replica): the leader holds a later replacement of the
// entry, which a writer made while the state was still at its revision.
// Stored reads the leader's version all the same. A writer that settles
// the earlier bytes must have its state name what it wrote, so its write
// of the entry is made although its read found the id taken by the same
// bytes. A writer that settles what Stored returned (the recovery's
// adoption) has its state name that, though its own reads of the id are
// stale.
func TestAdoptionReadBehindTheLeader(t *testing.T) {
	t.Run("settles the earlier bytes", func(t *testing.T) {
		adoptionBehind(t, func(older, _ Entry) Entry { return older })
	})
	t.Run("adopts what Stored returned", func(t *testing.T) {
		adoptionBehind(t, func(_, stored Entry) Entry { return stored })
	})
}

// adoptionBehind is TestAdoptionReadBehindTheLeader settling what pick
// takes of the earlier bytes and of what Stored returned.
func adoptionBehind(t *testing.T, pick func(older, stored Entry) Entry) {
	s, ref := testStore(t)
	ctx := context.Background()
	now := time.Now().UTC()
	st := NewState(ref.Agent, ref.Session, now)
	rev, err := s.Create(ctx, ref, st)
	if err != nil {
		t.Fatal(err)
	}
	held := st.Clone()
	held.Pending = &Intent{Kind: StepTool, Step: 1, Entry: 1, CallID: "c1", Tool: "x", Replay: ReplaySafe, Owner: "late"}
	held.Calls = []CallRef{{ID: "c1", Name: "x"}}
	if rev, err = s.Update(ctx, ref, held, rev); err != nil {
		t.Fatal(err)
	}
	older := Entry{ID: 1, Kind: KindToolResult, Name: "x", CallID: "c1", Result: "older", Step: 1, Entries: 1, Time: now}
	leftover(t, s, ref, older)
	key := s.names.LogKey(ref, 1)
	stale, err := s.kv.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// The writer at rev replaces it, then loses the session.
	late := Entry{ID: 1, Kind: KindToolResult, Name: "x", CallID: "c1", Result: "late", Step: 1, Entries: 1, Time: now}
	b, err := marshal(late)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.replace(ctx, ref, 1, b, rev, 0); err != nil {
		t.Fatal(err)
	}
	// The successor's reads of the entry come from a replica without the
	// replacement.
	successor, err := Open(ctx, s.js, s.names)
	if err != nil {
		t.Fatal(err)
	}
	successor.kv = behindKV{KeyValue: successor.kv, key: key, stale: stale}
	cur, crev, err := successor.Load(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	cur.Epoch++
	if crev, err = successor.Update(ctx, ref, cur, crev); err != nil {
		t.Fatal(err)
	}
	stored, err := successor.Stored(ctx, ref, *cur.Pending)
	if err != nil || len(stored) != 1 || stored[0].Result != "late" {
		t.Fatalf("stored %+v, %v: want the leader's %q", stored, err, "late")
	}
	next := cur.Clone()
	next.Pending, next.Calls, next.Steps, next.NextEntry = nil, nil, 1, 2
	settled := pick(older, stored[0])
	if _, err := successor.Settle(ctx, ref, []Entry{settled}, next, crev); err != nil {
		t.Fatal(err)
	}
	e, ok, err := s.entry(ctx, ref, 1)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if e.Result != settled.Result {
		t.Errorf("the state names entry 1 = %q, not the %q its settlement wrote", e.Result, settled.Result)
	}
}

// behindKV answers Get of key with stale, as a replica that has not yet
// applied the key's latest write: with no key when stale is nil (the
// replica has not applied its first).
type behindKV struct {
	jetstream.KeyValue
	key   string
	stale jetstream.KeyValueEntry
}

func (b behindKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if key == b.key && b.stale == nil {
		return nil, jetstream.ErrKeyNotFound
	}
	if key == b.key {
		return b.stale, nil
	}
	return b.KeyValue.Get(ctx, key)
}
