package policies

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/streams"
)

// PutOption adjusts an apply.
type PutOption func(*putOpts)

type putOpts struct{ source, by string }

// WithSource records the file a definition was applied from.
func WithSource(file string) PutOption { return func(o *putOpts) { o.source = file } }

// WithAppliedBy records who applied a definition.
func WithAppliedBy(who string) PutOption { return func(o *putOpts) { o.by = who } }

// Applied is what a change of an agent's definitions did.
type Applied struct {
	Agent string `json:"agent"`
	// Record is the agent's newest entry after the change (the one it
	// wrote, or the one that already held the content).
	Record Record `json:"record"`
	// Created is set when a new version was stored; Changed when any entry
	// was written (a new version, or a change of the rollout alone).
	Created bool `json:"created,omitempty"`
	Changed bool `json:"changed,omitempty"`
}

// Put checks d (Check) and stores it as the agent's newest version, returning
// that version's number. A definition equal to the newest stored one is
// not stored again: its number is returned. An invalid definition, or
// one whose MCP servers' catalogs were not recorded (see CheckCatalogs),
// is refused with an error wrapping ErrInvalid and nothing is written.
func (s *Store) Put(ctx context.Context, d Definition, opts ...PutOption) (uint64, error) {
	d.Version, d.Revision = 0, 0
	c, err := Check(d)
	if err != nil {
		return 0, err
	}
	a, err := s.Apply(ctx, c, opts...)
	if err != nil {
		return 0, err
	}
	return a.Record.Version, nil
}

// Apply stores a compiled definition as the agent's next version (1, 2,
// 3 …), unless its content equals the newest version's. Its rollout, if
// any, makes the new version a canary beside the version serving now;
// without one the new version serves every new session and a rollout in
// force ends. Applying the canary's content again with another rollout
// changes the rollout, and without one promotes the canary. A rollout that
// cannot start, and MCP servers without a recorded catalog, are refused
// with an *Error naming the field.
func (s *Store) Apply(ctx context.Context, c *Compiled, opts ...PutOption) (Applied, error) {
	if err := c.checkCatalogs(); err != nil {
		return Applied{}, err
	}
	return s.mutate(ctx, c.Definition.Name, s.applying(c, opts))
}

// checkCatalogs is CheckCatalogs with the problems placed in c's file.
func (c *Compiled) checkCatalogs() error {
	err := CheckCatalogs(c.Definition)
	for _, e := range Errors(err) {
		e.File = c.file
		e.Line, e.Column = c.Position(e.Field)
	}
	return err
}

// CheckApply reports what Apply would refuse now (a rollout that cannot
// start, MCP servers without a recorded catalog), writing nothing, so that a set of files can be checked whole
// before any is stored.
func (s *Store) CheckApply(ctx context.Context, c *Compiled) error {
	if err := c.checkCatalogs(); err != nil {
		return err
	}
	st, err := s.state(ctx, c.Definition.Name)
	if err != nil {
		return fmt.Errorf("policies: %q: %w", c.Definition.Name, err)
	}
	_, err = s.applying(c, nil)(st, s.now().UTC())
	return err
}

// applying decides what applying c writes.
func (s *Store) applying(c *Compiled, opts []PutOption) func(agentState, time.Time) (*Record, error) {
	var o putOpts
	for _, f := range opts {
		f(&o)
	}
	spec := c.Definition.Rollout
	d := content(c.Definition)
	hash := ContentHash(d)
	return func(st agentState, now time.Time) (*Record, error) {
		head := st.head
		if spec != nil && head == nil {
			return nil, c.fieldError("rollout", fmt.Errorf("agent %s has no version serving yet: apply it without rollout first", d.Name))
		}
		if head != nil && head.Hash == hash {
			return s.reapply(c, st, spec, o, now)
		}
		out := Record{Definition: d, Version: st.h.last + 1, Hash: hash, Source: o.source, AppliedBy: o.by, AppliedAt: now, Change: ChangeApply}
		var prev *Rollout
		if head != nil {
			prev = head.Rollout
		}
		if spec == nil {
			if prev != nil {
				out.Ended = ending(prev, RolloutSuperseded, fmt.Sprintf("version %d applied without rollout", out.Version), o.by, now)
			}
			return &out, nil
		}
		if spec.Version != 0 && spec.Version != out.Version {
			return nil, c.fieldError("rollout.version", fmt.Errorf("%d: applying this file creates version %d (to canary an existing version: jetloop agents rollout %s --version %d --percent P)",
				spec.Version, out.Version, d.Name, spec.Version))
		}
		stable, err := st.stable()
		if err != nil {
			return nil, c.fieldError("rollout", err)
		}
		if stable.Hash == hash {
			return nil, c.fieldError("rollout", fmt.Errorf("this is the content of stable version %d: a canary must differ from it", stable.Version))
		}
		if err := sameAdmission(stable.Definition, d); err != nil {
			return nil, c.fieldError("rollout", fmt.Errorf("stable version %d: %w", stable.Version, err))
		}
		out.Rollout = &Rollout{ID: newRolloutID(), Stable: stable.Version, StableRevision: stable.Revision, Canary: out.Version,
			Percent: spec.Percent, Guard: spec.Guard, Started: now, StartedBy: o.by, Changed: now}
		if prev != nil {
			out.Ended = ending(prev, RolloutSuperseded, fmt.Sprintf("version %d became the canary", out.Version), o.by, now)
		}
		return &out, nil
	}
}

// reapply is Apply of the content of the newest version: no version is
// created, but the file's rollout (or its absence) may change the
// rollout in force.
func (s *Store) reapply(c *Compiled, st agentState, spec *RolloutSpec, o putOpts, now time.Time) (*Record, error) {
	head := *st.head
	r := head.Rollout
	switch {
	case spec == nil && r == nil:
		return nil, nil
	case spec == nil:
		// The file serves every new session: the rollout ends.
		outcome, why := RolloutSuperseded, fmt.Sprintf("version %d applied without rollout", head.Version)
		switch head.Version {
		case r.Canary:
			outcome, why = RolloutPromoted, fmt.Sprintf("canary version %d applied without rollout", head.Version)
		case r.Stable:
			outcome, why = RolloutRolledBack, fmt.Sprintf("stable version %d applied without rollout", head.Version)
		}
		out := st.repeat(now, o.by)
		out.Rollout = nil
		out.Ended = ending(r, outcome, why, o.by, now)
		return &out, nil
	case r == nil:
		return nil, c.fieldError("rollout", fmt.Errorf("version %d already serves every new session: a rollout needs a changed definition", head.Version))
	case r.Canary != head.Version:
		return nil, c.fieldError("rollout", fmt.Errorf("version %d is not the canary of the rollout in force (%s)", head.Version, r))
	case spec.Version != 0 && spec.Version != head.Version:
		return nil, c.fieldError("rollout.version", fmt.Errorf("%d: this file is version %d", spec.Version, head.Version))
	case r.Percent == spec.Percent && guardEqual(r.Guard, spec.Guard):
		return nil, nil
	}
	out := st.repeat(now, o.by)
	nr := *r
	nr.Percent, nr.Guard, nr.Changed = spec.Percent, spec.Guard, now
	if err := st.keeps(&nr); err != nil {
		return nil, c.fieldError("rollout", err)
	}
	out.Rollout = &nr
	return &out, nil
}

// Rollback stores the content of version to as the agent's next version,
// so new sessions behave as they did under it; running sessions keep the
// version they run (unless it says apply_to_running). With to 0 it is the
// stable version of the rollout in force, else the version before the
// newest. A rollout in force ends as rolled back. Content that already
// serves is refused with ErrConflict.
func (s *Store) Rollback(ctx context.Context, agent string, to uint64, by string) (Applied, error) {
	return s.mutate(ctx, agent, func(st agentState, now time.Time) (*Record, error) {
		head := st.head
		if head == nil {
			return nil, fmt.Errorf("policies: rollback %q: %w", agent, ErrNotFound)
		}
		r := head.Rollout
		if to == 0 {
			switch {
			case r != nil:
				to = r.Stable
			case head.Version > 1:
				to = head.Version - 1
			default:
				return nil, fmt.Errorf("policies: rollback %q: version %d is the first: nothing to roll back to: %w", agent, head.Version, ErrConflict)
			}
		}
		var end *RolloutEnd
		if r != nil {
			outcome := RolloutRolledBack
			if to == r.Canary {
				outcome = RolloutPromoted
			}
			end = ending(r, outcome, fmt.Sprintf("rolled back to version %d", to), by, now)
		}
		rec, err := st.restore(to, end, by, now)
		if err != nil {
			return nil, fmt.Errorf("policies: rollback %q: %w", agent, err)
		}
		return rec, nil
	})
}

// RolloutChange is a change of an agent's rollout by hand.
type RolloutChange struct {
	// Version is the canary.
	Version uint64 `json:"version"`
	// Percent of new sessions it serves: 0 ends the rollout rolling back
	// to the stable version, 100 promotes the canary to every new session,
	// anything between starts or changes the rollout.
	Percent float64 `json:"percent"`
	// Guard replaces the rollout's guard; nil keeps it (none for a new
	// rollout). ClearGuard removes it. Both are refused with percent 0
	// or 100, which end the rollout, and together.
	Guard      *Guard `json:"guard,omitempty"`
	ClearGuard bool   `json:"clear_guard,omitempty"`
}

// SetRollout starts, changes, promotes or ends the agent's rollout of a
// stored version. A change that does not apply (the stable version as its
// own canary, an end of a rollout not in force) is refused with
// ErrConflict.
func (s *Store) SetRollout(ctx context.Context, agent string, ch RolloutChange, by string) (Applied, error) {
	switch {
	case math.IsNaN(ch.Percent) || ch.Percent < 0 || ch.Percent > 100:
		return Applied{}, fmt.Errorf("%w: rollout %s: percent %v: want 0 (roll back) to 100 (promote)", ErrInvalid, agent, ch.Percent)
	case ch.Percent > 0 && ch.Percent < 100 && math.Round(ch.Percent*100) == 0:
		return Applied{}, fmt.Errorf("%w: rollout %s: percent %v: the smallest share is 0.01", ErrInvalid, agent, ch.Percent)
	case ch.Version == 0:
		return Applied{}, fmt.Errorf("%w: rollout %s: version is required", ErrInvalid, agent)
	case ch.Guard != nil && ch.ClearGuard:
		return Applied{}, fmt.Errorf("%w: rollout %s: a guard and clear_guard at once", ErrInvalid, agent)
	case (ch.Guard != nil || ch.ClearGuard) && (ch.Percent == 0 || ch.Percent == 100):
		return Applied{}, fmt.Errorf("%w: rollout %s: percent %v ends the rollout: a guard (or its removal) belongs to a rollout that goes on, with a percent between 0 and 100", ErrInvalid, agent, ch.Percent)
	}
	if ch.Guard != nil {
		if err := ValidateGuard(*ch.Guard); err != nil {
			return Applied{}, err
		}
	}
	return s.mutate(ctx, agent, func(st agentState, now time.Time) (*Record, error) {
		head := st.head
		if head == nil {
			return nil, fmt.Errorf("policies: rollout %q: %w", agent, ErrNotFound)
		}
		target, ok := st.h.version(ch.Version)
		if !ok {
			return nil, fmt.Errorf("policies: rollout %q: %w", agent, st.missing(ch.Version))
		}
		r := head.Rollout
		switch ch.Percent {
		case 0:
			if r == nil || r.Canary != ch.Version {
				return nil, fmt.Errorf("policies: rollout %q: no rollout of version %d is in force (%s): %w", agent, ch.Version, describeRollout(r), ErrConflict)
			}
			rec, err := st.restore(r.Stable, ending(r, RolloutRolledBack, "rolled back by hand (percent 0)", by, now), by, now)
			if err != nil {
				return nil, fmt.Errorf("policies: rollout %q: %w", agent, err)
			}
			return rec, nil
		case 100:
			if r == nil && target.Hash == head.Hash {
				return nil, fmt.Errorf("policies: rollout %q: version %d already serves every new session: %w", agent, head.Version, ErrConflict)
			}
			var end *RolloutEnd
			if r != nil {
				outcome := RolloutSuperseded
				if r.Canary == ch.Version {
					outcome = RolloutPromoted
				}
				end = ending(r, outcome, fmt.Sprintf("version %d promoted to every new session", ch.Version), by, now)
			}
			rec, err := st.restore(ch.Version, end, by, now)
			if err != nil {
				return nil, fmt.Errorf("policies: rollout %q: %w", agent, err)
			}
			return rec, nil
		}
		stable, err := st.stable()
		if err != nil {
			return nil, fmt.Errorf("policies: rollout %q: %w", agent, err)
		}
		switch {
		case ch.Version == stable.Version && r == nil:
			return nil, fmt.Errorf("policies: rollout %q: version %d already serves every new session: a canary is another version (apply a changed definition, or name an earlier version): %w", agent, ch.Version, ErrConflict)
		case ch.Version == stable.Version:
			return nil, fmt.Errorf("policies: rollout %q: version %d is the stable version of the rollout in force (%s): %w", agent, ch.Version, r, ErrConflict)
		case target.Hash == stable.Hash:
			return nil, fmt.Errorf("policies: rollout %q: version %d has the content of stable version %d: a canary must differ from it: %w", agent, ch.Version, stable.Version, ErrConflict)
		}
		if err := sameAdmission(stable.Definition, target.Definition); err != nil {
			return nil, fmt.Errorf("policies: rollout %q: version %d against stable version %d: %w: %w", agent, ch.Version, stable.Version, err, ErrConflict)
		}
		out := st.repeat(now, by)
		var nr Rollout
		if r != nil && r.Canary == ch.Version {
			nr = *r
			guard := nr.Guard
			switch {
			case ch.ClearGuard:
				guard = nil
			case ch.Guard != nil:
				guard = ch.Guard
			}
			if nr.Percent == ch.Percent && guardEqual(nr.Guard, guard) {
				return nil, nil
			}
			nr.Percent, nr.Guard, nr.Changed = ch.Percent, guard, now
		} else {
			nr = Rollout{ID: newRolloutID(), Stable: stable.Version, StableRevision: stable.Revision, Canary: ch.Version, CanaryRevision: target.Revision,
				Percent: ch.Percent, Guard: ch.Guard, Started: now, StartedBy: by, Changed: now}
			if ch.ClearGuard {
				nr.Guard = nil
			}
			if r != nil {
				out.Ended = ending(r, RolloutSuperseded, fmt.Sprintf("version %d became the canary", ch.Version), by, now)
			}
		}
		if err := st.keeps(&nr); err != nil {
			return nil, fmt.Errorf("policies: rollout %q: %w", agent, err)
		}
		out.Rollout = &nr
		return &out, nil
	})
}

// historyDepth is how many entries of a key jl_agents keeps, read once.
func (s *Store) historyDepth(ctx context.Context) (int64, error) {
	s.mu.Lock()
	d := s.depth
	s.mu.Unlock()
	if d != 0 {
		return d, nil
	}
	st, err := s.kv.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", s.names.BucketAgents(), err)
	}
	d = st.History()
	s.mu.Lock()
	s.depth = d
	s.mu.Unlock()
	return d, nil
}

// agentState is what a change of an agent decides on.
type agentState struct {
	agent, key string
	h          history
	// rev is the newest entry's revision (a put or a delete), 0 when the
	// key was never written: the condition of the write.
	rev uint64
	// head is the newest entry that compiles; nil when the agent is
	// deleted or has none.
	head *Record
	// depth is how many entries of a key jl_agents keeps.
	depth int64
}

// keeps reports a rollout-only entry, serving rollout r, that the bucket
// could not take without dropping an entry r resolves new sessions
// through: the oldest entry kept leaves when the key's history is full,
// and without the stable's or the canary's entry no new session of that
// side would resolve, nor could the rollout be rolled back.
func (st agentState) keeps(r *Rollout) error {
	if r == nil || st.depth <= 0 || int64(len(st.h.entries)) < st.depth {
		return nil
	}
	oldest := st.h.entries[0].Revision()
	for _, v := range []struct {
		side    string
		version uint64
		rev     uint64
	}{{"stable", r.Stable, r.StableRevision}, {"canary", r.Canary, r.CanaryRevision}} {
		if v.rev == oldest {
			return fmt.Errorf("this change would push the entry of %s version %d out of jl_agents' history of %d entries, and new sessions resolve through it: promote the canary (percent 100) or roll it back (percent 0), then start a new rollout: %w",
				v.side, v.version, st.depth, ErrConflict)
		}
	}
	return nil
}

func (s *Store) state(ctx context.Context, agent string) (agentState, error) {
	key, err := s.names.AgentKey(agent)
	if err != nil {
		return agentState{}, err
	}
	h, err := s.loadHistory(ctx, key)
	if err != nil {
		return agentState{}, fmt.Errorf("read history: %w", err)
	}
	depth, err := s.historyDepth(ctx)
	if err != nil {
		return agentState{}, err
	}
	st := agentState{agent: agent, key: key, h: h, depth: depth}
	if len(h.entries) == 0 {
		return st, nil
	}
	st.rev = h.entries[len(h.entries)-1].Revision()
	for _, e := range slices.Backward(h.entries) {
		if e.Operation() != jetstream.KeyValuePut {
			break
		}
		if _, _, err := s.compileEntry(e); err != nil {
			continue
		}
		if r, ok := h.byRevision(e.Revision()); ok {
			st.head = &r
			break
		}
	}
	return st, nil
}

// stable is the version serving beside a canary: the rollout's stable
// version, else the newest.
func (st agentState) stable() (Record, error) {
	if st.head.Rollout == nil {
		return *st.head, nil
	}
	n := st.head.Rollout.Stable
	r, ok := st.h.version(n)
	if !ok {
		return Record{}, st.missing(n)
	}
	return r, nil
}

// missing is the error of a version the history does not hold.
func (st agentState) missing(n uint64) error {
	if len(st.h.recs) == 0 {
		return ErrNotFound
	}
	return fmt.Errorf("version %d is not in the history, which holds versions %d to %d: %w", n, st.h.recs[0].Version, st.h.last, ErrNotFound)
}

// repeat is a new entry of the newest version, for a change of the
// rollout alone.
func (st agentState) repeat(now time.Time, by string) Record {
	out := *st.head
	out.Revision = 0
	out.Definition = content(out.Definition)
	out.Change, out.ChangedAt, out.ChangedBy = ChangeRollout, now, by
	out.Ended = nil
	return out
}

// restore makes version to's content serve every new session, ending the
// rollout with end: when the newest version already has that content the
// rollout is just cleared; otherwise a new version copies it.
func (st agentState) restore(to uint64, end *RolloutEnd, by string, now time.Time) (*Record, error) {
	target, ok := st.h.version(to)
	if !ok {
		return nil, st.missing(to)
	}
	head := st.head
	if target.Hash == head.Hash {
		if head.Rollout == nil {
			return nil, fmt.Errorf("version %d's content already serves every new session (as version %d): %w", to, head.Version, ErrConflict)
		}
		out := st.repeat(now, by)
		out.Rollout, out.Ended = nil, end
		return &out, nil
	}
	out := Record{Definition: content(target.Definition), Version: st.h.last + 1, Hash: target.Hash, Source: target.Source,
		AppliedBy: by, AppliedAt: now, Change: ChangeRollback, Restores: to, Ended: end}
	return &out, nil
}

// ending records how rollout r ended.
func ending(r *Rollout, outcome, reason, by string, now time.Time) *RolloutEnd {
	return &RolloutEnd{ID: r.ID, Canary: r.Canary, Stable: r.Stable, Outcome: outcome, Reason: reason, By: by, At: now}
}

// mutate reads the agent's state, lets decide compute the entry to write
// (nil: nothing changes), and writes it conditional on the newest
// revision, deciding again when another writer got in between.
func (s *Store) mutate(ctx context.Context, agent string, decide func(agentState, time.Time) (*Record, error)) (Applied, error) {
	for attempt := 0; ; attempt++ {
		st, err := s.state(ctx, agent)
		if err != nil {
			return Applied{}, fmt.Errorf("policies: %q: %w", agent, err)
		}
		if attempt == 0 {
			// A writer that stopped after its last write and before
			// recording it: its record comes before this change's.
			if err := s.catchUp(ctx, st); err != nil {
				s.log.Warn("definition change not recorded in the audit stream", "agent", agent, "err", err)
			}
		}
		rec, err := decide(st, s.now().UTC())
		if err != nil {
			return Applied{}, err
		}
		if rec == nil {
			return Applied{Agent: agent, Record: *st.head}, nil
		}
		val, err := json.Marshal(rec)
		if err != nil {
			return Applied{}, fmt.Errorf("policies: %q: encode: %w", agent, err)
		}
		var rev uint64
		if st.rev == 0 {
			rev, err = s.kv.Create(ctx, st.key, val)
		} else {
			rev, err = s.kv.Update(ctx, st.key, val, st.rev)
		}
		if err == nil {
			rec.Revision = rev
			rec.Definition.Version, rec.Definition.Revision = rec.Version, rev
			if r := rec.Rollout; r != nil && r.CanaryRevision == 0 {
				r.CanaryRevision = rev
			}
			a := Applied{Agent: agent, Record: *rec, Created: rec.Version > st.h.last, Changed: true}
			s.audit(ctx, a)
			return a, nil
		}
		// Another writer got in between: read again and decide again,
		// after a short jittered pause so that the writers part.
		if !streams.IsConflict(err) || attempt >= 9 {
			return Applied{}, fmt.Errorf("policies: %q: write: %w", agent, err)
		}
		pause := time.Millisecond << attempt
		t := time.NewTimer(pause/2 + rand.N(pause))
		select {
		case <-ctx.Done():
			t.Stop()
			return Applied{}, fmt.Errorf("policies: %q: %w", agent, ctx.Err())
		case <-t.C:
		}
	}
}

// sameAdmission reports how b's triggers, schedules, requests or
// retention differ from a's. Admission, schedules and retention act
// before, or outside, a session's version: they read one version for
// every session of the agent, so a canary may change the prompt, model,
// tools, budget and approvals, not what decides which sessions exist or
// how long they are kept.
func sameAdmission(a, b Definition) error {
	for _, f := range []struct {
		field, why string
		a, b       any
	}{
		{"triggers", "admission follows the stable version", a.Triggers, b.Triggers},
		{"schedules", "ticks follow the stable version", a.Schedules, b.Schedules},
		{"requests", "admission of user requests reads one version for every session", a.Requests, b.Requests},
		{"retention", "retention reads one version for every session", a.Retention, b.Retention},
	} {
		ja, _ := json.Marshal(f.a)
		jb, _ := json.Marshal(f.b)
		if string(ja) != string(jb) {
			return fmt.Errorf("a canary may not change %s (%s); apply it without rollout", f.field, f.why)
		}
	}
	return nil
}

func guardEqual(a, b *Guard) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func newRolloutID() string {
	b := make([]byte, 6)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}

func describeRollout(r *Rollout) string {
	if r == nil {
		return "no rollout"
	}
	return r.String()
}
