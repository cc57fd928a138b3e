package tools

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetloop/jetloop/streams"
)

// DefaultTimeout bounds a call whose tool declares no timeout.
const DefaultTimeout = 2 * time.Minute

// blobPutTimeout bounds storing one offloaded result. The store write
// outlives the call's context: a cancelled call's partial output is still
// settled, and must be readable.
const blobPutTimeout = 10 * time.Second

// RegistryOptions configures a Registry. The zero value is usable: results
// above the threshold are then truncated instead of offloaded.
type RegistryOptions struct {
	// Timeout bounds a call whose Spec.Timeout is 0 (default
	// DefaultTimeout).
	Timeout time.Duration
	// MaxArgsBytes bounds a call's arguments (default DefaultMaxArgsBytes).
	MaxArgsBytes int
	// BlobThreshold is the result size in bytes above which the full
	// content goes to Blobs (default DefaultBlobThreshold).
	BlobThreshold int
	// PreviewLines and PreviewBytes bound what stays in the context of an
	// offloaded result (defaults DefaultPreviewLines, DefaultPreviewBytes).
	PreviewLines, PreviewBytes int
	// Blobs stores large results (the jl_blobs object store). Without it a
	// large result is truncated to BlobThreshold bytes.
	Blobs BlobStore
	// Names spells blob names (default streams.Default()).
	Names streams.Names
	// Logger receives one line per failed, timed-out or panicking call
	// (default slog.Default()).
	Logger *slog.Logger
	// Metrics registers the registry's collectors when set.
	Metrics prometheus.Registerer
}

func (o *RegistryOptions) setDefaults() {
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxArgsBytes == 0 {
		o.MaxArgsBytes = DefaultMaxArgsBytes
	}
	if o.BlobThreshold == 0 {
		o.BlobThreshold = DefaultBlobThreshold
	}
	if o.PreviewLines == 0 {
		o.PreviewLines = DefaultPreviewLines
	}
	if o.PreviewBytes == 0 {
		o.PreviewBytes = DefaultPreviewBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports options that cannot work.
func (o RegistryOptions) Validate() error {
	switch {
	case o.Timeout < 0:
		return fmt.Errorf("tools: timeout %v is negative", o.Timeout)
	case o.MaxArgsBytes < 0:
		return fmt.Errorf("tools: max args bytes %d is negative", o.MaxArgsBytes)
	case o.BlobThreshold < 0:
		return fmt.Errorf("tools: blob threshold %d is negative", o.BlobThreshold)
	case o.PreviewLines < 0 || o.PreviewBytes < 0:
		return fmt.Errorf("tools: preview bounds %d lines, %d bytes: negative", o.PreviewLines, o.PreviewBytes)
	case o.PreviewBytes > o.BlobThreshold && o.BlobThreshold > 0:
		return fmt.Errorf("tools: preview of %d bytes exceeds the blob threshold %d", o.PreviewBytes, o.BlobThreshold)
	}
	return nil
}

// toolName is what model APIs accept, plus '.' for namespaced MCP tools.
var toolName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// Registry holds the tools a worker can run, with their compiled schemas.
// It is immutable after NewRegistry and safe for concurrent use.
type Registry struct {
	opts    RegistryOptions
	tools   map[string]entry
	names   []string
	metrics *metrics
}

type entry struct {
	tool   Tool
	spec   Spec
	schema *argsSchema
}

// NewRegistry checks and compiles each tool's spec. It refuses a duplicate
// name, a name a model API would not accept, an unknown statefulness, a
// negative timeout and a schema that does not compile or does not describe
// an object.
func NewRegistry(opts RegistryOptions, ts ...Tool) (*Registry, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	r := &Registry{opts: opts, tools: make(map[string]entry, len(ts)), metrics: newMetrics()}
	for i, t := range ts {
		if t == nil {
			return nil, fmt.Errorf("tools: tool %d is nil", i)
		}
		s := t.Spec()
		if !toolName.MatchString(s.Name) {
			return nil, fmt.Errorf("tools: tool %d: name %q: want 1-64 of [A-Za-z0-9_.-]", i, s.Name)
		}
		if _, dup := r.tools[s.Name]; dup {
			return nil, fmt.Errorf("tools: tool %q registered twice", s.Name)
		}
		e, err := check(t, s)
		if err != nil {
			return nil, err
		}
		r.tools[s.Name] = e
		r.names = append(r.names, s.Name)
	}
	slices.Sort(r.names)
	if opts.Metrics != nil {
		if err := r.metrics.register(opts.Metrics); err != nil {
			return nil, fmt.Errorf("tools: register metrics: %w", err)
		}
	}
	return r, nil
}

// check checks a tool's spec and compiles its schema.
func check(t Tool, s Spec) (entry, error) {
	if !toolName.MatchString(s.Name) {
		return entry{}, fmt.Errorf("tools: name %q: want 1-64 of [A-Za-z0-9_.-]", s.Name)
	}
	if strings.TrimSpace(s.Description) == "" {
		return entry{}, fmt.Errorf("tools: tool %q has no description", s.Name)
	}
	switch s.State {
	case Stateless, Connection, Resource:
	default:
		return entry{}, fmt.Errorf("tools: tool %q: statefulness %q: want %q, %q or %q", s.Name, s.State, Stateless, Connection, Resource)
	}
	if s.Timeout < 0 {
		return entry{}, fmt.Errorf("tools: tool %q: timeout %v is negative", s.Name, s.Timeout)
	}
	sch, err := compileSchema(s.Name, s.Schema)
	if err != nil {
		return entry{}, fmt.Errorf("tools: %w", err)
	}
	return entry{tool: t, spec: s, schema: sch}, nil
}

// Mount checks and compiles a tool that is not registered, one whose spec
// is known only at run time (an MCP server's tool, from the catalog an
// agent's definition recorded), and returns it wrapped so that every call
// follows Run's rules: arguments validated against its schema, its
// timeout, a panic turned into an error result, a large result offloaded
// to the blob store. A mounted name may shadow no registered tool.
func (r *Registry) Mount(t Tool) (Tool, error) {
	if t == nil {
		return nil, errors.New("tools: mount: tool is nil")
	}
	s := t.Spec()
	if _, dup := r.tools[s.Name]; dup {
		return nil, fmt.Errorf("tools: mount %q: a registered tool has that name", s.Name)
	}
	e, err := check(t, s)
	if err != nil {
		return nil, err
	}
	return NewFunc(s, func(ctx context.Context, c Call) (Result, error) { return r.run(ctx, e, c) }), nil
}

// Get returns the named tool, or an error wrapping ErrUnknownTool.
func (r *Registry) Get(name string) (Tool, error) {
	e, ok := r.tools[name]
	if !ok {
		return nil, fmt.Errorf("tools: %w %q", ErrUnknownTool, name)
	}
	return e.tool, nil
}

// Names lists the registered tools, sorted.
func (r *Registry) Names() []string { return slices.Clone(r.names) }

// Specs returns the specs of the named tools, in the order given and
// without repeats: the tools an agent declares. Names that are not
// registered fail together, in one error wrapping ErrUnknownTool.
func (r *Registry) Specs(names []string) ([]Spec, error) {
	specs := make([]Spec, 0, len(names))
	seen := make(map[string]bool, len(names))
	var unknown []string
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		e, ok := r.tools[n]
		if !ok {
			unknown = append(unknown, fmt.Sprintf("%q", n))
			continue
		}
		specs = append(specs, e.spec)
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("tools: %w: %s (registered: %s)", ErrUnknownTool, strings.Join(unknown, ", "), strings.Join(r.names, ", "))
	}
	return specs, nil
}

// Validate checks arguments against the named tool's schema without
// running it; an approval rule, say, can then trust their shape. A
// mismatch is an *ArgsError.
func (r *Registry) Validate(name string, args []byte) error {
	e, ok := r.tools[name]
	if !ok {
		return fmt.Errorf("tools: %w %q", ErrUnknownTool, name)
	}
	v, err := parseArgs(name, args, r.opts.MaxArgsBytes)
	if err != nil {
		return err
	}
	return e.schema.validate(v)
}

// errTimeout is the cause of a call context that reached its timeout.
var errTimeout = errors.New("tool call timed out")

// Run makes one call of the named tool: it validates the arguments,
// bounds the call by the tool's timeout, turns a panic into an error
// result, and offloads a result larger than the threshold to the blob
// store, leaving its first lines and the handle in Content.
//
// What the model should see is a Result: an unknown tool, arguments that
// do not match the schema (naming the field), a timeout, a panic, a
// non-zero exit. The error is for the runtime and comes with a Result that
// can still be settled: it wraps ctx's error when ctx ended during the call
// (the session was cancelled), or the tool's own error when the call could
// not be made.
//
// Run calls the tool on the caller's goroutine; a tool must return soon
// after its context ends.
func (r *Registry) Run(ctx context.Context, name string, call Call) (Result, error) {
	e, ok := r.tools[name]
	if !ok {
		r.metrics.calls.WithLabelValues("", outcomeUnknown).Inc()
		return Result{IsError: true, Content: fmt.Sprintf("unknown tool %q; available tools: %s", name, strings.Join(r.names, ", "))}, nil
	}
	return r.run(ctx, e, call)
}

// run makes one call of a checked tool (see Run).
func (r *Registry) run(ctx context.Context, e entry, call Call) (Result, error) {
	name := e.spec.Name
	log := r.opts.Logger.With("agent", call.Agent, "session", call.Session, "call", call.ID, "tool", name)
	err := func() error {
		v, err := parseArgs(name, call.Args, r.opts.MaxArgsBytes)
		if err != nil {
			return err
		}
		return e.schema.validate(v)
	}()
	if err != nil {
		r.metrics.calls.WithLabelValues(name, outcomeInvalid).Inc()
		return Result{IsError: true, Content: err.Error()}, nil
	}
	timeout := e.spec.Timeout
	if timeout == 0 {
		timeout = r.opts.Timeout
	}
	cctx, cancel := context.WithTimeoutCause(ctx, timeout, errTimeout)
	start := time.Now()
	res, err := safeCall(cctx, e.tool, call)
	cancel()
	elapsed := time.Since(start)
	r.metrics.seconds.WithLabelValues(name).Observe(elapsed.Seconds())

	var outcome string
	switch {
	case ctx.Err() != nil:
		// A call that finished despite the cancel keeps its result: it
		// happened. Either way the caller learns that ctx ended.
		outcome = outcomeCancelled
		if err != nil || res.IsError {
			res.IsError = true
			res.Block = false
			res.Content = joinNote(res.Content, fmt.Sprintf("[cancelled after %v: %v]", elapsed.Round(time.Millisecond), context.Cause(ctx)))
		}
		err = fmt.Errorf("tools: %s: %w", name, ctx.Err())
		log.Info("tool call cancelled", "elapsed", elapsed)
	case errors.Is(err, errPanic):
		outcome = outcomePanic
		res = Result{IsError: true, Content: fmt.Sprintf("tool %q failed: internal error", name)}
		log.Error("tool panicked", "err", err)
		err = nil
	case context.Cause(cctx) == errTimeout && (err != nil || res.IsError):
		outcome = outcomeTimeout
		res.IsError = true
		res.Block = false
		res.Content = joinNote(res.Content, fmt.Sprintf("[timed out after %v]", timeout))
		log.Warn("tool call timed out", "timeout", timeout)
		err = nil
	case err != nil:
		outcome = outcomeFailed
		res.IsError = true
		res.Content = joinNote(res.Content, fmt.Sprintf("tool %q could not run: %v", name, err))
		log.Error("tool call failed", "err", err)
		err = fmt.Errorf("tools: %s: %w", name, err)
	case res.IsError:
		outcome = outcomeError
	default:
		outcome = outcomeOK
	}
	r.metrics.calls.WithLabelValues(name, outcome).Inc()
	res = r.offload(ctx, log, name, call, res)
	return res, err
}

// offload moves a large result's content to the blob store.
func (r *Registry) offload(ctx context.Context, log *slog.Logger, name string, call Call, res Result) Result {
	size := len(res.Content)
	if size <= r.opts.BlobThreshold {
		return res
	}
	if r.opts.Blobs == nil {
		res.Content = truncatedNote(cutRunes(res.Content, r.opts.BlobThreshold), size, "no blob store is configured")
		return res
	}
	handle, err := blobName(r.opts.Names, call, res.Content)
	if err == nil {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), blobPutTimeout)
		_, err = r.opts.Blobs.PutBytes(pctx, handle, []byte(res.Content))
		cancel()
	}
	if err != nil {
		r.metrics.blobs.WithLabelValues(name, "failed").Inc()
		log.Error("store large tool result", "bytes", size, "err", err)
		res.Content = truncatedNote(cutRunes(res.Content, r.opts.BlobThreshold), size, "the full result could not be stored")
		return res
	}
	r.metrics.blobs.WithLabelValues(name, "stored").Inc()
	res.Blob = handle
	res.Content = offloadNote(preview(res.Content, r.opts.PreviewLines, r.opts.PreviewBytes), handle, size)
	return res
}

var errPanic = errors.New("tool panicked")

// safeCall runs one call, turning a panic into errPanic with its stack.
func safeCall(ctx context.Context, t Tool, call Call) (res Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			res = Result{}
			err = fmt.Errorf("%w: %v\n%s", errPanic, p, debug.Stack())
		}
	}()
	return t.Call(ctx, call)
}

func joinNote(content, note string) string {
	if content == "" {
		return note
	}
	if strings.HasSuffix(content, "\n") {
		return content + note
	}
	return content + "\n" + note
}

// ErrNoProbe reports a probe of a tool that declares none.
var ErrNoProbe = errors.New("tool has no probe")

// Class returns the named tool's replay class (see ClassOf); an unknown
// tool is unsafe.
func (r *Registry) Class(name string) ReplayClass {
	e, ok := r.tools[name]
	if !ok {
		return ClassUnsafe
	}
	return ClassOf(e.tool)
}

// Probe asks the named tool whether the effect of call happened (see
// Prober), bounded by the tool's timeout. It fails with ErrNoProbe for a
// tool that declares no probe.
func (r *Registry) Probe(ctx context.Context, name string, call Call) (Result, bool, error) {
	e, ok := r.tools[name]
	if !ok {
		return Result{}, false, fmt.Errorf("tools: %w %q", ErrUnknownTool, name)
	}
	p, ok := e.tool.(Prober)
	if !ok || e.spec.ReplaySafe {
		return Result{}, false, fmt.Errorf("tools: %s: %w", name, ErrNoProbe)
	}
	timeout := e.spec.Timeout
	if timeout == 0 {
		timeout = r.opts.Timeout
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, found, err := safeProbe(pctx, p, call)
	outcome := "not_found"
	switch {
	case err != nil:
		outcome = "failed"
		err = fmt.Errorf("tools: probe %s call %s: %w", name, call.ID, err)
	case found:
		outcome = "found"
	}
	r.metrics.probes.WithLabelValues(name, outcome).Inc()
	if found {
		res = r.offload(ctx, r.opts.Logger.With("agent", call.Agent, "session", call.Session, "call", call.ID, "tool", name), name, call, res)
	}
	return res, found, err
}

func safeProbe(ctx context.Context, p Prober, call Call) (res Result, found bool, err error) {
	defer func() {
		if v := recover(); v != nil {
			res, found = Result{}, false
			err = fmt.Errorf("%w: %v\n%s", errPanic, v, debug.Stack())
		}
	}()
	return p.Probe(ctx, call)
}
