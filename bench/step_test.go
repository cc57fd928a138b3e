package bench

import (
	"context"
	"testing"
	"time"

	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
)

// TestSettledWaitsForAReadBehind: the status change of a session is
// heard once the leader stored it, and a replica may answer the read that
// follows with the session not found, or with its state before: the
// step measurement reads again until the read shows the status heard.
func TestSettledWaitsForAReadBehind(t *testing.T) {
	ctx := context.Background()
	cfg := Config{}
	cfg.setDefaults()
	e, err := startEnv(ctx, cfg, t.TempDir(), SyncDefault)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	store, err := record.Open(ctx, e.js, e.names)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := streams.NewSessionRef("bench", "behind")
	// What a read behind answers: the session is not there yet, then it is
	// at the status before the change.
	written := make(chan error, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		now := time.Now().UTC()
		st := record.NewState(ref.Agent, ref.Session, now)
		st.SetStatus(record.StatusWorking, "", now)
		rev, err := store.Create(ctx, ref, st)
		if err != nil {
			written <- err
			return
		}
		time.Sleep(100 * time.Millisecond)
		st.SetStatus(record.StatusBudgetExceeded, "max_turns", now)
		_, err = store.Update(ctx, ref, st, rev)
		written <- err
	}()
	tr, st, err := settled(ctx, e, store, ref, record.StatusBudgetExceeded)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status != record.StatusBudgetExceeded || st.Status != record.StatusBudgetExceeded {
		t.Fatalf("read %s / %s, want %s", tr.Status, st.Status, record.StatusBudgetExceeded)
	}
	select {
	case err := <-written:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the state was not written")
	}
	// A read that never shows the status ends with an error naming it.
	settledWait = 300 * time.Millisecond
	t.Cleanup(func() { settledWait = 10 * time.Second })
	other, _ := streams.NewSessionRef("bench", "never")
	if _, _, err := settled(ctx, e, store, other, record.StatusBudgetExceeded); err == nil {
		t.Fatal("a session never written was read")
	}
}

// TestStepWritesPerTurn: what a turn of the step measurement's session
// (a model call answering with one tool call, then that call) makes
// JetStream store in jl_sessions beyond what its run stores once: five
// messages (the answer and its tool call, the state; the result, the
// state), whatever the number of turns. The raw pair of a step is two.
// (The writes of other streams, the lease's and the status index's, are
// made per run, and some of them as the worker starts and stops: the
// measurement reports them without this exactness.)
func TestStepWritesPerTurn(t *testing.T) {
	ctx := context.Background()
	cfg := Config{}
	cfg.setDefaults()
	e, err := startEnv(ctx, cfg, t.TempDir(), SyncDefault)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	// One session of 4 turns (8 steps), then one of 8.
	short, err := measureSteps(ctx, e, 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	long, err := measureSteps(ctx, e, 1, 16)
	if err != nil {
		t.Fatal(err)
	}
	if short.steps != 8 || long.steps != 16 {
		t.Fatalf("measured %d and %d steps, want 8 and 16", short.steps, long.steps)
	}
	const turns = 4
	if got := long.sessionWrites - short.sessionWrites; got != 5*turns {
		t.Errorf("jl_sessions writes: %d for 4 turns, %d for 8: %d more, want %d", short.sessionWrites, long.sessionWrites, got, 5*turns)
	}
}
