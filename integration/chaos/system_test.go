package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/ghapp"
	"github.com/jetloop/jetloop/internal/ghfake"
	"github.com/jetloop/jetloop/streams"
)

// Secrets of the run, as the components read them from the environment.
const (
	githubSecret = "chaos-github-secret"
	ingestToken  = "chaos-ingest-token"
	apiToken     = "chaos-api-token"
)

// Timings of the workers: short, so a killed or stopped worker's sessions
// come back within seconds. Every worker of a deployment shares them.
const (
	leaseTTL = "5s"
	ackWait  = "5s"
)

// config is one run's shape.
type config struct {
	nodes, ingests, workers, crons int
	// sync is the nodes' JetStream sync_interval ("" for the default).
	sync string
	// workload is how long events, control messages and faults go on.
	workload time.Duration
	// quiet bounds how long the system may take to come to rest after.
	quiet time.Duration
	seed  int64
	keep  bool
}

// system is every process of a run.
type system struct {
	dir    string
	ledger string
	nodes  []*process
	comps  []*process
	urls   string // the nodes' client URLs, comma-separated
	nc     *nats.Conn
	js     jetstream.JetStream
	names  streams.Names
	// gh is the fake GitHub the reviewer comments on, github its settings.
	gh     *ghfake.Server
	github *ghapp.Settings
}

// all returns every process.
func (s *system) all() []*process { return append(append([]*process(nil), s.nodes...), s.comps...) }

// ofKind returns the processes of one kind.
func (s *system) ofKind(kind string) []*process {
	var out []*process
	for _, p := range s.all() {
		if p.kind == kind {
			out = append(out, p)
		}
	}
	return out
}

// startSystem builds the binaries, starts the cluster, provisions the
// streams at R3, stores the agents and starts the components.
func startSystem(t *testing.T, ctx context.Context, cfg config, dir string) *system {
	t.Helper()
	bins := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bins, 0o755); err != nil {
		t.Fatal(err)
	}
	jetloop := build(t, bins, "../../cmd/jetloop", "jetloop")
	node := build(t, bins, "./chaosnode", "chaosnode")
	s := &system{dir: dir, ledger: filepath.Join(dir, "ledger.txt"), names: streams.Default()}
	if err := os.WriteFile(intervalsOf(s.ledger), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.ledger, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s.gh = ghfake.New(t)
	s.gh.AddInstallation(1, repo)
	s.github = &ghapp.Settings{AppID: ghfake.AppID, PrivateKeyFile: s.gh.WriteKey(t, dir), BaseURL: s.gh.URL()}
	logs := filepath.Join(dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range s.comps {
			p.stop(10 * time.Second)
		}
		for _, p := range s.nodes {
			p.stop(20 * time.Second)
		}
		for _, p := range s.all() {
			p.waiters.Wait()
		}
	})

	// The cluster: every node routes to every other (and to itself, which
	// the server ignores), on ports chosen up front and kept on restarts.
	ports := freePorts(t, 2*cfg.nodes)
	var routes, urls []string
	for i := range cfg.nodes {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[cfg.nodes+i]))
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	s.urls = strings.Join(urls, ",")
	for i := range cfg.nodes {
		name := fmt.Sprintf("n%d", i+1)
		args := []string{"-dir", filepath.Join(dir, "nats", name), "-name", name,
			"-port", fmt.Sprint(ports[i]), "-cluster", "jl-chaos", "-cluster-port", fmt.Sprint(ports[cfg.nodes+i]),
			"-routes", strings.Join(routes, ",")}
		if cfg.sync != "" {
			args = append(args, "-sync", cfg.sync)
		}
		p := &process{name: name, kind: kindNATS, bin: node, args: args, addr: fmt.Sprintf("127.0.0.1:%d", ports[i]),
			logPath: filepath.Join(logs, name+".log")}
		if err := p.start(); err != nil {
			t.Fatal(err)
		}
		s.nodes = append(s.nodes, p)
	}
	for _, p := range s.nodes {
		if err := p.waitUp(ctx, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	nc, err := nats.Connect(s.urls, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.Name("chaos checker"))
	if err != nil {
		t.Fatalf("connect to the cluster: %v", err)
	}
	t.Cleanup(nc.Close)
	s.nc = nc
	if s.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	// Provision once here, at R3, retrying while the cluster elects its
	// meta leader; the components then find everything in place.
	if err := retry(ctx, 60*time.Second, func(ctx context.Context) error {
		_, err := streams.Provision(ctx, s.js, streams.Options{Names: s.names, Replicas: cfg.nodes})
		return err
	}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	if err := retry(ctx, 30*time.Second, func(ctx context.Context) error { return storeAgents(ctx, s.js, s.names, s.ledger, true, s.github) }); err != nil {
		t.Fatalf("store the agents: %v", err)
	}

	// The components, each with an HTTP listener for /readyz (and the
	// receivers and API routes on the ingests).
	comp := []struct {
		kind string
		n    int
		env  []string
	}{
		{kindIngest, cfg.ingests, []string{"JETLOOP_GITHUB_SECRET=" + githubSecret, "JETLOOP_INGEST_TOKEN=" + ingestToken, "JETLOOP_API_TOKEN=" + apiToken}},
		{kindWorker, cfg.workers, []string{"JETLOOP_WORK_DIR=" + filepath.Join(dir, "work"), "JETLOOP_LEASE_TTL=" + leaseTTL, "JETLOOP_ACK_WAIT=" + ackWait}},
		{kindCron, cfg.crons, nil},
	}
	total := 0
	for _, c := range comp {
		total += c.n
	}
	hports := freePorts(t, total)
	for _, c := range comp {
		for i := range c.n {
			name := fmt.Sprintf("%s-%d", c.kind, i+1)
			addr := fmt.Sprintf("127.0.0.1:%d", hports[0])
			hports = hports[1:]
			p := &process{name: name, kind: c.kind, bin: jetloop, addr: addr,
				args:    []string{c.kind, "--server", s.urls, "--replicas", fmt.Sprint(cfg.nodes), "--http", addr, "--id", name},
				env:     append([]string{"JETLOOP_LOG_LEVEL=info"}, c.env...),
				logPath: filepath.Join(logs, name+".log")}
			if err := p.start(); err != nil {
				t.Fatal(err)
			}
			s.comps = append(s.comps, p)
		}
	}
	for _, p := range s.comps {
		if err := p.waitUp(ctx, 60*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// retry calls fn until it succeeds or total has passed, each attempt with
// a deadline of its own.
func retry(ctx context.Context, total time.Duration, fn func(ctx context.Context) error) error {
	deadline := time.Now().Add(total)
	for {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := fn(actx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
