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
)

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
				// firing for good, and an unconsumed event must not vanish.
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
				AllowDirect: true,
			},
		},
		kv(n.BucketSessions(), "turn state and transcript entries",
			jetstream.KeyValueConfig{Description: "jetloop: session turn state and transcripts", History: 1, Storage: st, Replicas: r},
			func(c *jetstream.StreamConfig) { c.AllowAtomicPublish = true }),
		kv(n.BucketLeases(), "which worker owns a session now (per-key TTL)",
			jetstream.KeyValueConfig{Description: "jetloop: session leases", History: 1, Storage: st, Replicas: r, LimitMarkerTTL: markerTTL}, nil),
		kv(n.BucketDedupe(), "long-horizon dedupe keys (per-key TTL)",
			jetstream.KeyValueConfig{Description: "jetloop: long-horizon dedupe", History: 1, TTL: opts.DedupeTTL, Storage: st, Replicas: r, LimitMarkerTTL: markerTTL}, nil),
		kv(n.BucketAgents(), "versioned agent definitions",
			jetstream.KeyValueConfig{Description: "jetloop: agent definitions", History: DefaultAgentHistory, Storage: st, Replicas: r}, nil),
		kv(n.BucketRollouts(), "run counts of each agent's rollout, shared by every worker, which its guard judges",
			jetstream.KeyValueConfig{Description: "jetloop: rollout run counts", History: 1, Storage: st, Replicas: r}, nil),
		kv(n.BucketSlots(), "concurrency slots of agents' runs and the sessions queued for them (per-key TTL)",
			jetstream.KeyValueConfig{Description: "jetloop: concurrency slots", History: 1, Storage: st, Replicas: r, LimitMarkerTTL: markerTTL}, nil),
		kv(n.BucketSpend(), "what each agent spent per UTC day, of every session and per limit key (per-key TTL)",
			jetstream.KeyValueConfig{Description: "jetloop: spend per agent and day", History: 1, Storage: st, Replicas: r, LimitMarkerTTL: markerTTL}, nil),
		kv(n.BucketSchedules(), "schedule health: last fire, failures, breaker",
			jetstream.KeyValueConfig{Description: "jetloop: schedule health", History: 1, Storage: st, Replicas: r}, nil),
		kv(n.BucketLedger(), "usage of delegation trees: each session's run, its ceiling and the usage of every session below it, shared by every worker",
			jetstream.KeyValueConfig{Description: "jetloop: delegation ledger", History: 1, Storage: st, Replicas: r}, nil),
		{
			Kind: KindObject, Name: n.ObjectBlobs(),
			Purpose: "large tool results kept out of the context",
			Object:  &jetstream.ObjectStoreConfig{Bucket: n.ObjectBlobs(), Description: "jetloop: large tool results", Storage: st, Replicas: r},
			Stream:  jetstream.StreamConfig{Name: ObjectStream(n.ObjectBlobs()), Storage: st, Replicas: r},
		},
	}
}

// kv declares a bucket and the fields of its stream that Provision keeps in
// step; extra adds settings the KV API cannot express (atomic publish).
func kv(bucket, purpose string, cfg jetstream.KeyValueConfig, extra func(*jetstream.StreamConfig)) Resource {
	cfg.Bucket = bucket
	sc := jetstream.StreamConfig{
		Name:              KVStream(bucket),
		Storage:           cfg.Storage,
		Replicas:          cfg.Replicas,
		MaxAge:            cfg.TTL,
		MaxMsgsPerSubject: int64(cfg.History),
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
