package streams

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of Options.
const (
	DefaultDedupeWindow = 2 * time.Minute
	DefaultDedupeTTL    = 72 * time.Hour
	DefaultAuditMaxAge  = 14 * 24 * time.Hour
	DefaultAgentHistory = 64
	// markerTTL is how long KV buckets with per-key TTL keep the delete
	// markers of expired keys, so watchers see expirations.
	markerTTL = 5 * time.Minute
	// DefaultStorageBudget is what every stream and bucket together may
	// hold on file storage; each takes its share (see Limits).
	DefaultStorageBudget = 8 << 30
	// DefaultMemoryBudget is the same with Options.Memory.
	DefaultMemoryBudget = 1 << 30
)

// Limit bounds one stream or bucket.
type Limit struct {
	// Bytes and Msgs are its max_bytes and max_msgs.
	Bytes int64 `json:"bytes"`
	Msgs  int64 `json:"msgs"`
}

// role is what a resource is for, which sets its share of the budget.
type role int

const (
	roleIn role = iota
	roleCtl
	roleDLQ
	roleAudit
	roleSessions
	roleDedupe
	roleBlobs
	roleSmall // leases, agents, rollouts, slots, spend, schedules, ledger
	roleStatus
)

// shares are each role's part of the storage budget, in thousandths, and
// its message limit. What is not yet consumed (events, control messages,
// sessions, dead letters waiting for a redrive, blobs a session will read)
// is refused when full, never dropped; see Layout.
var shares = map[role]struct {
	permille int64
	msgs     int64
}{
	roleIn:       {300, 10_000_000},
	roleCtl:      {40, 1_000_000},
	roleDLQ:      {50, 1_000_000},
	roleAudit:    {80, 10_000_000},
	roleSessions: {240, 20_000_000},
	roleDedupe:   {60, 10_000_000},
	roleBlobs:    {180, 1_000_000},
	roleSmall:    {5, 1_000_000},
	// One summary (a few hundred bytes) per session.
	roleStatus: {10, 2_000_000},
}

// Limits returns the limits Layout declares for every resource with opts,
// by name.
func Limits(opts Options) map[string]Limit {
	out := map[string]Limit{}
	for _, r := range Layout(opts) {
		out[r.Name] = Limit{Bytes: r.Stream.MaxBytes, Msgs: r.Stream.MaxMsgs}
	}
	return out
}

func (o Options) limit(name string, ro role) Limit {
	if l, ok := o.Limits[name]; ok {
		return l
	}
	sh := shares[ro]
	return Limit{Bytes: o.StorageBudget * sh.permille / 1000, Msgs: sh.msgs}
}

// Options shape the layout that Provision declares.
type Options struct {
	// Names are the deployment's names; the zero value uses DefaultPrefix.
	Names Names
	// Replicas of every stream and bucket: 1 on a single server, 3 (or 5)
	// on a cluster. Zero creates missing resources at 1 and leaves the
	// replicas of existing ones alone, so a component started without the
	// setting never scales a deployment down.
	Replicas int
	// DedupeWindow is the Nats-Msg-Id window of JL_IN and JL_CTL.
	// Zero: 2 minutes for new streams, existing ones left as they are.
	DedupeWindow time.Duration
	// DedupeTTL is how long jl_dedupe remembers an event.
	// Zero: 72 hours for a new bucket, an existing one left as it is.
	DedupeTTL time.Duration
	// AuditMaxAge is how long JL_AUDIT keeps decision records.
	// Zero: 14 days for a new stream, an existing one left as it is.
	AuditMaxAge time.Duration
	// Memory keeps every stream in memory instead of files: for benchmarks
	// only, since a restart loses everything.
	Memory bool
	// StorageBudget is what every stream and bucket together may hold, in
	// bytes; each gets a share by purpose (the README's Security section
	// lists them) and a message limit. Zero: DefaultStorageBudget (with
	// Memory, DefaultMemoryBudget) for new resources and for existing ones
	// without limits, while existing limits are left as an operator set
	// them. The server must have the room: it reserves each resource's
	// max_bytes when the resource is made.
	StorageBudget int64
	// Limits sets the limits of single resources, by name, over their
	// share of the budget; like StorageBudget, they are brought in step on
	// existing resources.
	Limits map[string]Limit
}

func (o *Options) setDefaults() {
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.DedupeWindow == 0 {
		o.DedupeWindow = DefaultDedupeWindow
	}
	if o.DedupeTTL == 0 {
		o.DedupeTTL = DefaultDedupeTTL
	}
	if o.AuditMaxAge == 0 {
		o.AuditMaxAge = DefaultAuditMaxAge
	}
	if o.StorageBudget == 0 {
		o.StorageBudget = DefaultStorageBudget
		if o.Memory {
			o.StorageBudget = DefaultMemoryBudget
		}
	}
}

func (o Options) storage() jetstream.StorageType {
	if o.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// Kind is the kind of a JetStream resource.
type Kind string

// Kinds of resources.
const (
	KindStream Kind = "stream"
	KindKV     Kind = "kv"
	KindObject Kind = "object"
)

// Resource is one declared stream, KV bucket or object store.
type Resource struct {
	Kind Kind
	// Name is the stream, bucket or object store name.
	Name string
	// Stream is the declared config of the stream itself; for a bucket, of
	// the stream behind it (only the fields Provision manages are set).
	Stream jetstream.StreamConfig
	// KV is set for a KV bucket.
	KV *jetstream.KeyValueConfig
	// Object is set for an object store.
	Object *jetstream.ObjectStoreConfig
	// Purpose says what the resource holds.
	Purpose string
}

// StreamName is the name of the stream that stores the resource.
func (r Resource) StreamName() string {
	switch r.Kind {
	case KindKV:
		return KVStream(r.Name)
	case KindObject:
		return ObjectStream(r.Name)
	}
	return r.Name
}

// Layout declares every stream, bucket and object store of DESIGN §4 with
// opts applied, in the order Provision creates them.
func Layout(opts Options) []Resource {
	opts.setDefaults()
	n, st, r := opts.Names, opts.storage(), opts.Replicas
	return []Resource{
		{
			Kind: KindStream, Name: n.StreamIn(),
			Purpose: "admitted events and ticks per agent and session; schedule messages; pending debounced and throttled events",
			Stream: jetstream.StreamConfig{
				Name:        n.StreamIn(),
				Description: "jetloop: admitted events, ticks, schedules, debounced and throttled events, timers",
				Subjects:    []string{n.InAll(), n.SchedAll(), n.DebounceAll(), n.ThrottleAll(), n.TimerAll()},
				Retention:   jetstream.LimitsPolicy,
				Storage:     st,
				Replicas:    r,
				Duplicates:  opts.DedupeWindow,
				// No MaxAge: a schedule message removed by a limit stops
				// firing (DESIGN §10), and an unconsumed event must not
				// vanish. The server refuses discard new on a stream with
				// message schedules, so jetloop refuses new events itself
				// at half the limits (Room), and the server's own limits,
				// where the oldest would go, stay a backstop that the
				// ingest keeps the stream from reaching.
				MaxBytes:          2 * opts.limit(n.StreamIn(), roleIn).Bytes,
				MaxMsgs:           2 * opts.limit(n.StreamIn(), roleIn).Msgs,
				AllowMsgTTL:       true,
				AllowMsgSchedules: true,
				// Debounce replaces a session's pending event with Nats-Rollup: sub.
				AllowRollup: true,
				AllowDirect: true,
			},
		},
		{
			Kind: KindStream, Name: n.StreamCtl(),
			Purpose: "control messages per agent and session",
			Stream: jetstream.StreamConfig{
				Name:        n.StreamCtl(),
				Description: "jetloop: control messages (steer, interrupt, resume, cancel, approve, deny, fork)",
				Subjects:    []string{n.CtlAll()},
				Retention:   jetstream.LimitsPolicy,
				Storage:     st,
				Replicas:    r,
				Duplicates:  opts.DedupeWindow,
				// A message not yet applied must not vanish.
				Discard:     jetstream.DiscardNew,
				MaxBytes:    opts.limit(n.StreamCtl(), roleCtl).Bytes,
				MaxMsgs:     opts.limit(n.StreamCtl(), roleCtl).Msgs,
				AllowDirect: true,
			},
		},
		{
			Kind: KindStream, Name: n.StreamDLQ(),
			Purpose: "events that could not be admitted or processed, with the reason",
			Stream: jetstream.StreamConfig{
				Name:        n.StreamDLQ(),
				Description: "jetloop: dead letters with their reason",
				Subjects:    []string{n.DLQAll()},
				Retention:   jetstream.LimitsPolicy,
				Storage:     st,
				Replicas:    r,
				// A dead letter holds an event that may be redriven: a
				// full stream refuses the next one (its sender retries)
				// rather than dropping an old one silently.
				Discard:     jetstream.DiscardNew,
				MaxBytes:    opts.limit(n.StreamDLQ(), roleDLQ).Bytes,
				MaxMsgs:     opts.limit(n.StreamDLQ(), roleDLQ).Msgs,
				AllowDirect: true,
			},
		},
		{
			Kind: KindStream, Name: n.StreamAudit(),
			Purpose: "admission decisions and status changes",
			Stream: jetstream.StreamConfig{
				Name:        n.StreamAudit(),
				Description: "jetloop: admission decisions and status changes",
				Subjects:    []string{n.AuditAll()},
				Retention:   jetstream.LimitsPolicy,
				Storage:     st,
				Replicas:    r,
				MaxAge:      opts.AuditMaxAge,
				// Records of what happened: the oldest go first, so that a
				// full audit trail never stops admission.
				Discard:     jetstream.DiscardOld,
				MaxBytes:    opts.limit(n.StreamAudit(), roleAudit).Bytes,
				MaxMsgs:     opts.limit(n.StreamAudit(), roleAudit).Msgs,
				AllowDirect: true,
			},
		},
		kv(n.BucketSessions(), "turn state and transcript entries", opts.limit(n.BucketSessions(), roleSessions),
			jetstream.KeyValueConfig{Description: "jetloop: session turn state and transcripts", History: 1, Storage: st, Replicas: r},
			func(c *jetstream.StreamConfig) { c.AllowAtomicPublish = true }),
		kv(n.BucketLeases(), "which worker owns a session now (per-key TTL)", opts.limit(n.BucketLeases(), roleSmall),
			jetstream.KeyValueConfig{Description: "jetloop: session leases", History: 1, Storage: st, Replicas: r, LimitMarkerTTL: markerTTL}, nil),
		// Ids remembered for a while, not data anyone consumes: a full
		// bucket forgets its oldest ids (its horizon shortens) rather than
		// refuse the next record, which would refuse nothing (the ingest
		// records after it published) but turn a delivery's 2xx into 503
		// and keep every control message from being applied.
		kv(n.BucketDedupe(), "long-horizon dedupe keys (per-key TTL)", opts.limit(n.BucketDedupe(), roleDedupe),
			jetstream.KeyValueConfig{Description: "jetloop: long-horizon dedupe", History: 1, TTL: opts.DedupeTTL, Storage: st, Replicas: r, LimitMarkerTTL: markerTTL},
			func(c *jetstream.StreamConfig) { c.Discard = jetstream.DiscardOld }),
		kv(n.BucketAgents(), "versioned agent definitions", opts.limit(n.BucketAgents(), roleSmall),
			jetstream.KeyValueConfig{Description: "jetloop: agent definitions", History: DefaultAgentHistory, Storage: st, Replicas: r}, nil),
		kv(n.BucketRollouts(), "run counts of each agent's rollout, shared by every worker, which its guard judges", opts.limit(n.BucketRollouts(), roleSmall),
			jetstream.KeyValueConfig{Description: "jetloop: rollout run counts", History: 1, Storage: st, Replicas: r}, nil),
		kv(n.BucketSlots(), "concurrency slots of agents' runs and the sessions queued for them (per-key TTL)", opts.limit(n.BucketSlots(), roleSmall),
			jetstream.KeyValueConfig{Description: "jetloop: concurrency slots", History: 1, Storage: st, Replicas: r, LimitMarkerTTL: markerTTL}, nil),
		kv(n.BucketSpend(), "what each agent spent per UTC day, of every session and per limit key (per-key TTL)", opts.limit(n.BucketSpend(), roleSmall),
			jetstream.KeyValueConfig{Description: "jetloop: spend per agent and day", History: 1, Storage: st, Replicas: r, LimitMarkerTTL: markerTTL}, nil),
		kv(n.BucketSchedules(), "schedule health: last fire, failures, breaker", opts.limit(n.BucketSchedules(), roleSmall),
			jetstream.KeyValueConfig{Description: "jetloop: schedule health", History: 1, Storage: st, Replicas: r}, nil),
		kv(n.BucketStatus(), "status index: one key per session, <status>.<agent>.<session>, so which sessions are blocked is a key filter", opts.limit(n.BucketStatus(), roleStatus),
			jetstream.KeyValueConfig{Description: "jetloop: sessions by status", History: 1, Storage: st, Replicas: r, LimitMarkerTTL: markerTTL}, nil),
		kv(n.BucketLedger(), "usage of delegation trees: each session's run, its ceiling and the usage of every session below it, shared by every worker", opts.limit(n.BucketLedger(), roleSmall),
			jetstream.KeyValueConfig{Description: "jetloop: delegation ledger", History: 1, Storage: st, Replicas: r}, nil),
		{
			Kind: KindObject, Name: n.ObjectBlobs(),
			Purpose: "large tool results kept out of the context",
			Object: &jetstream.ObjectStoreConfig{Bucket: n.ObjectBlobs(), Description: "jetloop: large tool results", Storage: st, Replicas: r,
				MaxBytes: opts.limit(n.ObjectBlobs(), roleBlobs).Bytes},
			Stream: jetstream.StreamConfig{Name: ObjectStream(n.ObjectBlobs()), Storage: st, Replicas: r, Discard: jetstream.DiscardNew,
				MaxBytes: opts.limit(n.ObjectBlobs(), roleBlobs).Bytes, MaxMsgs: opts.limit(n.ObjectBlobs(), roleBlobs).Msgs},
		},
	}
}

// kv declares a bucket and the fields of its stream that Provision keeps in
// step; extra adds settings the KV API cannot express (atomic publish).
// A bucket refuses writes when full (discard new, as the KV API makes
// it), which is what a bucket of state wants: no key vanishes to make
// room; extra may declare otherwise.
func kv(bucket, purpose string, l Limit, cfg jetstream.KeyValueConfig, extra func(*jetstream.StreamConfig)) Resource {
	cfg.Bucket = bucket
	cfg.MaxBytes = l.Bytes
	sc := jetstream.StreamConfig{
		Name:              KVStream(bucket),
		Storage:           cfg.Storage,
		Replicas:          cfg.Replicas,
		MaxAge:            cfg.TTL,
		MaxMsgsPerSubject: int64(cfg.History),
		MaxBytes:          l.Bytes,
		MaxMsgs:           l.Msgs,
		Discard:           jetstream.DiscardNew,
	}
	if cfg.LimitMarkerTTL > 0 {
		sc.AllowMsgTTL = true
		sc.SubjectDeleteMarkerTTL = cfg.LimitMarkerTTL
	}
	if extra != nil {
		extra(&sc)
	}
	return Resource{Kind: KindKV, Name: bucket, Purpose: purpose, KV: &cfg, Stream: sc}
}
