package policies

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/streams"
)

// GuardBy is who ends a rollout that its guard rolled back.
const GuardBy = "guard"

// RolloutCounts are the finished runs of a rollout's canary and stable
// versions, counted by every worker in jl_rollouts since the first run
// after the rollout started.
type RolloutCounts struct {
	Rollout string `json:"rollout"`
	// Started is when the rollout started: counts of an earlier rollout
	// are replaced, those of a later one are never.
	Started time.Time `json:"rollout_started,omitzero"`
	Since   time.Time `json:"since"`
	Canary  RunCounts `json:"canary"`
	Stable  RunCounts `json:"stable"`
}

// RunRecorded is what RecordRun did.
type RunRecorded struct {
	// Counted is set when the run belonged to the canary or the stable
	// version of the rollout in force.
	Counted bool
	Counts  RolloutCounts
	// RolledBack is set when this run made the guard end the rollout:
	// the change, and the guard's finding.
	RolledBack *Applied
	Reason     string
}

func (s *Store) countersKV(ctx context.Context) (jetstream.KeyValue, error) {
	s.mu.Lock()
	kv := s.counters
	s.mu.Unlock()
	if kv != nil {
		return kv, nil
	}
	kv, err := s.js.KeyValue(ctx, s.names.BucketRollouts())
	if err != nil {
		return nil, fmt.Errorf("policies: open bucket %s: %w", s.names.BucketRollouts(), err)
	}
	s.mu.Lock()
	s.counters = kv
	s.mu.Unlock()
	return kv, nil
}

// RecordRun counts a finished run of the agent's version for the rollout
// in force (a run of any other version, or with no rollout, counts for
// nothing) and lets the rollout's guard judge: when the canary fails
// measurably more than the stable version, the rollout ends as rolled
// back, with the figures, and the stable version's content serves every
// new session again. Every worker counts on the same key with
// compare-and-set, so the guard sees the runs of all of them; a run is
// counted at most once (a worker that dies between the run's end and its
// count loses that one).
func (s *Store) RecordRun(ctx context.Context, agent string, version uint64, failed bool) (RunRecorded, error) {
	key, err := s.names.AgentKey(agent)
	if err != nil {
		return RunRecorded{}, fmt.Errorf("policies: record run of %q: %w", agent, err)
	}
	_, head, err := s.current(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return RunRecorded{}, nil
	}
	if err != nil {
		return RunRecorded{}, fmt.Errorf("policies: record run of %q: %w", agent, err)
	}
	r := head.Rollout
	if r == nil || (version != r.Canary && version != r.Stable) {
		return RunRecorded{}, nil
	}
	counts, err := s.count(ctx, agent, *r, version == r.Canary, failed)
	if errors.Is(err, errLaterRollout) {
		return RunRecorded{}, nil
	}
	if err != nil {
		return RunRecorded{}, fmt.Errorf("policies: record run of %q: %w", agent, err)
	}
	out := RunRecorded{Counted: true, Counts: counts}
	if r.Guard == nil {
		return out, nil
	}
	trip, why := r.Guard.Judge(counts.Canary, counts.Stable)
	if !trip {
		return out, nil
	}
	a, err := s.mutate(ctx, agent, func(st agentState, now time.Time) (*Record, error) {
		cur := st.head
		if cur == nil || cur.Rollout == nil || cur.Rollout.ID != r.ID {
			return nil, nil // ended already, by another worker or by hand
		}
		end := ending(cur.Rollout, RolloutRolledBack, "guard: "+why, GuardBy, now)
		c, stb := counts.Canary, counts.Stable
		end.CanaryRuns, end.StableRuns = &c, &stb
		return st.restore(cur.Rollout.Stable, end, GuardBy, now)
	})
	if err != nil {
		return out, fmt.Errorf("policies: roll back %q by its guard: %w", agent, err)
	}
	if a.Changed {
		out.RolledBack, out.Reason = &a, why
	}
	return out, nil
}

// errLaterRollout: the counts belong to a rollout that started after the
// one a run was counted for, which has ended since it was read.
var errLaterRollout = errors.New("the counts belong to a later rollout")

// count adds one run to the rollout's counts, starting them afresh when
// they belong to an earlier rollout; when they belong to a later one
// (r ended after the caller read it) it counts nothing and returns
// errLaterRollout.
func (s *Store) count(ctx context.Context, agent string, r Rollout, canary, failed bool) (RolloutCounts, error) {
	kv, err := s.countersKV(ctx)
	if err != nil {
		return RolloutCounts{}, err
	}
	key, err := s.names.RolloutKey(agent)
	if err != nil {
		return RolloutCounts{}, err
	}
	for attempt := 0; ; attempt++ {
		var c RolloutCounts
		var rev uint64
		e, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return RolloutCounts{}, fmt.Errorf("read %s: %w", s.names.BucketRollouts(), err)
		default:
			rev = e.Revision()
			if json.Unmarshal(e.Value(), &c) != nil {
				c = RolloutCounts{}
			}
		}
		if c.Rollout != r.ID {
			if c.Rollout != "" && c.Started.After(r.Started) {
				return RolloutCounts{}, errLaterRollout
			}
			c = RolloutCounts{Rollout: r.ID, Started: r.Started, Since: s.now().UTC(), Canary: RunCounts{Version: r.Canary}, Stable: RunCounts{Version: r.Stable}}
		}
		side := &c.Stable
		if canary {
			side = &c.Canary
		}
		side.Runs++
		if failed {
			side.Failed++
		}
		val, _ := json.Marshal(c)
		if rev == 0 {
			_, err = kv.Create(ctx, key, val)
		} else {
			_, err = kv.Update(ctx, key, val, rev)
		}
		if err == nil {
			return c, nil
		}
		if !streams.IsConflict(err) || attempt >= 20 {
			return RolloutCounts{}, fmt.Errorf("write %s: %w", s.names.BucketRollouts(), err)
		}
		pause := time.Millisecond << min(attempt, 6)
		t := time.NewTimer(pause/2 + rand.N(pause))
		select {
		case <-ctx.Done():
			t.Stop()
			return RolloutCounts{}, ctx.Err()
		case <-t.C:
		}
	}
}

// Counts returns the run counts of the agent's rollout in force; ok is
// false when none is in force or none of its runs was counted yet.
func (s *Store) Counts(ctx context.Context, agent string) (RolloutCounts, bool, error) {
	_, head, err := s.GetCompiled(ctx, agent)
	if err != nil {
		return RolloutCounts{}, false, err
	}
	if head.Rollout == nil {
		return RolloutCounts{}, false, nil
	}
	kv, err := s.countersKV(ctx)
	if err != nil {
		return RolloutCounts{}, false, err
	}
	key, err := s.names.RolloutKey(agent)
	if err != nil {
		return RolloutCounts{}, false, err
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return RolloutCounts{}, false, nil
	}
	if err != nil {
		return RolloutCounts{}, false, fmt.Errorf("policies: read %s: %w", s.names.BucketRollouts(), err)
	}
	var c RolloutCounts
	if err := json.Unmarshal(e.Value(), &c); err != nil || c.Rollout != head.Rollout.ID {
		return RolloutCounts{}, false, nil
	}
	return c, true, nil
}
