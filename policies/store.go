package policies

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/streams"
)

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
// per agent, the bucket's history holding earlier versions (see Record).
// Only definitions that compile are written, and readers skip a stored
// version that does not compile in favour of the newest one that does,
// so a refused definition never replaces a serving one. Every change is
// also recorded in JL_AUDIT (see Event).
type Store struct {
	kv    jetstream.KeyValue
	js    jetstream.JetStream
	names streams.Names
	now   func() time.Time
	log   *slog.Logger

	mu       sync.Mutex
	compiled map[uint64]*Compiled // by revision: entries never change
	counters jetstream.KeyValue   // jl_rollouts, opened on first use
	audits   jetstream.Stream     // JL_AUDIT, opened on first use
	depth    int64                // jl_agents' history per key, read on first use
}

// StoreOption configures a Store.
type StoreOption func(*Store)

// WithLogger logs what the store cannot report to its caller: an audit
// record that could not be written after the change it records was.
func WithLogger(l *slog.Logger) StoreOption { return func(s *Store) { s.log = l } }

// NewStore binds to the deployment's jl_agents bucket, which
// streams.Provision creates.
func NewStore(ctx context.Context, js jetstream.JetStream, names streams.Names, opts ...StoreOption) (*Store, error) {
	kv, err := js.KeyValue(ctx, names.BucketAgents())
	if err != nil {
		return nil, fmt.Errorf("policies: open bucket %s: %w", names.BucketAgents(), err)
	}
	s := &Store{kv: kv, js: js, names: names, now: time.Now, log: slog.New(slog.DiscardHandler), compiled: map[uint64]*Compiled{}}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// maxCompiled bounds the compiled versions a Store keeps.
const maxCompiled = 512

// compileEntry decodes and compiles an entry, once per revision.
func (s *Store) compileEntry(e jetstream.KeyValueEntry) (*Compiled, Record, error) {
	rec, err := record(e)
	if err != nil {
		return nil, Record{}, err
	}
	s.mu.Lock()
	c, ok := s.compiled[e.Revision()]
	s.mu.Unlock()
	if ok {
		return c, rec, nil
	}
	c, err = Compile(rec.Definition)
	if err != nil {
		return nil, Record{}, err
	}
	s.mu.Lock()
	if len(s.compiled) >= maxCompiled {
		clear(s.compiled)
	}
	s.compiled[e.Revision()] = c
	s.mu.Unlock()
	return c, rec, nil
}

// numbered gives a record stored before per-agent versions its number
// (see loadHistory), and its compiled definition the same.
func (s *Store) numbered(ctx context.Context, key string, c *Compiled, rec Record) (*Compiled, Record, error) {
	if rec.Version != 0 {
		return c, rec, nil
	}
	h, err := s.loadHistory(ctx, key)
	if err != nil {
		return nil, Record{}, err
	}
	if r, ok := h.byRevision(rec.Revision); ok {
		rec.Version, rec.Definition.Version = r.Version, r.Version
	}
	if c != nil && c.Definition.Version != rec.Version {
		cc := *c
		cc.Definition.Version = rec.Version
		c = &cc
	}
	return c, rec, nil
}

// Get returns the newest version of agent's definition that compiles,
// with Version and Revision set. It fails with ErrNotFound when none is
// stored. During a rollout the newest version need not be the one that
// serves new sessions: Resolve says which does.
func (s *Store) Get(ctx context.Context, agent string) (Definition, error) {
	c, _, err := s.GetCompiled(ctx, agent)
	if err != nil {
		return Definition{}, err
	}
	return c.Definition, nil
}

// GetCompiled is Get with the compiled rules and the record, whose
// Rollout is the agent's rollout in force.
func (s *Store) GetCompiled(ctx context.Context, agent string) (*Compiled, Record, error) {
	key, err := s.names.AgentKey(agent)
	if err != nil {
		return nil, Record{}, fmt.Errorf("policies: get %q: %w", agent, err)
	}
	c, rec, err := s.current(ctx, key)
	if err != nil {
		return nil, Record{}, fmt.Errorf("policies: get %q: %w", agent, err)
	}
	return c, rec, nil
}

// current is the newest entry of key that compiles, numbered.
func (s *Store) current(ctx context.Context, key string) (*Compiled, Record, error) {
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, Record{}, ErrNotFound
	}
	if err != nil {
		return nil, Record{}, err
	}
	if c, rec, err := s.compileEntry(e); err == nil {
		return s.numbered(ctx, key, c, rec)
	}
	// The newest entry is refused: serve the newest earlier one that
	// compiles.
	hist, err := s.kv.History(ctx, key)
	if err != nil {
		return nil, Record{}, fmt.Errorf("history: %w", err)
	}
	for _, h := range slices.Backward(hist) {
		if h.Operation() != jetstream.KeyValuePut {
			break
		}
		if c, rec, err := s.compileEntry(h); err == nil {
			return s.numbered(ctx, key, c, rec)
		}
	}
	return nil, Record{}, fmt.Errorf("no stored version compiles: %w", ErrNotFound)
}

// GetRevision returns the entry of agent at jl_agents revision rev, as
// long as the bucket's history keeps it.
func (s *Store) GetRevision(ctx context.Context, agent string, rev uint64) (Record, error) {
	key, err := s.names.AgentKey(agent)
	if err != nil {
		return Record{}, fmt.Errorf("policies: get %q revision %d: %w", agent, rev, err)
	}
	e, err := s.kv.GetRevision(ctx, key, rev)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			err = ErrNotFound
		}
		return Record{}, fmt.Errorf("policies: get %q revision %d: %w", agent, rev, err)
	}
	rec, err := record(e)
	if err != nil {
		return Record{}, fmt.Errorf("policies: get %q revision %d: %w", agent, rev, err)
	}
	_, rec, err = s.numbered(ctx, key, nil, rec)
	if err != nil {
		return Record{}, fmt.Errorf("policies: get %q revision %d: %w", agent, rev, err)
	}
	return rec, nil
}

// List returns the newest version of every agent that compiles, by name.
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

// Records is List with where and when each version was applied and the
// rollout in force.
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

// Delete removes agent's definition; its history stays until purged, and
// a definition applied later continues its version numbers.
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
// delivered, then every later change, until ctx ends; the channel is
// closed then. The goroutine feeding it stops when ctx ends: the caller
// owns it through ctx and waits for it by draining the channel.
//
// An entry that changes only the rollout is delivered too, with the same
// definition: admission and schedules follow the stable version, whose
// triggers, schedules, requests and retention a canary may not change.
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
				ch = s.change(ctx, e)
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

func (s *Store) change(ctx context.Context, e jetstream.KeyValueEntry) Change {
	agent, err := s.agentOf(e.Key())
	if err != nil {
		return Change{Agent: e.Key(), Err: err}
	}
	ch := Change{Agent: agent}
	if e.Operation() != jetstream.KeyValuePut {
		ch.Deleted = true
		return ch
	}
	c, rec, err := s.compileEntry(e)
	if err == nil {
		c, rec, err = s.numbered(ctx, e.Key(), c, rec)
	}
	if err != nil {
		ch.Err = fmt.Errorf("policies: agent %q revision %d refused: %w", agent, e.Revision(), err)
		return ch
	}
	if c.Definition.Name != agent {
		ch.Err = fmt.Errorf("policies: agent %q revision %d is named %q", agent, e.Revision(), c.Definition.Name)
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
