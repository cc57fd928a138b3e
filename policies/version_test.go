package policies_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
)

const agentYAML = `name: a
model: {provider: scripted, script: [{text: %q}]}
system: %s
triggers:
  - {name: req, when: 'event.type == "dev.jetloop.request"', session: event.subject}
%s`

func parse(t *testing.T, file, answer, system, extra string) *policies.Compiled {
	t.Helper()
	c, err := policies.Parse(file, []byte(fmt.Sprintf(agentYAML, answer, system, extra)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func apply(t *testing.T, st *policies.Store, c *policies.Compiled, opts ...policies.PutOption) policies.Applied {
	t.Helper()
	a, err := st.Apply(context.Background(), c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestApplyNumbersVersionsPerAgent(t *testing.T) {
	st, _ := newStore(t)
	ctx := context.Background()
	one := parse(t, "a.yaml", "one", "s", "")
	a1 := apply(t, st, one, policies.WithSource("a.yaml"), policies.WithAppliedBy("alice@box"))
	if !a1.Created || a1.Record.Version != 1 || a1.Record.AppliedBy != "alice@box" || a1.Record.Source != "a.yaml" || !strings.HasPrefix(a1.Record.Hash, "sha256:") {
		t.Fatalf("first apply: %+v", a1)
	}
	// The same file again creates no version.
	again := apply(t, st, parse(t, "a.yaml", "one", "s", ""), policies.WithAppliedBy("bob@box"))
	if again.Created || again.Changed || again.Record.Version != 1 || again.Record.AppliedBy != "alice@box" {
		t.Fatalf("second apply of one file: %+v", again)
	}
	// Another agent's versions start at 1 whatever the bucket's revision.
	other, err := st.Put(ctx, def("b", "true"))
	if err != nil || other != 1 {
		t.Fatalf("agent b: version %d (%v)", other, err)
	}
	a2 := apply(t, st, parse(t, "a.yaml", "two", "s", ""))
	if !a2.Created || a2.Record.Version != 2 || a2.Record.Revision <= a1.Record.Revision+1 {
		t.Fatalf("changed apply: %+v", a2)
	}
	vs, err := st.Versions(ctx, "a")
	if err != nil || len(vs) != 2 || vs[0].Version != 1 || vs[1].Version != 2 || vs[0].Hash == vs[1].Hash {
		t.Fatalf("versions: %+v %v", vs, err)
	}
	if _, err := st.Versions(ctx, "nobody"); !errors.Is(err, policies.ErrNotFound) {
		t.Fatalf("versions of an unknown agent: %v", err)
	}
	// A deleted agent applied again continues its numbers.
	if err := st.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, "a"); !errors.Is(err, policies.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if a3 := apply(t, st, parse(t, "a.yaml", "two", "s", "")); a3.Record.Version != 3 || !a3.Created {
		t.Fatalf("apply after delete: %+v", a3)
	}
}

// Entries stored before versions were numbered per agent carry no number:
// they are numbered from 1 and the next apply continues after them, and a
// session that recorded a revision still finds its definition.
func TestRecordsWithoutNumbersAreNumberedInOrder(t *testing.T) {
	st, js := newStore(t)
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, streams.Default().BucketAgents())
	if err != nil {
		t.Fatal(err)
	}
	var revs []uint64
	for _, when := range []string{"true", "false"} {
		rev, err := kv.Put(ctx, "a", []byte(`{"definition":{"name":"a","model":{"provider":"scripted"},"triggers":[{"name":"t","when":"`+when+`"}]},"source":"old.yaml","applied_at":"2025-01-01T00:00:00Z"}`))
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, rev)
	}
	got, err := st.Get(ctx, "a")
	if err != nil || got.Version != 2 || got.Revision != revs[1] {
		t.Fatalf("newest old entry: %+v %v", got, err)
	}
	v, err := st.Put(ctx, def("a", "event.id == 'x'"))
	if err != nil || v != 3 {
		t.Fatalf("first numbered apply: %d %v", v, err)
	}
	vs, err := st.Versions(ctx, "a")
	if err != nil || len(vs) != 3 || vs[0].Version != 1 || vs[0].Revision != revs[0] || vs[1].Version != 2 || vs[2].Version != 3 {
		t.Fatalf("versions: %+v %v", vs, err)
	}
	res, err := st.Resolve(ctx, "a", "s", policies.Pinned{Revision: revs[0]})
	if err != nil || res.Pinned.Version != 1 || res.Pinned.Revision != revs[0] || res.Compiled.Definition.Triggers[0].When != "true" || res.Moved != "" {
		t.Fatalf("a session on revision %d resolves %+v (%v)", revs[0], res, err)
	}
}

func TestRollbackIsANewVersionWithTheOldContent(t *testing.T) {
	st, _ := newStore(t)
	ctx := context.Background()
	apply(t, st, parse(t, "a.yaml", "one", "s", ""))
	apply(t, st, parse(t, "a.yaml", "two", "s", ""))
	a, err := st.Rollback(ctx, "a", 0, "carol@box")
	if err != nil {
		t.Fatal(err)
	}
	r := a.Record
	if !a.Created || r.Version != 3 || r.Restores != 1 || r.Change != policies.ChangeRollback || r.AppliedBy != "carol@box" || r.Definition.Model.Script[0].Text != "one" {
		t.Fatalf("rollback: %+v", a)
	}
	v1, _ := st.Version(ctx, "a", 1)
	if r.Hash != v1.Hash {
		t.Fatalf("rollback hash %s, version 1's %s", r.Hash, v1.Hash)
	}
	// What serves already is refused.
	if _, err := st.Rollback(ctx, "a", 1, ""); !errors.Is(err, policies.ErrConflict) {
		t.Fatalf("rollback to the serving content: %v", err)
	}
	if _, err := st.Rollback(ctx, "a", 7, ""); !errors.Is(err, policies.ErrNotFound) {
		t.Fatalf("rollback to version 7: %v", err)
	}
	if a, err := st.Rollback(ctx, "a", 2, ""); err != nil || a.Record.Version != 4 || a.Record.Restores != 2 {
		t.Fatalf("rollback to 2: %+v %v", a, err)
	}
	// Applying the same content as a file is what serves: no version.
	if a := apply(t, st, parse(t, "a.yaml", "two", "s", "")); a.Created || a.Record.Version != 4 {
		t.Fatalf("apply after rollback: %+v", a)
	}
}

func TestRolloutFromTheFile(t *testing.T) {
	st, js := newStore(t)
	ctx := context.Background()
	apply(t, st, parse(t, "a.yaml", "one", "s", ""))
	canary := parse(t, "a.yaml", "two", "s", "rollout: {version: 2, percent: 30, guard: {max_failure_rate: 0.2, min_runs: 5}}\n")
	a := apply(t, st, canary, policies.WithAppliedBy("dev"))
	r := a.Record.Rollout
	if !a.Created || a.Record.Version != 2 || r == nil || r.Canary != 2 || r.Stable != 1 || r.Percent != 30 || r.CanaryRevision != a.Record.Revision ||
		r.StableRevision == 0 || r.Guard == nil || r.Guard.MinRuns != 5 || r.StartedBy != "dev" || r.ID == "" {
		t.Fatalf("rollout apply: %+v rollout %+v", a, r)
	}
	if a.Record.Definition.Rollout != nil {
		t.Fatalf("the rollout instruction is stored as content: %+v", a.Record.Definition.Rollout)
	}
	// The same file again changes nothing; another percent changes the
	// rollout and not the version.
	if a := apply(t, st, parse(t, "a.yaml", "two", "s", "rollout: {version: 2, percent: 30, guard: {max_failure_rate: 0.2, min_runs: 5}}\n")); a.Changed {
		t.Fatalf("same rollout again: %+v", a)
	}
	b := apply(t, st, parse(t, "a.yaml", "two", "s", "rollout: {percent: 50}\n"))
	if b.Created || !b.Changed || b.Record.Version != 2 || b.Record.Rollout.Percent != 50 || b.Record.Rollout.ID != r.ID || b.Record.Rollout.Guard != nil ||
		b.Record.Change != policies.ChangeRollout {
		t.Fatalf("percent change: %+v", b)
	}
	// Without rollout the canary is promoted.
	p := apply(t, st, parse(t, "a.yaml", "two", "s", ""))
	if p.Created || p.Record.Rollout != nil || p.Record.Ended == nil || p.Record.Ended.Outcome != policies.RolloutPromoted || p.Record.Version != 2 {
		t.Fatalf("promote: %+v ended %+v", p, p.Record.Ended)
	}
	vs, _ := st.Versions(ctx, "a")
	if len(vs) != 2 {
		t.Fatalf("%d versions after rollout changes, want 2", len(vs))
	}
	evs, err := policies.Events(ctx, js, streams.Default(), "a", time.Now().Add(-time.Minute), 100)
	if err != nil || len(evs) != 4 {
		t.Fatalf("audit: %d events %v: %+v", len(evs), err, evs)
	}
	// The read removes the consumer it read with: the server keeps an
	// idle one for minutes and allows a stream only so many.
	if st, err := js.Stream(ctx, streams.Default().StreamAudit()); err != nil {
		t.Fatal(err)
	} else if info, err := st.Info(ctx); err != nil {
		t.Fatal(err)
	} else if info.State.Consumers != 0 {
		t.Fatalf("JL_AUDIT has %d consumers after a read of its events, want 0", info.State.Consumers)
	}
	if evs[1].Rollout == nil || !strings.Contains(evs[1].Summary, "canary v2 at 30% beside stable v1") || evs[3].Ended == nil || !strings.Contains(evs[3].Summary, "promoted") {
		t.Fatalf("audit events: %+v", evs)
	}
}

func TestRolloutRefusals(t *testing.T) {
	st, _ := newStore(t)
	ctx := context.Background()
	first := parse(t, "a.yaml", "one", "s", "rollout: {percent: 10}\n")
	_, err := st.Apply(ctx, first)
	if !errors.Is(err, policies.ErrInvalid) || !strings.Contains(err.Error(), "a.yaml:6:10: rollout: agent a has no version serving yet") {
		t.Fatalf("rollout of a first version: %v", err)
	}
	apply(t, st, parse(t, "a.yaml", "one", "s", ""))
	tests := []struct {
		name, answer, extra, want string
	}{
		{"version of another apply", "two", "rollout: {version: 7, percent: 10}\n", "a.yaml:6:20: rollout.version: 7: applying this file creates version 2"},
		{"unchanged content", "one", "rollout: {percent: 10}\n", "rollout: version 1 already serves every new session"},
		{"changed triggers", "two", "  - {name: more, when: 'true'}\nrollout: {percent: 10}\n", "a canary may not change triggers"},
		// Admission of user requests and retention read the newest
		// version for every session, not the canary's share.
		{"changed requests", "two", "requests: off\nrollout: {percent: 10}\n", "a canary may not change requests"},
		{"changed retention", "two", "retention: {max_age: 1h}\nrollout: {percent: 10}\n", "a canary may not change retention"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := st.Apply(ctx, parse(t, "a.yaml", tt.answer, "s", tt.extra))
			if !errors.Is(err, policies.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
		})
	}
	for _, bad := range []struct{ yaml, want string }{
		{"rollout: {percent: 100}\n", "rollout.percent: 100: a rollout serves less than 100%"},
		{"rollout: {percent: 0}\n", "rollout.percent: 0: want more than 0"},
		{"rollout: {percent: 10, guard: {max_failure_rate: 1.5}}\n", "rollout.guard.max_failure_rate: 1.5"},
		{"rollout: {percent: 10, guard: {min_runs: -1}}\n", "rollout.guard.min_runs: -1"},
		{"rollout: {percent: 10, gaurd: {}}\n", "gaurd"},
	} {
		_, err := policies.Parse("a.yaml", []byte(fmt.Sprintf(agentYAML, "x", "s", bad.yaml)))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: got %v, want %q", bad.yaml, err, bad.want)
		}
	}
	if vs, _ := st.Versions(ctx, "a"); len(vs) != 1 {
		t.Fatalf("refused applies stored versions: %+v", vs)
	}
}

func TestSetRollout(t *testing.T) {
	st, _ := newStore(t)
	ctx := context.Background()
	apply(t, st, parse(t, "a.yaml", "one", "s", ""))
	apply(t, st, parse(t, "a.yaml", "two", "s", ""))
	// Canary an older version beside the newest.
	a, err := st.SetRollout(ctx, "a", policies.RolloutChange{Version: 1, Percent: 10, Guard: &policies.Guard{MaxFailureRate: 0.1}}, "ops")
	if err != nil || a.Created || a.Record.Rollout == nil || a.Record.Rollout.Canary != 1 || a.Record.Rollout.Stable != 2 || a.Record.Version != 2 {
		t.Fatalf("start: %+v %v", a, err)
	}
	// Changing the percent keeps the rollout and its guard.
	b, err := st.SetRollout(ctx, "a", policies.RolloutChange{Version: 1, Percent: 20}, "ops")
	if err != nil || b.Record.Rollout.ID != a.Record.Rollout.ID || b.Record.Rollout.Percent != 20 || b.Record.Rollout.Guard == nil {
		t.Fatalf("change: %+v %v", b, err)
	}
	for _, c := range []struct {
		ch   policies.RolloutChange
		want error
	}{
		{policies.RolloutChange{Version: 2, Percent: 10}, policies.ErrConflict}, // the stable one
		{policies.RolloutChange{Version: 2, Percent: 0}, policies.ErrConflict},  // not the canary
		{policies.RolloutChange{Version: 9, Percent: 10}, policies.ErrNotFound},
		{policies.RolloutChange{Version: 1, Percent: 101}, policies.ErrInvalid},
		{policies.RolloutChange{Version: 1, Percent: 10, Guard: &policies.Guard{MaxFailureRate: -1}}, policies.ErrInvalid},
	} {
		if _, err := st.SetRollout(ctx, "a", c.ch, "ops"); !errors.Is(err, c.want) {
			t.Errorf("%+v: %v, want %v", c.ch, err, c.want)
		}
	}
	// Promoting the older canary makes its content the newest version.
	p, err := st.SetRollout(ctx, "a", policies.RolloutChange{Version: 1, Percent: 100}, "ops")
	if err != nil || !p.Created || p.Record.Version != 3 || p.Record.Restores != 1 || p.Record.Rollout != nil || p.Record.Ended.Outcome != policies.RolloutPromoted {
		t.Fatalf("promote: %+v %v", p, err)
	}
	// Percent 0 rolls back to the stable version.
	if _, err := st.SetRollout(ctx, "a", policies.RolloutChange{Version: 2, Percent: 5}, "ops"); err != nil {
		t.Fatal(err)
	}
	z, err := st.SetRollout(ctx, "a", policies.RolloutChange{Version: 2, Percent: 0}, "ops")
	if err != nil || z.Created || z.Record.Version != 3 || z.Record.Rollout != nil || z.Record.Ended.Outcome != policies.RolloutRolledBack {
		t.Fatalf("abort: %+v %v", z, err)
	}
}

// With percent 30 over 1,000 session names the split is within a few
// percent, and two processes (two stores on their own connections) agree
// on every session.
func TestRolloutAssignmentIsStableAcrossProcesses(t *testing.T) {
	s := natstest.RunServer(t)
	ctx := context.Background()
	var stores []*policies.Store
	for range 2 {
		_, js := natstest.Connect(t, s.ClientURL())
		if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
			t.Fatal(err)
		}
		st, err := policies.NewStore(ctx, js, streams.Default())
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, st)
	}
	apply(t, stores[0], parse(t, "a.yaml", "one", "s", ""))
	apply(t, stores[0], parse(t, "a.yaml", "two", "s", "rollout: {percent: 30}\n"))
	canary := 0
	for i := range 1000 {
		session := fmt.Sprintf("octo/repo#%d", i)
		var got [2]policies.Pinned
		for w, st := range stores {
			res, err := st.Resolve(ctx, "a", session, policies.Pinned{})
			if err != nil {
				t.Fatal(err)
			}
			got[w] = res.Pinned
		}
		if got[0] != got[1] {
			t.Fatalf("%s: the two processes resolve %+v and %+v", session, got[0], got[1])
		}
		if got[0].Version == 2 {
			canary++
			if got[0].Rollout == "" {
				t.Fatalf("%s is on the canary without its rollout recorded", session)
			}
		}
	}
	if canary < 260 || canary > 340 {
		t.Fatalf("%d of 1000 sessions on the canary at 30%%", canary)
	}
	// Raising the percent keeps every canary session on the canary.
	apply(t, stores[0], parse(t, "a.yaml", "two", "s", "rollout: {percent: 60}\n"))
	more := 0
	for i := range 1000 {
		res, _ := stores[1].Resolve(ctx, "a", fmt.Sprintf("octo/repo#%d", i), policies.Pinned{})
		if res.Pinned.Version == 2 {
			more++
		}
	}
	if more < 540 || more > 660 || more < canary {
		t.Fatalf("%d of 1000 on the canary at 60%% (%d at 30%%)", more, canary)
	}
}

func TestResolveKeepsSessionsOnTheirVersion(t *testing.T) {
	st, _ := newStore(t)
	ctx := context.Background()
	apply(t, st, parse(t, "a.yaml", "one", "s", ""))
	old, err := st.Resolve(ctx, "a", "running", policies.Pinned{})
	if err != nil || old.Pinned.Version != 1 {
		t.Fatalf("new session: %+v %v", old, err)
	}
	apply(t, st, parse(t, "a.yaml", "two", "s", ""))
	if res, _ := st.Resolve(ctx, "a", "running", old.Pinned); res.Pinned != old.Pinned || res.Compiled.Definition.Model.Script[0].Text != "one" {
		t.Fatalf("running session moved: %+v", res.Pinned)
	}
	if res, _ := st.Resolve(ctx, "a", "fresh", policies.Pinned{}); res.Pinned.Version != 2 {
		t.Fatalf("new session after apply: %+v", res.Pinned)
	}
	// A version that applies to running sessions moves them.
	apply(t, st, parse(t, "a.yaml", "three", "s", "apply_to_running: true\n"))
	if res, _ := st.Resolve(ctx, "a", "running", old.Pinned); res.Pinned.Version != 3 || res.Moved == "" {
		t.Fatalf("apply_to_running: %+v", res)
	}
}

func TestCanarySessionsReturnWhenTheRolloutIsRolledBack(t *testing.T) {
	st, _ := newStore(t)
	ctx := context.Background()
	apply(t, st, parse(t, "a.yaml", "one", "s", ""))
	apply(t, st, parse(t, "a.yaml", "two", "s", "rollout: {percent: 50}\n"))
	var onCanary, onStable policies.Resolution
	for i := 0; onCanary.Compiled == nil || onStable.Compiled == nil; i++ {
		res, err := st.Resolve(ctx, "a", fmt.Sprint(i), policies.Pinned{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Pinned.Version == 2 {
			onCanary = res
		} else {
			onStable = res
		}
	}
	if _, err := st.Rollback(ctx, "a", 0, "ops"); err != nil {
		t.Fatal(err)
	}
	res, err := st.Resolve(ctx, "a", "x", onCanary.Pinned)
	if err != nil || res.Pinned.Version != 3 || res.Pinned.Rollout != "" || !strings.Contains(res.Moved, "rolled back") || res.Compiled.Definition.Model.Script[0].Text != "one" {
		t.Fatalf("canary session after rollback: %+v %v", res, err)
	}
	if res, _ := st.Resolve(ctx, "a", "y", onStable.Pinned); res.Pinned != onStable.Pinned {
		t.Fatalf("stable session after rollback: %+v", res.Pinned)
	}
	// After a promotion a canary session keeps its version for good.
	apply(t, st, parse(t, "a.yaml", "four", "s", "rollout: {percent: 50}\n"))
	for i := 0; ; i++ {
		res, _ := st.Resolve(ctx, "a", fmt.Sprint(i), policies.Pinned{})
		if res.Pinned.Version == 4 {
			onCanary = res
			break
		}
	}
	apply(t, st, parse(t, "a.yaml", "four", "s", ""))
	apply(t, st, parse(t, "a.yaml", "five", "s", ""))
	if res, _ := st.Resolve(ctx, "a", "z", onCanary.Pinned); res.Pinned.Version != 4 || res.Pinned.Rollout != "" || res.Moved != "" {
		t.Fatalf("canary session after promotion and a newer version: %+v", res)
	}
}

func TestGuardRollsBackAFailingCanary(t *testing.T) {
	st, js := newStore(t)
	ctx := context.Background()
	apply(t, st, parse(t, "a.yaml", "one", "s", ""))
	apply(t, st, parse(t, "a.yaml", "two", "s", "rollout: {percent: 20, guard: {max_failure_rate: 0.2, min_runs: 5}}\n"))
	for range 10 {
		if rr, err := st.RecordRun(ctx, "a", 1, false); err != nil || !rr.Counted || rr.RolledBack != nil {
			t.Fatalf("stable run: %+v %v", rr, err)
		}
	}
	// Runs of other versions count for nothing.
	if rr, _ := st.RecordRun(ctx, "a", 7, true); rr.Counted {
		t.Fatal("a run of version 7 was counted")
	}
	var last policies.RunRecorded
	for i := range 5 {
		rr, err := st.RecordRun(ctx, "a", 2, true)
		if err != nil {
			t.Fatal(err)
		}
		if (rr.RolledBack != nil) != (i == 4) {
			t.Fatalf("canary run %d: rolled back %v", i+1, rr.RolledBack != nil)
		}
		last = rr
	}
	rb := last.RolledBack.Record
	if rb.Version != 3 || rb.Restores != 1 || rb.Rollout != nil || rb.Ended == nil || rb.Ended.Outcome != policies.RolloutRolledBack || rb.Ended.By != policies.GuardBy ||
		rb.Ended.CanaryRuns.Failed != 5 || rb.Ended.StableRuns.Runs != 10 || !strings.Contains(rb.Ended.Reason, "failed 5 of 5 runs") {
		t.Fatalf("guard rollback: %+v ended %+v", rb, rb.Ended)
	}
	// The stable content serves new sessions again; later runs count for
	// nothing.
	if res, _ := st.Resolve(ctx, "a", "new", policies.Pinned{}); res.Pinned.Version != 3 || res.Compiled.Definition.Model.Script[0].Text != "one" {
		t.Fatalf("after the guard: %+v", res.Pinned)
	}
	if rr, _ := st.RecordRun(ctx, "a", 2, true); rr.Counted || rr.RolledBack != nil {
		t.Fatalf("run after the rollback: %+v", rr)
	}
	evs, err := policies.Events(ctx, js, streams.Default(), "", time.Now().Add(-time.Minute), 10)
	if err != nil || len(evs) != 3 || evs[2].Ended == nil || evs[2].Ended.CanaryRuns == nil || evs[2].By != policies.GuardBy {
		t.Fatalf("audit: %+v %v", evs, err)
	}
}

func TestGuardJudge(t *testing.T) {
	no := false
	tests := []struct {
		name           string
		g              policies.Guard
		canary, stable policies.RunCounts
		trip           bool
	}{
		{"too few runs", policies.Guard{MinRuns: 20}, policies.RunCounts{Runs: 19, Failed: 19}, policies.RunCounts{Runs: 100}, false},
		{"below the rate", policies.Guard{MaxFailureRate: 0.5, MinRuns: 10}, policies.RunCounts{Runs: 10, Failed: 5}, policies.RunCounts{Runs: 100}, false},
		{"measurably worse", policies.Guard{MaxFailureRate: 0.1, MinRuns: 10}, policies.RunCounts{Runs: 20, Failed: 8}, policies.RunCounts{Runs: 100, Failed: 5}, true},
		{"as bad as stable", policies.Guard{MaxFailureRate: 0.1, MinRuns: 10}, policies.RunCounts{Runs: 20, Failed: 6}, policies.RunCounts{Runs: 100, Failed: 30}, false},
		{"not compared", policies.Guard{MaxFailureRate: 0.1, MinRuns: 10, CompareToStable: &no}, policies.RunCounts{Runs: 20, Failed: 6}, policies.RunCounts{Runs: 100, Failed: 30}, true},
		{"no stable runs", policies.Guard{MinRuns: 5}, policies.RunCounts{Runs: 5, Failed: 5}, policies.RunCounts{}, true},
		{"default min runs", policies.Guard{}, policies.RunCounts{Runs: 19, Failed: 19}, policies.RunCounts{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if trip, why := tt.g.Judge(tt.canary, tt.stable); trip != tt.trip || trip && why == "" {
				t.Fatalf("judge: %v %q", trip, why)
			}
		})
	}
}

// A session that was on a canary keeps its version after the promotion,
// but a later version that says apply_to_running moves it as it moves
// every other session.
func TestApplyToRunningMovesAPromotedCanarySession(t *testing.T) {
	st, _ := newStore(t)
	ctx := context.Background()
	apply(t, st, parse(t, "a.yaml", "one", "s", ""))
	apply(t, st, parse(t, "a.yaml", "two", "s", "rollout: {percent: 50}\n"))
	var onCanary policies.Resolution
	for i := 0; onCanary.Compiled == nil; i++ {
		res, err := st.Resolve(ctx, "a", fmt.Sprint(i), policies.Pinned{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Pinned.Rollout != "" {
			onCanary = res
		}
	}
	apply(t, st, parse(t, "a.yaml", "two", "s", "")) // promoted
	if res, _ := st.Resolve(ctx, "a", "c", onCanary.Pinned); res.Pinned.Version != 2 || res.Moved != "" {
		t.Fatalf("canary session after the promotion: %+v", res)
	}
	apply(t, st, parse(t, "a.yaml", "three", "s", "apply_to_running: true\n"))
	res, err := st.Resolve(ctx, "a", "c", onCanary.Pinned)
	if err != nil || res.Pinned.Version != 3 || res.Pinned.Rollout != "" || !strings.Contains(res.Moved, "applies to running sessions") {
		t.Fatalf("promoted canary session after an apply_to_running version: %+v %v", res, err)
	}
}

// A writer killed between storing a change in jl_agents and recording it
// in JL_AUDIT leaves the change unrecorded: the next change of the agent,
// or a reader through CatchUpAudit, records it, once.
func TestAChangeWhoseRecordWasLostIsRecordedLater(t *testing.T) {
	st, js := newStore(t)
	ctx := context.Background()
	a1 := apply(t, st, parse(t, "a.yaml", "one", "s", ""))
	// What a writer stores and then dies before recording: version 2.
	kv, err := js.KeyValue(ctx, streams.Default().BucketAgents())
	if err != nil {
		t.Fatal(err)
	}
	two := parse(t, "a.yaml", "two", "s", "").Definition
	lost := policies.Record{Definition: two, Version: 2, Hash: policies.ContentHash(two), Source: "a.yaml", AppliedBy: "dead@box",
		AppliedAt: time.Now().UTC(), Change: policies.ChangeApply}
	b, _ := json.Marshal(lost)
	if _, err := kv.Update(ctx, "a", b, a1.Record.Revision); err != nil {
		t.Fatal(err)
	}
	events := func() []policies.Event {
		t.Helper()
		evs, err := policies.Events(ctx, js, streams.Default(), "a", time.Now().Add(-time.Minute), 100)
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	if evs := events(); len(evs) != 1 {
		t.Fatalf("before the catch-up: %d events, want 1 (the lost one is not recorded): %+v", len(evs), evs)
	}
	// A reader catches up, once however often it asks.
	for range 2 {
		if err := st.CatchUpAudit(ctx, "a"); err != nil {
			t.Fatal(err)
		}
	}
	evs := events()
	if len(evs) != 2 || evs[1].Version != 2 || evs[1].By != "dead@box" || !evs[1].Created || evs[1].Change != policies.ChangeApply {
		t.Fatalf("after the reader's catch-up: %+v", evs)
	}
	// The next change records a lost change before its own.
	three := parse(t, "a.yaml", "three", "s", "").Definition
	lost = policies.Record{Definition: three, Version: 3, Hash: policies.ContentHash(three), AppliedBy: "dead@box",
		AppliedAt: time.Now().UTC(), Change: policies.ChangeApply}
	b, _ = json.Marshal(lost)
	e, err := kv.Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(ctx, "a", b, e.Revision()); err != nil {
		t.Fatal(err)
	}
	apply(t, st, parse(t, "a.yaml", "four", "s", ""))
	evs = events()
	if len(evs) != 4 || evs[2].Version != 3 || evs[3].Version != 4 {
		t.Fatalf("after the next change: %+v", evs)
	}
}

// A rollout changed often (a ramp in small steps) must not push the
// entries of its stable and canary versions out of jl_agents' history:
// new sessions resolve through them. The change that would is refused,
// and the rollout goes on serving.
func TestRolloutChangesKeepItsVersionsInTheHistory(t *testing.T) {
	st, _ := newStore(t)
	ctx := context.Background()
	apply(t, st, parse(t, "a.yaml", "one", "s", ""))
	apply(t, st, parse(t, "a.yaml", "two", "s", "rollout: {percent: 1}\n"))
	var refused error
	for p := 2; p < 99 && refused == nil; p++ {
		_, refused = st.SetRollout(ctx, "a", policies.RolloutChange{Version: 2, Percent: float64(p) / 1.5}, "ramp")
	}
	if !errors.Is(refused, policies.ErrConflict) || !strings.Contains(refused.Error(), "history") {
		t.Fatalf("a ramp of 97 steps: %v, want a conflict naming the history", refused)
	}
	for i := range 50 {
		if _, err := st.Resolve(ctx, "a", fmt.Sprint(i), policies.Pinned{}); err != nil {
			t.Fatalf("new session %d after the ramp: %v", i, err)
		}
	}
	// A file's percent change is held to the same bound.
	if _, err := st.Apply(ctx, parse(t, "a.yaml", "two", "s", "rollout: {percent: 70}\n")); !errors.Is(err, policies.ErrInvalid) || !strings.Contains(err.Error(), "history") {
		t.Fatalf("apply of another percent: %v", err)
	}
	// Promoting or rolling back still works.
	if a, err := st.SetRollout(ctx, "a", policies.RolloutChange{Version: 2, Percent: 0}, "ops"); err != nil || a.Record.Rollout != nil {
		t.Fatalf("roll back after the ramp: %+v %v", a, err)
	}
}

// A guard given with percent 0 or 100, which end the rollout, would have
// no effect: it is refused, and nothing changes.
func TestSetRolloutRefusesAGuardThatEndsWithIt(t *testing.T) {
	st, _ := newStore(t)
	ctx := context.Background()
	apply(t, st, parse(t, "a.yaml", "one", "s", ""))
	apply(t, st, parse(t, "a.yaml", "two", "s", "rollout: {percent: 10}\n"))
	for _, ch := range []policies.RolloutChange{
		{Version: 2, Percent: 100, Guard: &policies.Guard{MinRuns: 5}},
		{Version: 2, Percent: 0, Guard: &policies.Guard{MinRuns: 5}},
		{Version: 2, Percent: 100, ClearGuard: true},
		{Version: 2, Percent: 20, Guard: &policies.Guard{MinRuns: 5}, ClearGuard: true},
	} {
		if _, err := st.SetRollout(ctx, "a", ch, "ops"); !errors.Is(err, policies.ErrInvalid) || !strings.Contains(err.Error(), "guard") {
			t.Errorf("%+v: %v, want a refusal naming the guard", ch, err)
		}
	}
	if es, _ := st.Entries(ctx, "a"); len(es) != 2 || es[1].Rollout == nil {
		t.Fatalf("refused changes changed the rollout: %+v", es)
	}
}
