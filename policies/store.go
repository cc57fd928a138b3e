package policies

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/streams"
)

// Record is a stored definition with where and when it was applied.
type Record struct {
	// Definition has Version set to the record's revision in jl_agents.
	Definition Definition `json:"definition"`
	// Source is the file it was applied from, if any.
	Source string `json:"source,omitempty"`
	// AppliedAt is when it was stored.
	AppliedAt time.Time `json:"applied_at"`
}

// Change is one update seen by Watch.
type Change struct {
	Agent string
	// Compiled is the new version; nil when the agent was deleted or the
	// stored value was refused (Err).
	Compiled *Compiled
	Record   Record
	Deleted  bool
	// Err is set when a stored version does not decode or compile (written
	// by another release, or by hand): keep serving the previous one.
	Err error
	// Refused is set, in the changes delivered before the current state
	// is complete, when the newest stored version was refused and
	// Compiled is the newest earlier version that compiles: a process
	// that starts has no previous version of its own to keep serving.
	Refused error
}

// Store keeps versioned agent definitions in the jl_agents bucket, one key
// per agent, the bucket's history holding earlier versions. Only
// definitions that compile are written, and readers skip a stored version
// that does not compile in favour of the newest one that does, so a
// refused definition never replaces a serving one.
type Store struct {
	kv    jetstream.KeyValue
	names streams.Names
	now   func() time.Time
}

// NewStore binds to the deployment's jl_agents bucket, which
// streams.Provision creates.
func NewStore(ctx context.Context, js jetstream.JetStream, names streams.Names) (*Store, error) {
	kv, err := js.KeyValue(ctx, names.BucketAgents())
	if err != nil {
		return nil, fmt.Errorf("policies: open bucket %s: %w", names.BucketAgents(), err)
	}
	return &Store{kv: kv, names: names, now: time.Now}, nil
}

// PutOption adjusts a Put.
type PutOption func(*Record)

// WithSource records the file a definition was applied from.
func WithSource(file string) PutOption { return func(r *Record) { r.Source = file } }

// Put validates d and stores it as the agent's newest version, returning
// that version. A definition equal to the newest stored one is not stored
// again: its version is returned. An invalid definition is refused with an
// error wrapping ErrInvalid and nothing is written.
func (s *Store) Put(ctx context.Context, d Definition, opts ...PutOption) (uint64, error) {
	d.Version = 0
	if _, err := Compile(d); err != nil {
		return 0, err
	}
	key, err := s.names.AgentKey(d.Name)
	if err != nil {
		return 0, fmt.Errorf("policies: put %s: %w", d.Name, err)
	}
	rec := Record{Definition: d, AppliedAt: s.now().UTC()}
	for _, o := range opts {
		o(&rec)
	}
	val, err := json.Marshal(rec)
	if err != nil {
		return 0, fmt.Errorf("policies: put %s: encode: %w", d.Name, err)
	}
	want, _ := json.Marshal(d)
	for attempt := 0; ; attempt++ {
		cur, err := s.kv.Get(ctx, key)
		var rev uint64
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return 0, fmt.Errorf("policies: put %s: read current: %w", d.Name, err)
		default:
			rev = cur.Revision()
			if old, err := decode(cur.Value()); err == nil {
				old.Definition.Version = 0
				have, _ := json.Marshal(old.Definition)
				if bytes.Equal(have, want) {
					return rev, nil
				}
			}
		}
		var v uint64
		if rev == 0 {
			v, err = s.kv.Create(ctx, key, val)
		} else {
			v, err = s.kv.Update(ctx, key, val, rev)
		}
		if err == nil {
			return v, nil
		}
		// Another writer got in between: read again and decide again,
		// after a short jittered pause so that the writers part.
		if !streams.IsConflict(err) || attempt >= 9 {
			return 0, fmt.Errorf("policies: put %s: %w", d.Name, err)
		}
		pause := time.Millisecond << attempt
		t := time.NewTimer(pause/2 + rand.N(pause))
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, fmt.Errorf("policies: put %s: %w", d.Name, ctx.Err())
		case <-t.C:
		}
	}
}

// Get returns the newest version of agent's definition that compiles,
// with Version set. It fails with ErrNotFound when none is stored.
func (s *Store) Get(ctx context.Context, agent string) (Definition, error) {
	c, _, err := s.GetCompiled(ctx, agent)
	if err != nil {
		return Definition{}, err
	}
	return c.Definition, nil
}

// GetCompiled is Get with the compiled rules and the record.
func (s *Store) GetCompiled(ctx context.Context, agent string) (*Compiled, Record, error) {
	key, err := s.names.AgentKey(agent)
	if err != nil {
		return nil, Record{}, fmt.Errorf("policies: get %q: %w", agent, err)
	}
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, Record{}, fmt.Errorf("policies: get %q: %w", agent, ErrNotFound)
	}
	if err != nil {
		return nil, Record{}, fmt.Errorf("policies: get %q: %w", agent, err)
	}
	if c, rec, err := compileEntry(e); err == nil {
		return c, rec, nil
	}
	// The newest version is refused: serve the newest earlier one that
	// compiles.
	hist, err := s.kv.History(ctx, key)
	if err != nil {
		return nil, Record{}, fmt.Errorf("policies: get %q: history: %w", agent, err)
	}
	for _, h := range slices.Backward(hist) {
		if h.Operation() != jetstream.KeyValuePut {
			break
		}
		if c, rec, err := compileEntry(h); err == nil {
			return c, rec, nil
		}
	}
	return nil, Record{}, fmt.Errorf("policies: get %q: no stored version compiles: %w", agent, ErrNotFound)
}

// GetVersion returns one stored version of agent's definition, as long as
// the bucket's history keeps it.
func (s *Store) GetVersion(ctx context.Context, agent string, version uint64) (Definition, error) {
	key, err := s.names.AgentKey(agent)
	if err != nil {
		return Definition{}, fmt.Errorf("policies: get %q: %w", agent, err)
	}
	e, err := s.kv.GetRevision(ctx, key, version)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			err = ErrNotFound
		}
		return Definition{}, fmt.Errorf("policies: get %q version %d: %w", agent, version, err)
	}
	rec, err := decode(e.Value())
	if err != nil {
		return Definition{}, fmt.Errorf("policies: get %q version %d: %w", agent, version, err)
	}
	rec.Definition.Version = e.Revision()
	return rec.Definition, nil
}

// List returns the newest serving version of every agent, by name.
func (s *Store) List(ctx context.Context) ([]Definition, error) {
	recs, err := s.Records(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Definition, len(recs))
	for i, r := range recs {
		out[i] = r.Definition
	}
	return out, nil
}

// Records is List with where and when each version was applied.
func (s *Store) Records(ctx context.Context) ([]Record, error) {
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("policies: list: %w", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	// The channel closing means every key was delivered; Stop only
	// releases the subscription.
	_ = lister.Stop()
	var out []Record
	for _, k := range keys {
		agent, err := s.agentOf(k)
		if err != nil {
			continue
		}
		_, rec, err := s.GetCompiled(ctx, agent)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	slices.SortFunc(out, func(a, b Record) int { return strings.Compare(a.Definition.Name, b.Definition.Name) })
	return out, nil
}

// Delete removes agent's definition; its history stays until purged.
func (s *Store) Delete(ctx context.Context, agent string) error {
	key, err := s.names.AgentKey(agent)
	if err != nil {
		return fmt.Errorf("policies: delete %q: %w", agent, err)
	}
	if err := s.kv.Delete(ctx, key); err != nil {
		return fmt.Errorf("policies: delete %q: %w", agent, err)
	}
	return nil
}

// Watch delivers every agent's current definition (the newest version
// that compiles, with Refused set when that is not the newest stored),
// then a Change with empty Agent marking that the current state has been
// delivered, then
// every later change, until ctx ends; the channel is closed then. The
// goroutine feeding it stops when ctx ends: the caller owns it through ctx
// and waits for it by draining the channel.
func (s *Store) Watch(ctx context.Context) (<-chan Change, error) {
	w, err := s.kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("policies: watch %s: %w", s.names.BucketAgents(), err)
	}
	out := make(chan Change, 16)
	go func() {
		defer close(out)
		defer w.Stop()
		initial := true
		for {
			var e jetstream.KeyValueEntry
			var ok bool
			select {
			case <-ctx.Done():
				return
			case e, ok = <-w.Updates():
				if !ok {
					return
				}
			}
			var ch Change
			if e != nil {
				ch = s.change(e)
				if initial && ch.Err != nil && !ch.Deleted {
					ch = s.fallback(ctx, ch)
				}
			} else {
				initial = false
			}
			select {
			case out <- ch:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func (s *Store) change(e jetstream.KeyValueEntry) Change {
	agent, err := s.agentOf(e.Key())
	if err != nil {
		return Change{Agent: e.Key(), Err: err}
	}
	ch := Change{Agent: agent}
	if e.Operation() != jetstream.KeyValuePut {
		ch.Deleted = true
		return ch
	}
	c, rec, err := compileEntry(e)
	if err != nil {
		ch.Err = fmt.Errorf("policies: agent %q version %d refused: %w", agent, e.Revision(), err)
		return ch
	}
	if c.Definition.Name != agent {
		ch.Err = fmt.Errorf("policies: agent %q version %d is named %q", agent, e.Revision(), c.Definition.Name)
		return ch
	}
	ch.Compiled, ch.Record = c, rec
	return ch
}

// fallback replaces a refused initial change by the newest earlier
// version that compiles, if there is one.
func (s *Store) fallback(ctx context.Context, ch Change) Change {
	c, rec, err := s.GetCompiled(ctx, ch.Agent)
	if err != nil || c.Definition.Name != ch.Agent {
		return ch
	}
	return Change{Agent: ch.Agent, Compiled: c, Record: rec, Refused: ch.Err}
}

func (s *Store) agentOf(key string) (string, error) {
	agent, err := events.DecodeToken(key)
	if err != nil {
		return "", fmt.Errorf("policies: key %q is not an agent key: %w", key, err)
	}
	return agent, nil
}

func decode(val []byte) (Record, error) {
	var rec Record
	dec := json.NewDecoder(bytes.NewReader(val))
	if err := dec.Decode(&rec); err != nil {
		return Record{}, fmt.Errorf("%w: decode stored definition: %w", ErrInvalid, err)
	}
	return rec, nil
}

func compileEntry(e jetstream.KeyValueEntry) (*Compiled, Record, error) {
	rec, err := decode(e.Value())
	if err != nil {
		return nil, Record{}, err
	}
	rec.Definition.Version = e.Revision()
	c, err := Compile(rec.Definition)
	if err != nil {
		return nil, Record{}, err
	}
	return c, rec, nil
}
