package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/health"
	"github.com/jetloop/jetloop/natsd"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tracing"
	"github.com/jetloop/jetloop/ui"
)

// devConfig is the command line of `jetloop dev`.
type devConfig struct {
	data     string
	http     string
	natsPort int
	workers  int
	sync     string
	prefix   string
	auth     string
	budget   sizeValue
}

func runDev(ctx context.Context, env *Env, args []string) error {
	var cfg devConfig
	fs := newFlags(env, "dev", "[flags]")
	fs.StringVar(&cfg.data, "data", ".jetloop", "folder for the embedded server's store and state")
	fs.StringVar(&cfg.http, "http", "127.0.0.1:8080", "HTTP listen address (port 0 picks a free port)")
	fs.IntVar(&cfg.natsPort, "nats-port", 4222, "NATS client port on 127.0.0.1 (0 picks a free port)")
	fs.IntVar(&cfg.workers, "workers", 1, "workers to run in this process (0: none; run them apart with 'jetloop worker')")
	fs.StringVar(&cfg.sync, "sync", natsd.SyncAlways, "JetStream sync_interval: always (fsync every write) or a duration such as 2m")
	fs.StringVar(&cfg.prefix, "prefix", streams.DefaultPrefix, "subject prefix of this deployment")
	fs.Var(&cfg.budget, "storage-budget", "bytes all streams and buckets may hold together, shared by purpose (e.g. 8GiB); default 8GiB, or half of what the --data disk allows JetStream when that is less")
	fs.StringVar(&cfg.auth, "auth", "", "NATS users and their subject permissions: a nats-server authorization block (see examples/auth.conf); default: no authentication")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.Stderr, "jetloop dev: unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	if cfg.workers < 0 {
		return fmt.Errorf("--workers %d: want 0 or more", cfg.workers)
	}
	return dev(ctx, env, cfg)
}

func dev(ctx context.Context, env *Env, cfg devConfig) error {
	log := env.Log
	names, err := streams.NewNames(cfg.prefix)
	if err != nil {
		return err
	}
	data, err := filepath.Abs(cfg.data)
	if err != nil {
		return fmt.Errorf("--data %s: %w", cfg.data, err)
	}
	var auth *natsd.Auth
	var login []nats.Option
	if cfg.auth != "" {
		a, opt, err := devAuth(cfg.auth)
		if err != nil {
			return err
		}
		auth, login = a, append(login, opt)
		log.Info("NATS authentication on", "file", cfg.auth, "users", len(a.Users)+len(a.Nkeys)-1)
	}
	srv, err := natsd.Start(natsd.Config{
		Auth: auth,
		Dir:  data,
		Name: "jetloop-dev",
		Port: cfg.natsPort,
		Sync: cfg.sync,
		Logf: func(level, msg string) {
			if level == "error" || level == "warn" {
				log.Warn(msg, "component", "nats-server")
			}
		},
	})
	if err != nil {
		if errors.Is(err, natsd.ErrLocked) {
			return fmt.Errorf("another jetloop is running on --data %s: %w", data, err)
		}
		return fmt.Errorf("start embedded NATS on --data %s: %w", data, err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			log.Error("shut down embedded NATS", "err", err)
		}
	}()

	// Bind HTTP once the store is ours, so a second instance on the same
	// --data is told about the store, not about a taken port.
	l, err := net.Listen("tcp", cfg.http)
	if err != nil {
		return fmt.Errorf("listen on --http %s: %w", cfg.http, err)
	}
	defer l.Close()

	nc, err := connect(srv.ClientURL(), "jetloop dev", log, login...)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	checks := &health.Checker{}
	checks.Add("nats", health.NATS(nc))
	provisioned := errors.New("streams not provisioned yet")
	checks.Add("streams", func() error { return provisioned })
	budget := cfg.budget.n
	if budget == 0 {
		var reduced bool
		if budget, reduced = devBudget(data); reduced {
			log.Warn("little free disk under --data: streams and buckets get a smaller storage budget", "budget", formatSize(budget), "dir", data)
		}
	}
	if err := provision(ctx, js, streams.Options{Names: names, Replicas: 1, StorageBudget: budget}, log); err != nil {
		return err
	}
	provisioned = nil

	rt := &Runtime{NC: nc, JS: js, Names: names, Log: log, Health: checks, Mux: baseMux(checks), Getenv: env.Getenv}
	rt.DataDir = data
	rt.Local = true
	stopTracing, err := rt.startTracing(ctx, "jetloop")
	if err != nil {
		return err
	}
	defer stopTracing()
	if err := applyExamples(ctx, rt); err != nil {
		return fmt.Errorf("apply example agents: %w", err)
	}
	parts, err := devComponents(ctx, rt, cfg)
	if err != nil {
		return err
	}
	httpURL := "http://" + l.Addr().String()
	parts = append(parts, Component{Name: "http", Run: func(ctx context.Context) error {
		return serveHTTP(ctx, l, tracing.Handler(rt.Tracer, rt.Mux), log)
	}})

	parts = append(parts, Component{Name: "ready", Run: func(ctx context.Context) error {
		// The ready line is a promise: print it once every check passes
		// (definitions loaded, say), not merely once the parts started.
		if err := awaitHealthy(ctx, checks, readyTimeout); err != nil {
			return err
		}
		checks.SetReady(true)
		fmt.Fprintf(env.Stdout, "jetloop ready nats=%s http=%s data=%s workers=%d ui=%s/ui/\n", srv.ClientURL(), httpURL, data, cfg.workers, httpURL)
		if rt.ui != nil {
			// A one-time link, on stdout only: as good as the token until
			// it is used, so never in the log.
			link, err := rt.ui.LoginLink(httpURL)
			if err != nil {
				return err
			}
			fmt.Fprintf(env.Stdout, "jetloop dashboard %s (one-time sign-in link, valid %s; then sign in with the API token)\n", link, ui.DefaultLinkTTL)
		}
		log.Info("jetloop dev running", "nats", srv.ClientURL(), "http", httpURL, "data", data, "pid", os.Getpid())
		<-ctx.Done()
		return nil
	}})

	err = runComponents(ctx, log, parts)
	checks.SetReady(false)
	log.Info("jetloop dev stopping")
	// Let in-flight acknowledgements reach the server before it stops.
	if derr := drain(nc, shutdownGrace); derr != nil {
		log.Warn("drain NATS connection", "err", derr)
	}
	return err
}

// devComponents are the parts `jetloop dev` runs beside the server: the
// ingest on the shared HTTP mux, the workers and the schedule reconciler.
func devComponents(ctx context.Context, rt *Runtime, cfg devConfig) ([]Component, error) {
	var parts []Component
	ing, err := ingestComponents(ctx, rt)
	if err != nil {
		return nil, err
	}
	parts = append(parts, ing...)
	for i := range cfg.workers {
		w, err := workerComponent(ctx, rt, "dev-"+strconv.Itoa(i+1))
		if err != nil {
			return nil, err
		}
		parts = append(parts, w)
	}
	c, err := cronComponent(ctx, rt)
	if err != nil {
		return nil, err
	}
	a, err := apiComponents(ctx, rt)
	if err != nil {
		return nil, err
	}
	return append(append(parts, c), a...), nil
}

// drain drains nc, waiting at most timeout for it to close.
func drain(nc *nats.Conn, timeout time.Duration) error {
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	if err := nc.Drain(); err != nil {
		return err
	}
	select {
	case <-closed:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("connection still draining after %s", timeout)
	}
}
