package admission

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/jetloop/jetloop/policies"
)

// Rules is the live set of compiled agent definitions that admission
// evaluates. Watch keeps it in step with jl_agents; a stored version that
// is refused (it does not compile) leaves the previous one in place. It is
// safe for concurrent use.
type Rules struct {
	mu     sync.RWMutex
	agents map[string]*policies.Compiled
	sorted []*policies.Compiled
	// paths are what of event.data the triggers of sorted read.
	paths    *policies.DataPaths
	synced   chan struct{}
	syncOnce sync.Once
	// lookup reads an agent the watch has not delivered yet; nil
	// without a store that can.
	lookup func(ctx context.Context, agent string) (*policies.Compiled, error)
}

// NewRules returns an empty set that is not yet synced.
func NewRules() *Rules {
	return &Rules{agents: map[string]*policies.Compiled{}, synced: make(chan struct{})}
}

// Set adds or replaces an agent's definition and marks the set synced;
// for tests and for callers that load definitions themselves.
func (r *Rules) Set(cs ...*policies.Compiled) {
	r.mu.Lock()
	for _, c := range cs {
		r.agents[c.Definition.Name] = c
	}
	r.resort()
	r.mu.Unlock()
	r.markSynced()
}

// Remove drops an agent.
func (r *Rules) Remove(agent string) {
	r.mu.Lock()
	delete(r.agents, agent)
	r.resort()
	r.mu.Unlock()
}

func (r *Rules) resort() {
	r.sorted = slices.SortedFunc(maps.Values(r.agents), func(a, b *policies.Compiled) int {
		return strings.Compare(a.Definition.Name, b.Definition.Name)
	})
	paths := &policies.DataPaths{}
	for _, c := range r.sorted {
		paths = paths.Union(c.DataPaths())
	}
	r.paths = paths
}

func (r *Rules) markSynced() { r.syncOnce.Do(func() { close(r.synced) }) }

// Agents returns the current definitions, by name. The slice must not be
// modified.
func (r *Rules) Agents() []*policies.Compiled {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.sorted
}

// agentsPaths returns Agents and what of event.data their triggers read.
func (r *Rules) agentsPaths() ([]*policies.Compiled, *policies.DataPaths) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.paths == nil {
		return r.sorted, &policies.DataPaths{}
	}
	return r.sorted, r.paths
}

// Agent returns one agent's current definition.
func (r *Rules) Agent(name string) (*policies.Compiled, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	c, ok := r.agents[name]
	return c, ok
}

// Synced is closed once the definitions stored when Watch started have
// been loaded. Before that, admission refuses to decide (ErrNotReady)
// rather than reject events for lack of definitions.
func (r *Rules) Synced() <-chan struct{} { return r.synced }

// IsSynced reports whether Synced is closed.
func (r *Rules) IsSynced() bool {
	select {
	case <-r.synced:
		return true
	default:
		return false
	}
}

// Watcher is what Watch reads definitions from; *policies.Store is one.
type Watcher interface {
	Watch(ctx context.Context) (<-chan policies.Change, error)
}

// getter is a Watcher that can also read one agent now, as
// *policies.Store can.
type getter interface {
	GetCompiled(ctx context.Context, agent string) (*policies.Compiled, policies.Record, error)
}

// fetch returns an agent's definition: the one the watch delivered, else
// for an agent the watch has not delivered yet (applied a moment ago:
// `jetloop apply` and then `jetloop send`), the store's, read now.
func (r *Rules) fetch(ctx context.Context, agent string) (*policies.Compiled, bool) {
	if c, ok := r.Agent(agent); ok {
		return c, true
	}
	r.mu.RLock()
	lookup := r.lookup
	r.mu.RUnlock()
	if lookup == nil {
		return nil, false
	}
	c, err := lookup(ctx, agent)
	if err != nil || c == nil || c.Definition.Name != agent {
		return nil, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev, ok := r.agents[agent]; ok {
		return prev, true // the watch was quicker
	}
	r.agents[agent] = c
	r.resort()
	return c, true
}

// Watch keeps r in step with the store until ctx ends. It returns nil
// when ctx ends and an error when the watch cannot start or stops.
func (r *Rules) Watch(ctx context.Context, store Watcher, log *slog.Logger) error {
	if g, ok := store.(getter); ok {
		r.mu.Lock()
		r.lookup = func(ctx context.Context, agent string) (*policies.Compiled, error) {
			c, _, err := g.GetCompiled(ctx, agent)
			return c, err
		}
		r.mu.Unlock()
	}
	ch, err := store.Watch(ctx)
	if err != nil {
		return err
	}
	for c := range ch {
		switch {
		case c.Agent == "":
			r.markSynced()
			log.Info("agent definitions loaded", "agents", len(r.Agents()))
		case c.Err != nil:
			log.Error("agent definition refused; the previous version keeps serving", "agent", c.Agent, "err", c.Err)
		case c.Deleted:
			r.Remove(c.Agent)
			log.Info("agent definition deleted", "agent", c.Agent)
		default:
			if c.Refused != nil {
				log.Error("agent definition refused; serving the newest earlier version that compiles", "agent", c.Agent,
					"version", c.Compiled.Definition.Version, "err", c.Refused)
			}
			r.mu.Lock()
			r.agents[c.Agent] = c.Compiled
			r.resort()
			r.mu.Unlock()
			if r.IsSynced() {
				log.Info("agent definition updated", "agent", c.Agent, "version", c.Compiled.Definition.Version)
			}
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return errWatchStopped
}
