package policies

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Pinned is what a session records of the definition it runs on.
type Pinned struct {
	// Version is the agent's version number; 0 in a state written before
	// versions were numbered per agent, whose Revision alone names it.
	Version uint64 `json:"version,omitempty"`
	// Revision is the jl_agents revision the version was read from; 0 for
	// a session that has not run yet.
	Revision uint64 `json:"revision,omitempty"`
	// Rollout is the rollout that put the session on its canary; "" when
	// the session is not on a canary.
	Rollout string `json:"rollout,omitempty"`
}

// Resolution is the definition a session's next run uses.
type Resolution struct {
	// Compiled has Definition.Version and Definition.Revision set.
	Compiled *Compiled
	// Pinned is what the session records.
	Pinned Pinned
	// Moved says why the session changed version; "" when it keeps its
	// own or is new.
	Moved string
}

// Resolve returns the version a session's next run uses, by the rules of
// versions and rollouts:
//
//   - a new session (nothing pinned) gets the version that serves new
//     sessions: the newest, or during a rollout the canary or the stable
//     one by AssignsCanary;
//   - a session keeps the version it has, unless the version that would
//     serve it as a new session says apply_to_running;
//   - a session on a canary keeps it while the rollout lasts, and after
//     it is promoted as any session keeps its version; when the rollout ends otherwise (rolled back by hand or
//     by its guard, superseded) the session takes what serves new sessions
//     now, since a canary assignment is provisional;
//   - a session whose version the bucket's history no longer holds takes
//     what serves new sessions, and Moved says so.
//
// Every process resolves a session alike: the rules read only jl_agents
// and the session's own record.
func (s *Store) Resolve(ctx context.Context, agent, session string, cur Pinned) (Resolution, error) {
	key, err := s.names.AgentKey(agent)
	if err != nil {
		return Resolution{}, fmt.Errorf("policies: resolve %q: %w", agent, err)
	}
	headC, head, err := s.current(ctx, key)
	if err != nil {
		return Resolution{}, fmt.Errorf("policies: resolve %q: %w", agent, err)
	}
	assign := func() (Resolution, error) {
		r := head.Rollout
		if r == nil {
			return Resolution{Compiled: headC, Pinned: Pinned{Version: head.Version, Revision: head.Revision}}, nil
		}
		rev, id := r.StableRevision, ""
		if r.AssignsCanary(agent, session) {
			rev, id = r.CanaryRevision, r.ID
		}
		c, rec, err := s.compiledAt(ctx, key, rev)
		if err != nil {
			return Resolution{}, fmt.Errorf("policies: resolve %q: %s: %w", agent, r, err)
		}
		return Resolution{Compiled: c, Pinned: Pinned{Version: rec.Version, Revision: rec.Revision, Rollout: id}}, nil
	}
	if cur.Revision == 0 {
		return assign()
	}
	mineC, mine, err := s.compiledAt(ctx, key, cur.Revision)
	if err != nil {
		if !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrInvalid) {
			return Resolution{}, fmt.Errorf("policies: resolve %q: %w", agent, err)
		}
		res, aerr := assign()
		if aerr != nil {
			return Resolution{}, aerr
		}
		what := fmt.Sprintf("version %d", cur.Version)
		if cur.Version == 0 {
			what = fmt.Sprintf("revision %d", cur.Revision)
		}
		res.Moved = fmt.Sprintf("%s is no longer usable (%v); the session continues on version %d", what, err, res.Pinned.Version)
		return res, nil
	}
	keep := Resolution{Compiled: mineC, Pinned: Pinned{Version: mine.Version, Revision: mine.Revision, Rollout: cur.Rollout}}
	if cur.Rollout != "" {
		if r := head.Rollout; r != nil && r.ID == cur.Rollout {
			return keep, nil
		}
		h, err := s.loadHistory(ctx, key)
		if err != nil {
			return Resolution{}, fmt.Errorf("policies: resolve %q: %w", agent, err)
		}
		end, found := h.ended(cur.Rollout)
		if found && end.Outcome != RolloutPromoted {
			res, err := assign()
			if err != nil {
				return Resolution{}, err
			}
			if res.Pinned.Version != mine.Version {
				res.Moved = fmt.Sprintf("the rollout of canary version %d was %s (%s); the session continues on version %d",
					end.Canary, strings.ReplaceAll(end.Outcome, "_", " "), end.Reason, res.Pinned.Version)
			}
			return res, nil
		}
		// Promoted (or ended beyond the history kept): the session keeps
		// its version as any other session does, unless what serves now
		// applies to running sessions.
		keep.Pinned.Rollout = ""
	}
	res, err := assign()
	if err != nil {
		return Resolution{}, err
	}
	if res.Pinned.Version != mine.Version && res.Compiled.Definition.ApplyToRunning {
		res.Moved = fmt.Sprintf("version %d applies to running sessions; the session moves from version %d", res.Pinned.Version, mine.Version)
		return res, nil
	}
	return keep, nil
}

// compiledAt is the compiled entry of key at revision rev, numbered.
func (s *Store) compiledAt(ctx context.Context, key string, rev uint64) (*Compiled, Record, error) {
	e, err := s.kv.GetRevision(ctx, key, rev)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, Record{}, fmt.Errorf("revision %d: %w", rev, ErrNotFound)
	}
	if err != nil {
		return nil, Record{}, fmt.Errorf("revision %d: %w", rev, err)
	}
	if e.Operation() != jetstream.KeyValuePut {
		return nil, Record{}, fmt.Errorf("revision %d is a deletion: %w", rev, ErrNotFound)
	}
	c, rec, err := s.compileEntry(e)
	if err != nil {
		return nil, Record{}, fmt.Errorf("revision %d: %w", rev, err)
	}
	return s.numbered(ctx, key, c, rec)
}

// Pinned returns exactly the version a session recorded, for a run that
// goes on where another worker left it: a run never changes version
// mid-way. Only when the bucket's history no longer holds it (or nothing
// was recorded) does it resolve as Resolve does, with Moved saying so.
func (s *Store) Pinned(ctx context.Context, agent, session string, p Pinned) (Resolution, error) {
	if p.Revision == 0 {
		return s.Resolve(ctx, agent, session, p)
	}
	key, err := s.names.AgentKey(agent)
	if err != nil {
		return Resolution{}, fmt.Errorf("policies: %q revision %d: %w", agent, p.Revision, err)
	}
	c, rec, err := s.compiledAt(ctx, key, p.Revision)
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalid) {
		return s.Resolve(ctx, agent, session, p)
	}
	if err != nil {
		return Resolution{}, fmt.Errorf("policies: %q: %w", agent, err)
	}
	return Resolution{Compiled: c, Pinned: Pinned{Version: rec.Version, Revision: rec.Revision, Rollout: p.Rollout}}, nil
}
