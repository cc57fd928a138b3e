package cli

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/health"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tracing"
)

// DefaultServer is the NATS URL client verbs and components use when
// --server and JETLOOP_SERVER are unset: the one `jetloop dev` listens on.
const DefaultServer = "nats://127.0.0.1:4222"

// serverFlags are the flags of every verb that talks to a NATS server.
type serverFlags struct {
	server   string
	prefix   string
	replicas int
	creds    string
	budget   sizeValue
}

func (f *serverFlags) register(fs *flag.FlagSet, env *Env) {
	def := env.Getenv("JETLOOP_SERVER")
	if def == "" {
		def = DefaultServer
	}
	fs.StringVar(&f.server, "server", def, "NATS server URL(s), comma-separated (env JETLOOP_SERVER)")
	fs.StringVar(&f.prefix, "prefix", streams.DefaultPrefix, "subject prefix of the deployment")
	fs.IntVar(&f.replicas, "replicas", 0, "replicas of streams and buckets (3 on a cluster); 0 creates missing ones at 1 and leaves existing ones as they are")
	fs.StringVar(&f.creds, "creds", env.Getenv("JETLOOP_CREDS"), "NATS credentials file (env JETLOOP_CREDS)")
	if v := env.Getenv("JETLOOP_STORAGE_BUDGET"); v != "" {
		_ = f.budget.Set(v) // refused, with the reason, before provisioning
	}
	fs.Var(&f.budget, "storage-budget", "bytes all streams and buckets may hold together, shared by purpose (e.g. 8GiB; env JETLOOP_STORAGE_BUDGET); unset: 8GiB for new ones and existing limits left alone")
}

// componentConfig is the command line of `jetloop ingest|worker|cron`.
type componentConfig struct {
	serverFlags
	http string
	id   string
}

// runComponentCmd parses a component's flags, connects, provisions and
// runs what build returns until ctx ends.
func runComponentCmd(ctx context.Context, env *Env, name string, args []string, httpDefault string,
	build func(ctx context.Context, rt *Runtime, cfg componentConfig) ([]Component, error)) error {
	var cfg componentConfig
	fs := newFlags(env, name, "--server URL [flags]")
	cfg.register(fs, env)
	fs.StringVar(&cfg.http, "http", httpDefault, "HTTP listen address for health, metrics and receivers (empty: none)")
	host, _ := os.Hostname()
	fs.StringVar(&cfg.id, "id", fmt.Sprintf("%s-%s-%d", name, host, os.Getpid()), "this process's identity, unique among its kind")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.Stderr, "jetloop %s: unexpected argument %q\n", name, fs.Arg(0))
		return errUsage
	}
	names, err := streams.NewNames(cfg.prefix)
	if err != nil {
		return err
	}
	log := env.Log.With("process", name, "instance", cfg.id)
	rt, closeConn, err := dial(ctx, cfg.serverFlags, names, "jetloop "+cfg.id, env)
	if err != nil {
		return err
	}
	defer closeConn()
	rt.Log = log
	if v := env.Getenv("JETLOOP_STORAGE_BUDGET"); v != "" && cfg.budget.n == 0 {
		if _, err := parseSize(v); err != nil {
			return fmt.Errorf("JETLOOP_STORAGE_BUDGET: %w", err)
		}
	}
	stopTracing, err := rt.startTracing(ctx, "jetloop-"+name)
	if err != nil {
		return err
	}
	defer stopTracing()
	if err := provision(ctx, rt.JS, streams.Options{Names: names, Replicas: cfg.replicas, StorageBudget: cfg.budget.n}, log); err != nil {
		return err
	}
	parts, err := build(ctx, rt, cfg)
	if err != nil {
		return err
	}
	if cfg.http != "" {
		l, err := net.Listen("tcp", cfg.http)
		if err != nil {
			return fmt.Errorf("listen on --http %s: %w", cfg.http, err)
		}
		parts = append(parts, Component{Name: "http", Run: func(ctx context.Context) error {
			return serveHTTP(ctx, l, tracing.Handler(rt.Tracer, rt.Mux), log)
		}})
		log.Info("http listening", "addr", l.Addr().String())
	}
	parts = append(parts, Component{Name: "ready", Run: func(ctx context.Context) error {
		if err := awaitHealthy(ctx, rt.Health, readyTimeout); err != nil {
			return err
		}
		rt.Health.SetReady(true)
		log.Info("running", "server", cfg.server)
		<-ctx.Done()
		return nil
	}})
	err = runComponents(ctx, log, parts)
	rt.Health.SetReady(false)
	if derr := drain(rt.NC, shutdownGrace); derr != nil {
		log.Warn("drain NATS connection", "err", derr)
	}
	return err
}

// dial connects to the server of f and returns a Runtime around it.
func dial(ctx context.Context, f serverFlags, names streams.Names, connName string, env *Env) (*Runtime, func(), error) {
	var extra []nats.Option
	if f.creds != "" {
		extra = append(extra, nats.UserCredentials(f.creds))
	}
	nc, err := connect(f.server, connName, env.Log, extra...)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	checks := &health.Checker{}
	checks.Add("nats", health.NATS(nc))
	rt := &Runtime{NC: nc, JS: js, Names: names, Log: env.Log, Health: checks, Mux: baseMux(checks), Getenv: env.Getenv}
	return rt, nc.Close, nil
}

func runIngest(ctx context.Context, env *Env, args []string) error {
	return runComponentCmd(ctx, env, "ingest", args, "127.0.0.1:8080",
		func(ctx context.Context, rt *Runtime, _ componentConfig) ([]Component, error) {
			parts, err := ingestComponents(ctx, rt)
			if err != nil {
				return nil, err
			}
			a, err := apiComponents(ctx, rt)
			return append(parts, a...), err
		})
}

func runWorker(ctx context.Context, env *Env, args []string) error {
	return runComponentCmd(ctx, env, "worker", args, "",
		func(ctx context.Context, rt *Runtime, cfg componentConfig) ([]Component, error) {
			c, err := workerComponent(ctx, rt, cfg.id)
			return []Component{c}, err
		})
}

func runCron(ctx context.Context, env *Env, args []string) error {
	return runComponentCmd(ctx, env, "cron", args, "",
		func(ctx context.Context, rt *Runtime, _ componentConfig) ([]Component, error) {
			c, err := cronComponent(ctx, rt)
			return []Component{c}, err
		})
}

// idle is a component with nothing to do yet: it holds its place in the
// process until ctx ends.
func idle(name string) Component {
	return Component{Name: name, Run: func(ctx context.Context) error {
		<-ctx.Done()
		return nil
	}}
}
