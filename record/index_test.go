package record_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
)

func indexEnv(t *testing.T) (jetstream.JetStream, *record.Index) {
	t.Helper()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	x, err := record.OpenIndex(ctx, js, streams.Default())
	if err != nil {
		t.Fatal(err)
	}
	return js, x
}

func state(agent, session string, st record.Status, since time.Time) record.State {
	s := record.NewState(agent, session, since)
	s.Status, s.Since = st, since
	return s
}

func sessions(p record.Selection) []string {
	var out []string
	for _, s := range p.Sessions {
		out = append(out, s.Agent+"/"+s.Session+" "+string(s.Status))
	}
	return out
}

// TestIndexFollowsStatus moves sessions through statuses: each is listed
// under its current status only, by status and agent, with since; a
// listing pages by cursor; a stale key left by a crash is healed; removal
// drops the session.
func TestIndexFollowsStatus(t *testing.T) {
	js, x := indexEnv(t)
	ctx := context.Background()
	names := streams.Default()
	t0 := time.Now().UTC().Add(-time.Hour)
	for i := range 5 {
		if err := x.Set(ctx, "", state("a", fmt.Sprintf("s%d", i), record.StatusIdle, t0)); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.Set(ctx, "", state("b", "x", record.StatusIdle, t0)); err != nil {
		t.Fatal(err)
	}
	blocked := state("a", "s1", record.StatusBlocked, t0.Add(30*time.Minute))
	blocked.WaitingFor = "call_1"
	if err := x.Set(ctx, record.StatusIdle, blocked); err != nil {
		t.Fatal(err)
	}
	if err := x.Set(ctx, record.StatusIdle, state("b", "x", record.StatusBlocked, t0.Add(10*time.Minute))); err != nil {
		t.Fatal(err)
	}
	sel := func(q record.Query) []string {
		t.Helper()
		p, err := record.Select(ctx, js, names, q)
		if err != nil {
			t.Fatal(err)
		}
		return sessions(p)
	}
	if got := sel(record.Query{Status: record.StatusBlocked}); fmt.Sprint(got) != "[a/s1 blocked b/x blocked]" {
		t.Errorf("blocked: %v", got)
	}
	if got := sel(record.Query{Status: record.StatusBlocked, Agent: "b"}); fmt.Sprint(got) != "[b/x blocked]" {
		t.Errorf("blocked of b: %v", got)
	}
	if got := sel(record.Query{Status: record.StatusBlocked, Since: t0.Add(20 * time.Minute)}); fmt.Sprint(got) != "[a/s1 blocked]" {
		t.Errorf("blocked since: %v", got)
	}
	if got := sel(record.Query{Status: record.StatusIdle}); len(got) != 4 {
		t.Errorf("idle: %v", got)
	}
	// Paging through everything, two at a time.
	var all []string
	cursor := uint64(0)
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		p, err := record.Select(ctx, js, names, record.Query{Limit: 2, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, sessions(p)...)
		if p.Next == 0 {
			break
		}
		cursor = p.Next
	}
	if len(all) != 6 {
		t.Errorf("paged %d sessions: %v", len(all), all)
	}

	// A crash between the state write and the index: the old key stays
	// beside the new one until the session is taken again.
	kv, _ := js.KeyValue(ctx, names.BucketStatus())
	ref, _ := streams.NewSessionRef("a", "s2")
	stale, _ := names.StatusKey("working", ref)
	b, _ := json.Marshal(state("a", "s2", record.StatusWorking, t0))
	if _, err := kv.Put(ctx, stale, b); err != nil {
		t.Fatal(err)
	}
	if got := sel(record.Query{Agent: "a"}); len(got) != 6 {
		t.Fatalf("with the stale key: %v", got)
	}
	if err := x.Heal(ctx, state("a", "s2", record.StatusDone, t0)); err != nil {
		t.Fatal(err)
	}
	if got := sel(record.Query{Agent: "a"}); len(got) != 5 || fmt.Sprint(sel(record.Query{Status: record.StatusDone})) != "[a/s2 done]" {
		t.Errorf("healed: %v", got)
	}
	if err := x.Remove(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if got := sel(record.Query{Agent: "a"}); len(got) != 4 {
		t.Errorf("after removal: %v", got)
	}
	if _, err := record.Select(ctx, js, names, record.Query{Limit: record.MaxPage + 1}); err == nil {
		t.Error("a page over the maximum was served")
	}
}

// TestIndexBuildsFromStates indexes sessions whose states predate the
// index, once.
func TestIndexBuildsFromStates(t *testing.T) {
	js, x := indexEnv(t)
	ctx := context.Background()
	names := streams.Default()
	s, err := record.Open(ctx, js, names)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range []record.Status{record.StatusDone, record.StatusBlocked, record.StatusBlocked} {
		ref, _ := streams.NewSessionRef("old", fmt.Sprintf("s%d", i))
		if _, err := s.Create(ctx, ref, state("old", ref.Session, st, time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := x.Build(ctx, js); err != nil || n != 3 {
		t.Fatalf("build: %d, %v", n, err)
	}
	p, err := record.Select(ctx, js, names, record.Query{Status: record.StatusBlocked})
	if err != nil || len(p.Sessions) != 2 {
		t.Fatalf("blocked after the build: %v, %v", sessions(p), err)
	}
	if n, err := x.Build(ctx, js); err != nil || n != 0 {
		t.Errorf("second build: %d, %v", n, err)
	}
}

// A state written before versions were numbered per agent names its
// definition by jl_agents revision in definition_version: the index
// built from it lists that as the revision, not as a version number.
func TestIndexBuildsFromStatesWithoutVersionNumbers(t *testing.T) {
	js, x := indexEnv(t)
	ctx := context.Background()
	names := streams.Default()
	kv, err := js.KeyValue(ctx, names.BucketSessions())
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := streams.NewSessionRef("old", "s")
	old := `{"agent":"old","session":"s","status":"done","since":"2026-11-01T00:00:00Z","definition_version":17}`
	if _, err := kv.Put(ctx, names.StateKey(ref), []byte(old)); err != nil {
		t.Fatal(err)
	}
	if n, err := x.Build(ctx, js); err != nil || n != 1 {
		t.Fatalf("build: %d, %v", n, err)
	}
	p, err := record.Select(ctx, js, names, record.Query{Agent: "old"})
	if err != nil || len(p.Sessions) != 1 {
		t.Fatalf("select: %v, %v", sessions(p), err)
	}
	if s := p.Sessions[0]; s.DefinitionVersion != 0 || s.DefinitionRevision != 17 {
		t.Fatalf("indexed as version %d, revision %d; want revision 17 and no number", s.DefinitionVersion, s.DefinitionRevision)
	}
}

// TestSelectLeavesNoConsumer lists sessions again and again: each listing
// removes the consumer it read with, so listings never fill the status
// bucket's stream up to the server's limit of consumers a stream.
func TestSelectLeavesNoConsumer(t *testing.T) {
	js, x := indexEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := streams.Default()
	if err := x.Set(ctx, "", state("a", "s1", record.StatusWorking, time.Now())); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, streams.KVStream(names.BucketStatus()))
	if err != nil {
		t.Fatal(err)
	}
	before, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []record.Query{{}, {Agent: "a"}, {Status: record.StatusWorking}, {Limit: 1}} {
		if _, err := record.Select(ctx, js, names, q); err != nil {
			t.Fatalf("select %+v: %v", q, err)
		}
	}
	after, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.State.Consumers != before.State.Consumers {
		t.Errorf("%d consumers on %s after four listings, %d before", after.State.Consumers, streams.KVStream(names.BucketStatus()), before.State.Consumers)
	}
}
