package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/internal/ports"
	"github.com/jetloop/jetloop/natsd"
	"github.com/jetloop/jetloop/streams"
)

// Syncs are the JetStream sync_interval settings a run compares.
const (
	// SyncDefault is the server's own interval, two minutes: writes are
	// acknowledged once they reach the operating system.
	SyncDefault = "2m"
	// SyncAlways fsyncs every write before acknowledging it.
	SyncAlways = natsd.SyncAlways
)

// Measurements, by name.
const (
	Ingest = "ingest"
	// IngestR3 is Ingest on a three-node cluster, every stream and
	// bucket replicated three times.
	IngestR3 = "ingest-r3"
	Step     = "step"
	// StepR3 is Step on a three-node cluster, every stream and bucket
	// replicated three times.
	StepR3   = "step-r3"
	Control  = "control"
	Recovery = "recovery"
	Idle     = "idle"
)

// All lists every measurement, in the order they run.
func All() []string {
	return []string{Ingest, IngestR3, Step, StepR3, Control, Recovery, Idle, Age, Window}
}

// clustered are the measurements that run on a three-node cluster.
var clustered = []string{IngestR3, StepR3}

// Defaults of Config.
const (
	DefaultEvents      = 2000
	DefaultConcurrency = 16
	DefaultSteps       = 500
	DefaultControl     = 200
	DefaultRecoveries  = 3
	DefaultSessions    = 10_000
	DefaultLeaseTTL    = 5 * time.Second
)

// Config configures a run. The zero value runs every measurement with the
// defaults, except Recovery, which needs Executable.
type Config struct {
	// Only lists the measurements to run; empty: All.
	Only []string
	// Syncs are the sync_interval settings to run each measurement with;
	// empty: SyncDefault and SyncAlways.
	Syncs []string
	// Events is the number of webhooks of the ingest measurement, sent by
	// Concurrency clients.
	Events, Concurrency int
	// Steps is the number of durable steps of the step measurement.
	Steps int
	// Control is the number of each control message measured.
	Control int
	// Recoveries is the number of kill -9s of the recovery measurement.
	Recoveries int
	// Sessions is the number of idle sessions of the idle measurement.
	Sessions int
	// AgeEvents is the number of events of the age measurement;
	// WindowTicks the ticks of each run of the window measurement.
	AgeEvents, WindowTicks int
	// Executable is the jetloop binary the recovery measurement runs
	// worker processes of (`jetloop worker`); empty skips it.
	Executable string
	// LeaseTTL is the workers' lease TTL and ack wait in the recovery
	// measurement, which bound how soon a standby takes over.
	LeaseTTL time.Duration
	// Dir is where the servers' stores go; default a temporary folder,
	// removed afterwards.
	Dir string
	// Log receives progress.
	Log *slog.Logger
}

func (c *Config) setDefaults() {
	if len(c.Only) == 0 {
		c.Only = All()
	}
	if len(c.Syncs) == 0 {
		c.Syncs = []string{SyncDefault, SyncAlways}
	}
	if c.Events == 0 {
		c.Events = DefaultEvents
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Steps == 0 {
		c.Steps = DefaultSteps
	}
	if c.Control == 0 {
		c.Control = DefaultControl
	}
	if c.Recoveries == 0 {
		c.Recoveries = DefaultRecoveries
	}
	if c.Sessions == 0 {
		c.Sessions = DefaultSessions
	}
	if c.AgeEvents == 0 {
		c.AgeEvents = DefaultAgeEvents
	}
	if c.WindowTicks == 0 {
		c.WindowTicks = DefaultWindowTicks
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
}

// Validate reports a config that cannot run.
func (c Config) Validate() error {
	for _, m := range c.Only {
		if !slices.Contains(All(), m) {
			return fmt.Errorf("bench: unknown measurement %q (have %v)", m, All())
		}
	}
	for _, s := range c.Syncs {
		if s != SyncAlways {
			if d, err := time.ParseDuration(s); err != nil || d <= 0 {
				return fmt.Errorf("bench: sync %q: want %q or a duration such as 2m", s, SyncAlways)
			}
		}
	}
	if c.Events < 0 || c.Concurrency < 0 || c.Steps < 0 || c.Control < 0 || c.Recoveries < 0 || c.Sessions < 0 || c.AgeEvents < 0 || c.WindowTicks < 0 {
		return errors.New("bench: negative count in config")
	}
	if c.LeaseTTL < 0 || (c.LeaseTTL > 0 && c.LeaseTTL < time.Second) {
		return fmt.Errorf("bench: lease TTL %s: want at least 1s", c.LeaseTTL)
	}
	return nil
}

// Result is one measurement under one sync setting: named figures, and a
// note when it was skipped or failed.
type Result struct {
	Name    string             `json:"name"`
	Sync    string             `json:"sync"`
	Figures map[string]float64 `json:"figures"`
	Note    string             `json:"note,omitempty"`
	Elapsed time.Duration      `json:"elapsed_ns"`
}

// Report is a whole run.
type Report struct {
	Config  Config   `json:"-"`
	Results []Result `json:"results"`
}

// Get returns the result of name under sync.
func (r Report) Get(name, sync string) (Result, bool) {
	for _, res := range r.Results {
		if res.Name == name && res.Sync == sync {
			return res, true
		}
	}
	return Result{}, false
}

// Run runs the measurements, each against a fresh server per sync setting,
// and returns their results; a measurement that fails is reported with
// its error as its note, and the run goes on.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	if cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "jetloop-bench-")
		if err != nil {
			return Report{}, fmt.Errorf("bench: %w", err)
		}
		defer os.RemoveAll(dir)
		cfg.Dir = dir
	}
	rep := Report{Config: cfg}
	fns := map[string]func(context.Context, *env) (map[string]float64, error){
		Ingest: benchIngest, IngestR3: benchIngest, Step: benchStep, StepR3: benchStep, Control: benchControl, Recovery: benchRecovery, Idle: benchIdle,
		Age: benchAge, Window: benchWindow,
	}
	for _, name := range All() {
		if !slices.Contains(cfg.Only, name) {
			continue
		}
		for _, sync := range cfg.Syncs {
			if err := ctx.Err(); err != nil {
				return rep, err
			}
			cfg.Log.Info("measuring", "measurement", name, "sync", sync)
			start := time.Now()
			res := Result{Name: name, Sync: sync}
			figs, err := func() (map[string]float64, error) {
				dir := filepath.Join(cfg.Dir, fmt.Sprintf("%s-%d", name, len(rep.Results)))
				start := startEnv
				if slices.Contains(clustered, name) {
					start = startCluster
				}
				e, err := start(ctx, cfg, dir, sync)
				if err != nil {
					return nil, err
				}
				defer e.close()
				return fns[name](ctx, e)
			}()
			res.Figures, res.Elapsed = figs, time.Since(start)
			if errors.Is(err, errSkipped) {
				res.Note = err.Error()
			} else if err != nil {
				res.Note = "failed: " + err.Error()
				cfg.Log.Warn("measurement failed", "measurement", name, "sync", sync, "err", err)
			}
			rep.Results = append(rep.Results, res)
		}
	}
	return rep, nil
}

// errSkipped marks a measurement that could not run here.
var errSkipped = errors.New("skipped")

// env is one embedded server (or a cluster of them) with jetloop's
// streams provisioned.
type env struct {
	cfg   Config
	dir   string
	srv   *natsd.Server
	nc    *nats.Conn
	js    jetstream.JetStream
	names streams.Names
	// others are a cluster's other nodes.
	others []*natsd.Server
}

// clusterSize is the nodes (and replicas) of the clustered measurements.
const clusterSize = 3

// startCluster starts a three-node cluster on loopback, its JetStream
// streams and buckets replicated on all three, and connects to one of
// them (nats.go picks it at random from all three addresses, the others
// are for failover).
func startCluster(ctx context.Context, cfg Config, dir, sync string) (*env, error) {
	// Another process may bind a chosen route port before its node does
	// (a port the kernel gave back is free to any outgoing connection);
	// the cluster is then started again on other ports, on new stores.
	for attempt := 1; ; attempt++ {
		e, err := startClusterOn(ctx, cfg, dir, sync)
		if err == nil || attempt >= clusterAttempts || !strings.Contains(err.Error(), "address already in use") {
			return e, err
		}
		for i := range clusterSize {
			if err := os.RemoveAll(filepath.Join(dir, fmt.Sprintf("nats-%d", i+1))); err != nil {
				return nil, fmt.Errorf("bench: remove the stores of a cluster that did not start: %w", err)
			}
		}
	}
}

// pickPorts chooses a cluster's route ports (freePorts; a test may
// choose taken ones).
var pickPorts = freePorts

// clusterAttempts bounds the starts of a cluster whose chosen route port
// another process took first.
const clusterAttempts = 5

// startClusterOn is one attempt of startCluster, on route ports chosen
// for it.
func startClusterOn(ctx context.Context, cfg Config, dir, sync string) (*env, error) {
	ports, err := pickPorts(clusterSize)
	if err != nil {
		return nil, err
	}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	e := &env{cfg: cfg, dir: dir, names: streams.Default()}
	var nodes []*natsd.Server
	for i := range clusterSize {
		s, err := natsd.Start(natsd.Config{Dir: filepath.Join(dir, fmt.Sprintf("nats-%d", i+1)), Name: fmt.Sprintf("bench-%d", i+1), Sync: sync,
			Cluster: natsd.ClusterConfig{Name: "bench", Port: ports[i], Routes: routes}})
		if err != nil {
			for _, n := range nodes {
				_ = n.Shutdown(context.Background())
			}
			return nil, fmt.Errorf("bench: start cluster node %d: %w", i+1, err)
		}
		nodes = append(nodes, s)
	}
	e.srv, e.others = nodes[0], nodes[1:]
	// A new cluster elects its meta leader within seconds; every node
	// must be current with it, and the leader must have every node's
	// JetStream statistics (before those arrive it refuses a replicated
	// stream: no suitable peers for placement), before the streams are
	// made.
	ready := func() bool {
		leader := false
		for _, n := range nodes {
			if !n.JetStreamReady() {
				return false
			}
			if n.Server().JetStreamIsLeader() {
				leader = len(n.Server().JetStreamClusterPeers()) >= clusterSize
			}
		}
		return leader
	}
	for deadline := time.Now().Add(time.Minute); !ready(); time.Sleep(100 * time.Millisecond) {
		if err := ctx.Err(); err != nil {
			e.close()
			return nil, fmt.Errorf("bench: wait for the cluster: %w", err)
		}
		if time.Now().After(deadline) {
			e.close()
			return nil, errors.New("bench: the cluster was not ready within a minute: no JetStream meta leader current on every node with every node's statistics")
		}
	}
	var urls []string
	for _, n := range nodes {
		urls = append(urls, n.ClientURL())
	}
	if e.nc, err = nats.Connect(strings.Join(urls, ","), nats.Name("jetloop bench")); err != nil {
		e.close()
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	if e.js, err = jetstream.New(e.nc); err != nil {
		e.close()
		return nil, fmt.Errorf("bench: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := streams.Provision(pctx, e.js, streams.Options{Names: e.names, Replicas: clusterSize}); err != nil {
		e.close()
		return nil, fmt.Errorf("bench: provision on the cluster: %w", err)
	}
	return e, nil
}

// placed is the fewest nodes any of the named streams is stored on, as
// their leaders report it: 1 on a single server, the leader and its
// replicas on a cluster. A measurement reports it beside its figures, so
// that an R3 figure shows it was measured on three copies.
func (e *env) placed(ctx context.Context, names ...string) (float64, error) {
	fewest := 0
	for _, name := range names {
		s, err := e.js.Stream(ctx, name)
		if err != nil {
			return 0, fmt.Errorf("bench: stream %s: %w", name, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			return 0, fmt.Errorf("bench: stream %s: %w", name, err)
		}
		n := 1
		if info.Cluster != nil {
			n += len(info.Cluster.Replicas)
		}
		if fewest == 0 || n < fewest {
			fewest = n
		}
	}
	return float64(fewest), nil
}

// freePorts finds n free loopback ports outside the kernel's ephemeral
// range (ports.Kept), where no outgoing connection takes one: a recovery
// worker started again on its port finds it free, and a cluster's route
// port is taken first only by another process's listener. Where the range
// leaves no room outside it, the kernel chooses them.
func freePorts(n int) ([]int, error) {
	p, _, err := ports.Kept(n)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return p, nil
}

func startEnv(ctx context.Context, cfg Config, dir, sync string) (*env, error) {
	srv, err := natsd.Start(natsd.Config{Dir: filepath.Join(dir, "nats"), Name: "bench", Sync: sync})
	if err != nil {
		return nil, fmt.Errorf("bench: start server: %w", err)
	}
	nc, err := nats.Connect(srv.ClientURL(), nats.Name("jetloop bench"))
	if err != nil {
		_ = srv.Shutdown(context.Background())
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	e := &env{cfg: cfg, dir: dir, srv: srv, nc: nc, names: streams.Default()}
	if e.js, err = jetstream.New(nc); err != nil {
		e.close()
		return nil, fmt.Errorf("bench: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := streams.Provision(pctx, e.js, streams.Options{Names: e.names}); err != nil {
		e.close()
		return nil, fmt.Errorf("bench: provision: %w", err)
	}
	return e, nil
}

func (e *env) close() {
	if e.nc != nil {
		e.nc.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range append([]*natsd.Server{e.srv}, e.others...) {
		if s != nil {
			wg.Go(func() { _ = s.Shutdown(ctx) })
		}
	}
	wg.Wait()
}

// percentile returns the q-quantile of ds (sorted in place), in
// milliseconds.
func percentile(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := min(len(ds)-1, int(q*float64(len(ds))))
	return float64(ds[i].Nanoseconds()) / 1e6
}
