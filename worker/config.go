package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/proctree"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/tools/mcp"
)

// Defaults of Config.
const (
	DefaultMaxSessions   = 256
	DefaultToolTimeout   = 2 * time.Minute
	DefaultShutdownGrace = 10 * time.Second
	// DefaultMaxRecoveries bounds how often recovery makes one step's effect
	// again, so a step that kills its worker every time cannot loop.
	DefaultMaxRecoveries = 3
	// DefaultEventHorizon is how many of its consumed events a living
	// session keeps in JL_IN: the events read_event can reach.
	DefaultEventHorizon = 256
)

// Definitions is where the worker reads the agents it runs.
type Definitions interface {
	// Get returns the latest definition of agent, with its Version set.
	Get(ctx context.Context, agent string) (policies.Definition, error)
}

// VersionedDefinitions keep sessions on the version they resolved and
// run canary rollouts (*policies.Store is one): Resolve says which
// version a session's next run uses (see policies.Store.Resolve), Pinned
// reads exactly the version a session recorded (for a run taken over
// mid-way), and RecordRun counts a finished run for the rollout's guard.
// A Definitions without them runs every run on the latest version.
type VersionedDefinitions interface {
	Definitions
	Resolve(ctx context.Context, agent, session string, cur policies.Pinned) (policies.Resolution, error)
	Pinned(ctx context.Context, agent, session string, p policies.Pinned) (policies.Resolution, error)
	RecordRun(ctx context.Context, agent string, version uint64, failed bool) (policies.RunRecorded, error)
}

// Tools finds a tool by name.
type Tools interface {
	Get(name string) (tools.Tool, bool)
}

// ToolMap is a fixed set of tools by name.
type ToolMap map[string]tools.Tool

// Get returns the tool called name.
func (m ToolMap) Get(name string) (tools.Tool, bool) {
	t, ok := m[name]
	return t, ok
}

// ModelFactory builds the model a definition names.
type ModelFactory func(spec policies.Model) (model.Model, error)

// ScriptedOnly is the ModelFactory that knows only the scripted provider.
func ScriptedOnly(spec policies.Model) (model.Model, error) {
	if spec.Provider != model.ProviderScripted {
		return nil, fmt.Errorf("model provider %q is not available in this worker (only %q)", spec.Provider, model.ProviderScripted)
	}
	return model.New(spec)
}

// Phase is a point in a step at which Config.Trace is called.
type Phase string

// Phases of a step, in order.
const (
	// PhaseIntent: the step is decided; its intent is not written yet.
	PhaseIntent Phase = "intent"
	// PhaseEffect: the intent is durable; the effect has not begun.
	PhaseEffect Phase = "effect"
	// PhaseSettle: the effect is done; its settlement is not written.
	PhaseSettle Phase = "settle"
	// PhaseCreate: the first entry of a settlement of several is
	// created, the others are not.
	PhaseCreate Phase = "create"
	// PhaseCreated: the settlement's entries are created; the state that
	// names them is not written.
	PhaseCreated Phase = "created"
	// PhaseSettled: the settlement is durable.
	PhaseSettled Phase = "settled"
	// PhaseAck: the run rests; the inputs it consumed are not acked yet.
	PhaseAck Phase = "ack"
	// PhaseControl: a control message is applied (its sequence recorded in
	// the state); its delivery is not acked yet. Step is its JL_CTL
	// sequence, Control its verb.
	PhaseControl Phase = "control"
)

// TracePoint says where a session's run is.
type TracePoint struct {
	Phase          Phase
	Agent, Session string
	Kind           record.StepKind
	// Step is the step's number; at PhaseAck, the number of steps settled.
	Step         uint64
	Tool, CallID string
	// Recovery marks a step resumed from an earlier worker's intent.
	Recovery bool
	// Control is the verb of a control message (PhaseControl).
	Control string
	// Compact marks the model step of a compaction.
	Compact bool
}

// AdmitFunc runs an event the worker makes (the start of a delegated
// session) through the pipeline every event takes: dedupe, admission and
// publish (ingest.Pipeline), and says what it decided. An error means
// the event may not be stored and should be made again; a refusal is an
// answer.
type AdmitFunc func(ctx context.Context, e event.Event) (Admission, error)

// Admission is what the pipeline decided for an event.
type Admission struct {
	// Duplicate: the event was handled before; Admitted and Refused are
	// what was decided then.
	Duplicate bool
	// Admitted are the sessions the event went to, "agent/session".
	Admitted []string
	// Refused are the reasons its agent refused it.
	Refused []string
	// Conflict, when set, says why the pipeline refused the event as a
	// conflict: its id was used before for another event (ingest's
	// ErrConflict, a 409). Made again, it would be refused again.
	Conflict string
}

// Config configures a Worker. The zero values of optional fields are
// usable defaults.
type Config struct {
	// ID names this worker among all workers: it is the lease owner and
	// shows in logs and states. Required.
	ID string
	// Names are the deployment's names; zero uses the default prefix.
	Names streams.Names
	// Definitions are the agents to run. Required.
	Definitions Definitions
	// Models builds a definition's model; default ScriptedOnly.
	Models ModelFactory
	// Tools are the tools definitions may name; nil: none. When it is a
	// Mounter (RegistryTools), MCP servers' tools are called through it
	// too.
	Tools Tools
	// Reply posts a run's final answer into the chat thread its event came
	// from (tools.SlackReply), as a step of its own with a probe; nil:
	// answers stay in the transcript.
	Reply tools.Prober
	// MCP configures the connections to the MCP servers definitions
	// declare (mcp_servers), one per session and server, closed when the
	// session rests.
	MCP mcp.Options
	// Agents fixes the agents this worker serves; empty: every agent in
	// jl_agents, as they come and go.
	Agents []string
	// LeaseTTL is the session lease's lifetime without renewal; renewed
	// every third of it. Default DefaultLeaseTTL.
	LeaseTTL time.Duration
	// AckWait is how long the agents' consumers wait for an ack or a
	// progress signal before redelivering; every worker of a deployment
	// must use the same. Default streams.DefaultInAckWait.
	AckWait time.Duration
	// MaxSessions bounds sessions running at once in this worker.
	MaxSessions int
	// ToolTimeout bounds a tool call whose spec sets no timeout.
	ToolTimeout time.Duration
	// WorkDir is the folder under which each session gets its work folder.
	// Every worker of a deployment on one machine should share one, so a
	// session finds its files whichever runs it; default
	// <tmp>/jetloop-work/<prefix>-<worker id>, this worker's own, so no two
	// deployments (or tests) share session folders by accident.
	WorkDir string
	// Trees, when set, is the starter its tools run processes through
	// (package proctree): before the worker consumes anything it kills
	// what the trees of dead processes left running (Sweep), and again
	// before it recovers an interrupted tool call (its worker may have
	// died after this one started), so a tool call is never settled
	// "interrupted; may or may not have run", probed or run again while
	// its processes still run on this machine. Nil: no sweep.
	Trees *proctree.Starter
	// ShutdownGrace is how long a stopping worker lets in-flight steps
	// finish before it cancels them (their intents stay for recovery).
	ShutdownGrace time.Duration
	// MaxRecoveries bounds how often one step's effect is made again.
	MaxRecoveries int
	// RetentionInterval is how often the worker applies the retention of
	// the agents it serves (one worker of many does each pass); default
	// DefaultRetentionInterval, negative: never (Retain still works).
	RetentionInterval time.Duration
	// EventHorizon is how many of its consumed events a session keeps in
	// JL_IN, the newest, when it rests: older ones are removed, so a
	// long-lived session's events do not grow without bound (read_event
	// answers for one past the horizon that it is no longer kept).
	// Unconsumed events are never removed. Default DefaultEventHorizon;
	// negative: every consumed event is kept until retention removes the
	// session.
	EventHorizon int
	// Shares bound an agent's part of JL_IN's room (streams.Shares) for
	// the worker's writes that start new work (an ephemeral tick's
	// session); zero: the defaults.
	Shares streams.Shares
	// Admit publishes the delegate events of delegate calls through the
	// admission pipeline. Nil: a delegate call answers that this worker
	// cannot start sessions.
	Admit AdmitFunc
	// Log receives one line per event with agent, session, turn and step.
	Log *slog.Logger
	// Metrics collects Prometheus metrics; nil: unregistered ones.
	Metrics *Metrics
	// Trace, if set, is called at every phase of every step, in the
	// session's goroutine; it may block (crash tests stop a worker there).
	Trace func(ctx context.Context, p TracePoint)
	// Tracer starts the OpenTelemetry spans of runs, model calls, tool
	// calls and control messages (see package tracing); nil: otel's
	// global provider, which records nothing unless a process set one.
	Tracer trace.TracerProvider
}

func (c *Config) setDefaults() {
	if c.Models == nil {
		c.Models = ScriptedOnly
	}
	if c.Tools == nil {
		c.Tools = ToolMap{}
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.AckWait == 0 {
		c.AckWait = streams.DefaultInAckWait
	}
	if c.MaxSessions == 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	if c.ToolTimeout == 0 {
		c.ToolTimeout = DefaultToolTimeout
	}
	if c.WorkDir == "" {
		c.WorkDir = filepath.Join(os.TempDir(), "jetloop-work", c.Names.Prefix()+"-"+strings.ReplaceAll(c.ID, string(filepath.Separator), "_"))
	}
	if c.EventHorizon == 0 {
		c.EventHorizon = DefaultEventHorizon
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}
	if c.MaxRecoveries == 0 {
		c.MaxRecoveries = DefaultMaxRecoveries
	}
	if c.RetentionInterval == 0 {
		c.RetentionInterval = DefaultRetentionInterval
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
}

// Validate reports what is missing or out of range.
func (c Config) Validate() error {
	var errs []error
	if c.ID == "" {
		errs = append(errs, errors.New("ID is empty"))
	}
	if c.Definitions == nil {
		errs = append(errs, errors.New("Definitions is nil"))
	}
	if c.LeaseTTL != 0 && c.LeaseTTL < time.Second {
		errs = append(errs, fmt.Errorf("LeaseTTL %s: want at least 1s", c.LeaseTTL))
	}
	if c.AckWait != 0 && c.AckWait < time.Second {
		errs = append(errs, fmt.Errorf("AckWait %s: want at least 1s", c.AckWait))
	}
	if c.MaxSessions < 0 {
		errs = append(errs, fmt.Errorf("MaxSessions %d is negative", c.MaxSessions))
	}
	for _, a := range c.Agents {
		if _, err := c.Names.InAgent(a); err != nil {
			errs = append(errs, fmt.Errorf("agent %q: %w", a, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("worker config: %w", err)
	}
	return nil
}

// RegistryTools serves the tools of a tools.Registry, each call made
// through Registry.Run: its arguments validated against the schema, its
// timeout applied, a panic turned into an error result, and a large
// result offloaded to jl_blobs.
func RegistryTools(r *tools.Registry) Tools { return registryTools{r} }

type registryTools struct{ r *tools.Registry }

// Mount wraps a tool the registry does not hold with its rules.
func (rt registryTools) Mount(t tools.Tool) (tools.Tool, error) { return rt.r.Mount(t) }

func (rt registryTools) Get(name string) (tools.Tool, bool) {
	t, err := rt.r.Get(name)
	if err != nil {
		return nil, false
	}
	f := tools.NewFunc(t.Spec(), func(ctx context.Context, c tools.Call) (tools.Result, error) {
		return rt.r.Run(ctx, name, c)
	})
	if _, ok := t.(tools.Prober); ok {
		return probing{Tool: f, probe: func(ctx context.Context, c tools.Call) (tools.Result, bool, error) {
			return rt.r.Probe(ctx, name, c)
		}}, true
	}
	return f, true
}

// probing is a registry tool with its probe.
type probing struct {
	tools.Tool
	probe func(context.Context, tools.Call) (tools.Result, bool, error)
}

func (p probing) Probe(ctx context.Context, c tools.Call) (tools.Result, bool, error) {
	return p.probe(ctx, c)
}
