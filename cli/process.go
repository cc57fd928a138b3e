package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/dlq"
	"github.com/jetloop/jetloop/health"
	"github.com/jetloop/jetloop/ingest/gate"
	"github.com/jetloop/jetloop/proctree"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tracing"
	"github.com/jetloop/jetloop/ui"
)

// shutdownGrace bounds how long a process waits for its parts to stop.
const shutdownGrace = 5 * time.Second

// Runtime is what the components of one process share: the NATS connection,
// the deployment's names, the logger, health checks and the HTTP mux.
type Runtime struct {
	NC     *nats.Conn
	JS     jetstream.JetStream
	Names  streams.Names
	Log    *slog.Logger
	Health *health.Checker
	Mux    *http.ServeMux
	Getenv func(string) string
	// DataDir is `jetloop dev`'s --data folder; empty in a component run
	// against a server, which keeps no local state.
	DataDir string
	// Local marks a process running everything on one machine (`jetloop
	// dev`): the HTTP tools may reach loopback and private addresses, as
	// JETLOOP_HTTP_ALLOW_PRIVATE=1 allows elsewhere.
	Local bool

	// gate is the HTTP listener's, shared by every receiver on Mux.
	gate *gate.Gate
	// readmit is the ingest's, when this process runs one: the API
	// redrives dead letters of admission through it.
	readmit dlq.Readmit
	// requests is the ingest's way in for user requests, when this
	// process runs one: the API's send and Slack messages take it.
	requests api.Requests
	// trees starts the tool processes of every worker of the process.
	trees *proctree.Starter
	// ui is the dashboard's sign-in, when this process serves the API
	// with a token.
	ui *ui.Auth
	// Tracer exports the process's spans (see package tracing); it
	// records nothing when the OTEL_* variables name no endpoint.
	Tracer trace.TracerProvider
}

// startTracing sets rt.Tracer up from the OTEL_* variables (package
// tracing) for the process named service, and returns what exports the
// spans still buffered when the process stops.
func (rt *Runtime) startTracing(ctx context.Context, service string) (stop func(), err error) {
	p, err := tracing.Setup(ctx, tracing.Config{Service: service, Version: Version, Getenv: rt.Getenv,
		Log: rt.Log.With("component", "tracing")})
	if err != nil {
		return nil, err
	}
	rt.Tracer = p
	if p.Enabled() {
		rt.Log.Info("tracing on: spans exported over OTLP/HTTP", "endpoint", p.Endpoint)
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		if err := p.Shutdown(sctx); err != nil {
			rt.Log.Warn("export the last spans", "err", err)
		}
	}, nil
}

// Trees is the starter of tool processes every worker of the process
// shares, keeping its records under workDir's .trees folder (agent names
// cannot start with a dot), made on first use.
func (rt *Runtime) Trees(workDir string) (*proctree.Starter, error) {
	if rt.trees != nil {
		return rt.trees, nil
	}
	log := rt.Log.With("component", "proctree")
	s, err := proctree.New(proctree.Config{Dir: filepath.Join(workDir, ".trees"), Log: log})
	if err != nil {
		return nil, err
	}
	if cg, err := s.Cgroups(); err != nil {
		if oerr := s.Orphans(); oerr != nil {
			log.Warn("tool processes run without cgroups, and this process cannot take in what a tree leaves when its reaper is killed: a command that kills its reaper and drops JETLOOP_PROCESS_TREE from its environment can leave processes running",
				"why", err, "orphans", oerr)
		} else {
			log.Warn("tool processes run without cgroups: their reapers and this process stop them while it runs, but what a tree leaves when its reaper dies with this process is found by the next worker only if it kept JETLOOP_PROCESS_TREE in its environment",
				"why", err)
		}
	} else {
		log.Debug("tool processes run in cgroups", "under", cg)
	}
	rt.trees = s
	return s, nil
}

// Gate is the gate every HTTP receiver on rt.Mux shares, made with its
// metrics registered on first use.
func (rt *Runtime) Gate() (*gate.Gate, error) {
	if rt.gate != nil {
		return rt.gate, nil
	}
	m := gate.NewMetrics()
	if err := m.Register(prometheus.DefaultRegisterer); err != nil {
		return nil, fmt.Errorf("register gate metrics: %w", err)
	}
	g, err := gate.New(gate.Config{Metrics: m})
	if err != nil {
		return nil, err
	}
	rt.gate = g
	return g, nil
}

// Component is a long-running part of a process. Run returns when ctx ends
// (nil) or the component fails.
type Component struct {
	Name string
	Run  func(ctx context.Context) error
}

// stopTimeout bounds how long a process waits for its components once it
// is asked to stop: longer than a worker's grace for the steps in flight
// (worker.DefaultShutdownGrace) plus the release of their leases. A part
// still running then is left behind, as a kill would: nothing jetloop
// committed depends on a clean stop.
const stopTimeout = 20 * time.Second

// runComponents runs every component until ctx ends or one fails, then
// cancels the rest and waits for them, at most stopTimeout.
func runComponents(ctx context.Context, log *slog.Logger, cs []Component) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(cs)+1)
	var mu sync.Mutex
	running := map[string]int{}
	var wg sync.WaitGroup
	for _, c := range cs {
		mu.Lock()
		running[c.Name]++
		mu.Unlock()
		wg.Go(func() {
			defer func() {
				mu.Lock()
				running[c.Name]--
				mu.Unlock()
			}()
			err := c.Run(ctx)
			if err != nil && !errors.Is(err, context.Canceled) {
				log.Error("component failed", "component", c.Name, "err", err)
				errs <- fmt.Errorf("%s: %w", c.Name, err)
				cancel()
			}
		})
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	<-ctx.Done()
	select {
	case <-done:
	case <-time.After(stopTimeout):
		mu.Lock()
		var names []string
		for n, k := range running {
			if k > 0 {
				names = append(names, n)
			}
		}
		mu.Unlock()
		sort.Strings(names)
		log.Warn("components still running after stop was asked; leaving them", "after", stopTimeout, "components", strings.Join(names, ", "))
	}
	var out []error
	for {
		select {
		case err := <-errs:
			out = append(out, err)
		default:
			return errors.Join(out...)
		}
	}
}

// connect dials NATS with settings for a long-running component: endless
// reconnects, and a name that shows in the server's connection list.
func connect(url, name string, log *slog.Logger, extra ...nats.Option) (*nats.Conn, error) {
	opts := append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("nats reconnected", "url", nc.ConnectedUrl()) }),
	}, extra...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	return nc, nil
}

// provisionTimeout bounds how long a starting process tries to provision,
// which may take a while when a cluster is still electing its leaders.
const provisionTimeout = time.Minute

// provision creates or updates the streams and buckets and logs what
// changed, retrying while JetStream is not ready yet.
func provision(ctx context.Context, js jetstream.JetStream, opts streams.Options, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, provisionTimeout)
	defer cancel()
	var report streams.Report
	var err error
	for pause := 100 * time.Millisecond; ; pause = min(2*pause, 5*time.Second) {
		attempt, cancelAttempt := context.WithTimeout(ctx, 10*time.Second)
		report, err = streams.Provision(attempt, js, opts)
		cancelAttempt()
		if err == nil || errors.Is(err, streams.ErrIncompatible) {
			break
		}
		log.Warn("provisioning failed; retrying", "err", err, "in", pause)
		select {
		case <-ctx.Done():
			return fmt.Errorf("provision streams: %w", err)
		case <-time.After(pause):
		}
	}
	if err != nil {
		return fmt.Errorf("provision streams: %w", err)
	}
	for _, ch := range report {
		if ch.Action != streams.Unchanged {
			log.Info("provisioned", "resource", ch.String())
		}
	}
	return nil
}

// serveHTTP serves h on l until ctx ends, then shuts down gracefully. The
// connections are bounded in total and per remote address (gate.Conns):
// idle keep-alive connections give way to new ones.
func serveHTTP(ctx context.Context, l net.Listener, h http.Handler, log *slog.Logger) error {
	conns := gate.LimitConns(l, gate.ConnLimits{})
	l = conns
	srv := &http.Server{
		ConnState:         conns.ConnState,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http server on %s: %w", l.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shut down http server on %s: %w", l.Addr(), err)
	}
	<-errc
	return nil
}

// readyTimeout bounds how long a starting process waits for its health
// checks to pass before it gives up.
const readyTimeout = time.Minute

// awaitHealthy waits until every check of h passes, and fails naming the
// failing checks when timeout passes first.
func awaitHealthy(ctx context.Context, h *health.Checker, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for pause := 10 * time.Millisecond; ; pause = min(2*pause, 500*time.Millisecond) {
		failed := h.Status()
		if len(failed) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-deadline.C:
			return fmt.Errorf("not healthy %s after start: %v", timeout, failed)
		case <-time.After(pause):
		}
	}
}

// baseMux returns a mux with the process endpoints every process serves.
func baseMux(h *health.Checker) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", h.Healthz())
	mux.Handle("GET /readyz", h.Readyz())
	return mux
}

// InShares are the shares of JL_IN's room each agent and source may take
// (streams.Shares), from JETLOOP_IN_AGENT_SHARE and JETLOOP_IN_SOURCE_SHARE
// (percent of the room, 1–100; 100: no share) and
// JETLOOP_IN_SOURCE_WINDOW (a duration); unset: the defaults.
func (rt *Runtime) InShares() (streams.Shares, error) {
	var sh streams.Shares
	for _, v := range []struct {
		env string
		to  *int
	}{{"JETLOOP_IN_AGENT_SHARE", &sh.Agent}, {"JETLOOP_IN_SOURCE_SHARE", &sh.Source}} {
		s := rt.Getenv(v.env)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			return sh, fmt.Errorf("%s=%q: want a percent from 1 to 100", v.env, s)
		}
		*v.to = n
	}
	if s := rt.Getenv("JETLOOP_IN_SOURCE_WINDOW"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < time.Second {
			return sh, fmt.Errorf("JETLOOP_IN_SOURCE_WINDOW=%q: want a duration of at least 1s", s)
		}
		sh.SourceWindow = d
	}
	return sh, nil
}

// EventHorizon is how many consumed events a session keeps in JL_IN
// (worker.Config.EventHorizon), from JETLOOP_EVENT_HORIZON: a count of at
// least 1, or "all" (kept until retention removes the session); unset: 0,
// the default.
func (rt *Runtime) EventHorizon() (int, error) {
	s := rt.Getenv("JETLOOP_EVENT_HORIZON")
	switch s {
	case "":
		return 0, nil
	case "all":
		return -1, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("JETLOOP_EVENT_HORIZON=%q: want a count of at least 1, or all", s)
	}
	return n, nil
}
