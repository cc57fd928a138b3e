package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/dlq"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/ledger"
	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/schedule"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/tools/mcp"
)

// Worker runs the sessions of every agent it serves. Create it with New
// and run it with Run; several workers (in one process or many) share the
// work through the per-agent consumers and the session leases.
type Worker struct {
	cfg   Config
	js    jetstream.JetStream
	nc    *nats.Conn
	names streams.Names
	log   *slog.Logger
	m     *Metrics
	store *record.Store
	// sessions is the jl_sessions bucket, where the notes are.
	sessions jetstream.KeyValue
	leases   *leases
	slots    *slots
	spend    *spend
	in       jetstream.Stream
	// room is JL_IN's, checked before the worker's own writes to it.
	room *streams.Room
	ctl  jetstream.Stream
	// schedules records tick results and holds the breakers.
	schedules *schedule.HealthStore
	// ticks remembers the ticks consumed (jl_dedupe).
	ticks *dedupe.Store
	// index is the status index (jl_status).
	index *record.Index
	// seen is the same jl_dedupe store: it remembers each applied
	// control message by its id, for as long as events are, so a message
	// sent again after JL_CTL's duplicate window is applied once.
	seen *dedupe.Store
	// ledger holds the usage accounts of delegation trees.
	ledger *ledger.Store
	// blobs is jl_blobs: inputs of delegations too large for their event.
	blobs jetstream.ObjectStore

	// incarnation is this run of the process; alive answers on its
	// liveness subject (see incarnation.go).
	incarnation string
	alive       *nats.Subscription

	mu      sync.Mutex
	runners map[string]*runner // by session key
	wg      sync.WaitGroup     // runners

	// mcp holds the sessions' MCP connections.
	mcp *mcp.Pool

	modelsMu sync.Mutex
	models   map[string]model.Model           // by agent@version
	mcpSets  map[string]map[string]tools.Tool // MCP tools by agent@version
	rules    map[string]*policies.Compiled    // by agent@version
}

// New checks cfg and opens the buckets and streams the worker uses; they
// must have been provisioned (streams.Provision).
func New(ctx context.Context, js jetstream.JetStream, cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	w := &Worker{
		cfg: cfg, js: js, nc: js.Conn(), names: cfg.Names,
		log:     cfg.Log.With("worker", cfg.ID),
		m:       cfg.Metrics,
		runners: make(map[string]*runner),
		models:  make(map[string]model.Model),
		mcpSets: make(map[string]map[string]tools.Tool),
		rules:   make(map[string]*policies.Compiled),
	}
	var err error
	if err := w.newMCP(); err != nil {
		return nil, err
	}
	if w.store, err = record.Open(ctx, js, cfg.Names); err != nil {
		return nil, err
	}
	w.store.Retried = func(ref streams.SessionRef, why string, err error) {
		w.m.writeRetries.WithLabelValues(why).Inc()
		if why == "entry_replaced" {
			w.log.Info("entry id taken by an entry no state names (its writer crashed or was fenced); replaced", "agent", ref.Agent, "session", ref.Session, "err", err)
			return
		}
		w.log.Warn("write failed for a passing reason; trying again", "agent", ref.Agent, "session", ref.Session, "why", why, "err", err)
	}
	if cfg.Trace != nil {
		// The points between a settlement's writes, for crash tests.
		w.store.Between = func(ctx context.Context, ref streams.SessionRef, entries []record.Entry, created int) {
			head := entries[0]
			if head.Step == 0 {
				return
			}
			kind := record.StepTool
			if head.Kind == record.KindAssistant || head.Kind == record.KindSummary {
				kind = record.StepModel
			}
			phase := PhaseCreated
			if created < len(entries) {
				phase = PhaseCreate
			}
			cfg.Trace(ctx, TracePoint{Phase: phase, Agent: ref.Agent, Session: ref.Session, Kind: kind, Step: head.Step,
				Tool: head.Name, CallID: head.CallID, Recovery: head.Attempt > 0, Compact: head.Kind == record.KindSummary})
		}
	}
	if w.sessions, err = js.KeyValue(ctx, cfg.Names.BucketSessions()); err != nil {
		return nil, fmt.Errorf("worker: open bucket %s: %w", cfg.Names.BucketSessions(), err)
	}
	lkv, err := js.KeyValue(ctx, cfg.Names.BucketLeases())
	if err != nil {
		return nil, fmt.Errorf("worker: open bucket %s: %w", cfg.Names.BucketLeases(), err)
	}
	w.leases = &leases{js: js, kv: lkv, names: cfg.Names, bucket: cfg.Names.BucketLeases(), ttl: cfg.LeaseTTL, owner: cfg.ID}
	w.leases.predecessor = w.predecessor
	skv, err := js.KeyValue(ctx, cfg.Names.BucketSlots())
	if err != nil {
		return nil, fmt.Errorf("worker: open bucket %s: %w", cfg.Names.BucketSlots(), err)
	}
	w.slots = &slots{js: js, kv: skv, names: cfg.Names, bucket: cfg.Names.BucketSlots(), ttl: cfg.LeaseTTL, owner: cfg.ID}
	pkv, err := js.KeyValue(ctx, cfg.Names.BucketSpend())
	if err != nil {
		return nil, fmt.Errorf("worker: open bucket %s: %w", cfg.Names.BucketSpend(), err)
	}
	w.spend = &spend{js: js, kv: pkv, names: cfg.Names, bucket: cfg.Names.BucketSpend()}
	if w.in, err = js.Stream(ctx, cfg.Names.StreamIn()); err != nil {
		return nil, fmt.Errorf("worker: open stream %s: %w", cfg.Names.StreamIn(), err)
	}
	w.room = streams.NewInRoom(js, cfg.Names, cfg.Shares)
	if w.ctl, err = js.Stream(ctx, cfg.Names.StreamCtl()); err != nil {
		return nil, fmt.Errorf("worker: open stream %s: %w", cfg.Names.StreamCtl(), err)
	}
	if w.schedules, err = schedule.NewHealthStore(ctx, js, cfg.Names); err != nil {
		return nil, err
	}
	if w.ticks, err = dedupe.New(ctx, js, dedupe.Config{Names: cfg.Names}); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	if w.index, err = record.OpenIndex(ctx, js, cfg.Names); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	w.seen = w.ticks
	if w.ledger, err = ledger.Open(ctx, js, cfg.Names); err != nil {
		return nil, err
	}
	if w.blobs, err = js.ObjectStore(ctx, cfg.Names.ObjectBlobs()); err != nil {
		return nil, fmt.Errorf("worker: open object store %s: %w", cfg.Names.ObjectBlobs(), err)
	}
	return w, nil
}

// Run serves until ctx ends, then lets in-flight steps finish for
// Config.ShutdownGrace, cancels the rest (their intents stay for
// recovery by another worker) and returns once every session has stopped.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.sweep(ctx); err != nil {
		return err
	}
	if err := w.startIncarnation(ctx); err != nil {
		return err
	}
	defer func() { _ = w.alive.Unsubscribe() }()
	if err := w.reclaim(ctx); err != nil {
		w.log.Warn("take back sessions of a dead incarnation; their leases lapse instead", "err", err)
	}
	w.wg.Go(func() {
		n, err := w.index.Build(ctx, w.js)
		switch {
		case err != nil && ctx.Err() == nil:
			w.log.Warn("index the sessions that predate the status index", "err", err)
		case n > 0:
			w.log.Info("status index built from the sessions' states", "sessions", n)
		}
		t := time.NewTicker(indexRepairEvery)
		defer t.Stop()
		for {
			w.repairIndex(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	w.log.Info("worker running", "agents", agentsLabel(w.cfg.Agents))
	var err error
	if len(w.cfg.Agents) > 0 {
		err = w.serveFixed(ctx)
	} else {
		err = w.serveDiscovered(ctx)
	}
	w.wg.Wait()
	w.mcp.Close()
	w.log.Info("worker stopped")
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// sweep kills what tool processes of dead workers left running on this
// machine, before any session is taken over and recovered.
func (w *Worker) sweep(ctx context.Context) error {
	if w.cfg.Trees == nil {
		return nil
	}
	swept, err := w.cfg.Trees.Sweep(ctx)
	for _, sw := range swept {
		w.log.Warn("killed tool processes a dead worker left running", "tree", sw.Label, "owner", sw.Owner.String(), "processes", sw.Killed, "cgroup", sw.Cgroup)
	}
	if err != nil {
		return fmt.Errorf("worker %s: kill what dead workers left running: %w", w.cfg.ID, err)
	}
	return nil
}

func agentsLabel(agents []string) any {
	if len(agents) == 0 {
		return "all in jl_agents"
	}
	return agents
}

// serveFixed consumes the configured agents until ctx ends.
func (w *Worker) serveFixed(ctx context.Context) error {
	var stops []func()
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	for _, a := range w.cfg.Agents {
		stop, err := w.consume(ctx, a)
		if err != nil {
			return err
		}
		stops = append(stops, stop)
	}
	<-ctx.Done()
	return nil
}

// serveDiscovered watches jl_agents and consumes each agent while its key
// exists.
func (w *Worker) serveDiscovered(ctx context.Context) error {
	kv, err := w.js.KeyValue(ctx, w.names.BucketAgents())
	if err != nil {
		return fmt.Errorf("worker: open bucket %s: %w", w.names.BucketAgents(), err)
	}
	watch, err := kv.WatchAll(ctx, jetstream.MetaOnly())
	if err != nil {
		return fmt.Errorf("worker: watch %s: %w", w.names.BucketAgents(), err)
	}
	defer watch.Stop()
	stops := make(map[string]func())
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-watch.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil // stopping: the watch closed with ctx
				}
				return fmt.Errorf("worker: watch of %s closed", w.names.BucketAgents())
			}
			if e == nil {
				continue
			}
			agent, err := events.DecodeToken(e.Key())
			if err != nil {
				w.log.Warn("skipping agent key that is not a token", "key", e.Key(), "err", err)
				continue
			}
			switch e.Operation() {
			case jetstream.KeyValuePut:
				if _, ok := stops[agent]; ok {
					continue
				}
				stop, err := w.consume(ctx, agent)
				if err != nil {
					// A bad agent must not stop the others.
					w.log.Error("cannot consume agent's events", "agent", agent, "err", err)
					continue
				}
				stops[agent] = stop
			default:
				if stop, ok := stops[agent]; ok {
					stop()
					delete(stops, agent)
					w.log.Info("agent removed; no longer consuming its events", "agent", agent)
				}
			}
		}
	}
}

// consume creates (or updates) the agent's durable consumers on JL_IN and
// JL_CTL and starts delivering their messages to dispatch; the returned
// func stops both.
func (w *Worker) consume(ctx context.Context, agent string) (func(), error) {
	in, err := streams.InConsumer(w.names, agent)
	if err != nil {
		return nil, err
	}
	ctl, err := streams.CtlConsumer(w.names, agent)
	if err != nil {
		return nil, err
	}
	stopIn, err := w.consumeStream(ctx, agent, w.names.StreamIn(), in, false)
	if err != nil {
		return nil, err
	}
	stopCtl, err := w.consumeStream(ctx, agent, w.names.StreamCtl(), ctl, true)
	if err != nil {
		stopIn()
		return nil, err
	}
	stopRetain := func() {}
	if w.cfg.RetentionInterval > 0 {
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer close(done)
			w.retain(rctx, agent)
		}()
		stopRetain = func() { cancel(); <-done }
	}
	return func() { stopIn(); stopCtl(); stopRetain() }, nil
}

// consumeStream creates one durable consumer and consumes it until the
// returned func is called. The client stops consuming on its own when a
// delivery reads as the server's word that it must (409 Consumer Deleted,
// 400 Bad Request): a stored message without data whose sender set those
// headers reads so, and would stop the agent's events or control
// messages on every worker it reaches, for good. The consumer is then
// created and consumed again, a second later.
func (w *Worker) consumeStream(ctx context.Context, agent, stream string, cc jetstream.ConsumerConfig, ctl bool) (func(), error) {
	cc.AckWait = w.cfg.AckWait
	log := w.log.With("agent", agent, "stream", stream)
	start := func() (jetstream.ConsumeContext, error) {
		c, err := w.js.CreateOrUpdateConsumer(ctx, stream, cc)
		if err != nil {
			return nil, fmt.Errorf("worker: consumer %s on %s: %w", cc.Durable, stream, err)
		}
		cctx, err := c.Consume(func(m jetstream.Msg) { w.dispatch(ctx, m, ctl) },
			jetstream.PullMaxMessages(64),
			jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
				if !errors.Is(err, jetstream.ErrNoHeartbeat) || ctx.Err() == nil {
					log.Warn("consumer", "err", err)
				}
			}))
		if err != nil {
			return nil, fmt.Errorf("worker: consume %s on %s: %w", cc.Durable, stream, err)
		}
		return cctx, nil
	}
	cctx, err := start()
	if err != nil {
		return nil, err
	}
	log.Info("consuming", "consumer", cc.Durable)
	stop, done := make(chan struct{}), make(chan struct{})
	w.wg.Go(func() {
		defer close(done)
		for {
			select {
			case <-stop:
				cctx.Stop()
				return
			case <-cctx.Closed():
			}
			log.Warn("consumer gone; creating it again", "consumer", cc.Durable)
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Second):
				}
				c, err := start()
				if err == nil {
					cctx = c
					break
				}
				log.Warn("consume again", "consumer", cc.Durable, "err", err)
			}
		}
	})
	return sync.OnceFunc(func() { close(stop); <-done }), nil
}

// dispatch hands one delivery to the session's runner, starting one if
// the session has none in this worker.
func (w *Worker) dispatch(ctx context.Context, m jetstream.Msg, ctl bool) {
	meta, err := m.Metadata()
	if err != nil {
		w.log.Error("delivery without metadata", "subject", m.Subject(), "err", err)
		return
	}
	ref, err := w.names.ParseSession(m.Subject())
	if err != nil {
		if err := w.deadLetter(ctx, m.Subject(), m.Headers(), m.Data(), meta.Sequence.Stream, dlq.BadSubject, "subject does not name a session: "+err.Error()); err != nil {
			_ = m.NakWithDelay(5 * time.Second)
			return
		}
		_ = m.Term()
		return
	}
	d := delivery{msg: m, seq: meta.Sequence.Stream, ctl: ctl}
	w.mu.Lock()
	defer w.mu.Unlock()
	if r, ok := w.runners[ref.Key()]; ok {
		r.add(d)
		return
	}
	if ctx.Err() != nil || len(w.runners) >= w.cfg.MaxSessions {
		_ = m.NakWithDelay(time.Second)
		return
	}
	r := w.newRunner(ctx, ref)
	r.add(d)
}

// newRunner starts the session's runner; w.mu is held.
func (w *Worker) newRunner(ctx context.Context, ref streams.SessionRef) *runner {
	r := &runner{w: w, ref: ref, log: w.log.With("agent", ref.Agent, "session", ref.Session)}
	w.runners[ref.Key()] = r
	w.m.active.Inc()
	w.wg.Go(func() { r.run(ctx) })
	return r
}

// startRunner runs a session that has no delivery here (taken back from a
// dead incarnation), unless it runs already.
func (w *Worker) startRunner(ctx context.Context, ref streams.SessionRef) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.runners[ref.Key()]; ok || ctx.Err() != nil {
		return
	}
	w.newRunner(ctx, ref)
}

// deadLetter publishes an input the worker cannot use to JL_DLQ on
// jl.dlq.<reason> with the detail, keeping its data and headers (see
// package dlq). An input must not be consumed unless its dead letter is
// durable: the caller records it consumed only when deadLetter returned
// nil.
func (w *Worker) deadLetter(ctx context.Context, subject string, h nats.Header, data []byte, seq uint64, reason dlq.Reason, detail string) error {
	m, err := dlq.New(w.names, reason, detail, subject, seq, h, data)
	if err != nil {
		return fmt.Errorf("worker: dead letter of %s #%d: %w", subject, seq, err)
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := w.js.PublishMsg(pctx, m); err != nil {
		w.m.deadLetters.WithLabelValues("failed").Inc()
		w.log.Error("dead letter failed; the input stays unconsumed", "subject", subject, "seq", seq, "reason", reason, "detail", detail, "err", err)
		return fmt.Errorf("worker: dead letter of %s #%d (%s: %s): %w", subject, seq, reason, detail, err)
	}
	w.m.deadLetters.WithLabelValues("ok").Inc()
	w.log.Warn("input dead-lettered", "subject", subject, "seq", seq, "reason", reason, "detail", detail)
	return nil
}

// modelFor returns the model of an agent's definition version, built once.
func (w *Worker) modelFor(agent string, version uint64, build func() (model.Model, error)) (model.Model, error) {
	key := fmt.Sprintf("%s@%d", agent, version)
	w.modelsMu.Lock()
	defer w.modelsMu.Unlock()
	if m, ok := w.models[key]; ok {
		return m, nil
	}
	m, err := build()
	if err != nil {
		return nil, err
	}
	if len(w.models) > 1024 {
		clear(w.models)
	}
	w.models[key] = m
	return m, nil
}
