package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/examples"
	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/ingest/gate"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools/mcp"
)

// Files under `jetloop dev`'s --data folder holding the secrets it
// generates when the environment sets none.
const (
	githubSecretFile = "github-secret"
	ingestTokenFile  = "ingest-token"
)

// ingestCommands are the client verbs of the ingest side (apply, agents,
// events, webhook).
func ingestCommands() []command {
	return []command{
		{name: "apply", summary: "validate agent definitions and store them: apply FILE...", run: runApply},
		{name: "agents", summary: "list the stored agent definitions and their versions", run: runAgents},
		{name: "events", summary: "show recent admission decisions with their rules", run: runEvents},
		{name: "webhook", summary: "sign a payload file and post it: webhook github EVENT FILE", run: runWebhook},
	}
}

// ingestComponents mounts the HTTP receivers on rt.Mux and returns the
// ingest's background parts: the watch that keeps admission's definitions
// current.
func ingestComponents(ctx context.Context, rt *Runtime) ([]Component, error) {
	log := rt.Log.With("component", "ingest")
	secret, err := devSecret(rt, "JETLOOP_GITHUB_SECRET", githubSecretFile)
	if err != nil {
		return nil, err
	}
	token, err := devSecret(rt, "JETLOOP_INGEST_TOKEN", ingestTokenFile)
	if err != nil {
		return nil, err
	}
	if secret == "" {
		log.Warn("JETLOOP_GITHUB_SECRET is not set: POST /webhooks/github answers 503")
	}
	if token == "" {
		log.Warn("JETLOOP_INGEST_TOKEN is not set: POST /events and user requests answer 503")
	}
	// The ingest publishes asynchronously and awaits every ack within a
	// request's deadline; an ack that never comes (a stream leader lost)
	// must also release its slot in the connection's pending publishes,
	// or they fill up and stall every later delivery.
	js, err := jetstream.New(rt.NC, jetstream.WithPublishAsyncTimeout(ingest.DefaultTimeout))
	if err != nil {
		return nil, fmt.Errorf("ingest: jetstream: %w", err)
	}
	store, err := policies.NewStore(ctx, js, rt.Names)
	if err != nil {
		return nil, err
	}
	rules := admission.NewRules()
	adm, err := admission.New(ctx, js, rules, admission.Config{Names: rt.Names, Log: log})
	if err != nil {
		return nil, err
	}
	dd, err := dedupe.New(ctx, js, dedupe.Config{Names: rt.Names})
	if err != nil {
		return nil, err
	}
	metrics := ingest.NewMetrics()
	if err := metrics.Register(prometheus.DefaultRegisterer); err != nil {
		return nil, fmt.Errorf("register ingest metrics: %w", err)
	}
	g, err := rt.Gate()
	if err != nil {
		return nil, err
	}
	var networks gate.Networks
	if path := rt.Getenv("JETLOOP_GITHUB_NETWORKS"); path != "" {
		if networks, err = gate.LoadNetworks(path); err != nil {
			return nil, fmt.Errorf("JETLOOP_GITHUB_NETWORKS: %w", err)
		}
		log.Info("GitHub webhooks accepted only from listed networks", "file", path, "networks", networks.Len())
	}
	srv, err := ingest.New(ingest.Config{
		Names:          rt.Names,
		GitHubSecret:   []byte(secret),
		Token:          token,
		Gate:           g,
		GitHubNetworks: networks,
		// Leave room for the ce-* headers within the server's max payload.
		MaxEventSize: int(rt.NC.MaxPayload()) - 64<<10,
		Log:          log,
		Metrics:      metrics,
	}, js, dd, adm)
	if err != nil {
		return nil, err
	}
	srv.Mount(rt.Mux)
	mountMetrics(rt.Mux)
	rt.Health.Add("definitions", func() error {
		if !rules.IsSynced() {
			return admission.ErrNotReady
		}
		return nil
	})
	return []Component{{Name: "ingest definitions", Run: func(ctx context.Context) error {
		return rules.Watch(ctx, store, log)
	}}}, nil
}

// mountMetrics serves GET /metrics from the default registry unless a
// component has mounted it already.
func mountMetrics(mux *http.ServeMux) {
	if _, pattern := mux.Handler(httptest.NewRequest(http.MethodGet, "/metrics", nil)); pattern != "" {
		return
	}
	mux.Handle("GET /metrics", promhttp.Handler())
}

// devSecret returns the secret in env var name; under `jetloop dev` (a
// data folder) without one, the secret kept in the data folder's file,
// generated and printed the first time so `jetloop webhook` and the
// operator can use it.
func devSecret(rt *Runtime, name, file string) (string, error) {
	if v := rt.Getenv(name); v != "" {
		return v, nil
	}
	if rt.DataDir == "" {
		return "", nil
	}
	path := filepath.Join(rt.DataDir, file)
	if b, err := os.ReadFile(path); err == nil && len(bytes.TrimSpace(b)) > 0 {
		return string(bytes.TrimSpace(b)), nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("generate %s: %w", name, err)
	}
	v := hex.EncodeToString(raw)
	if err := os.WriteFile(path, []byte(v+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	rt.Log.Info("generated a secret; set "+name+" to choose your own", "env", name, "file", path, "value", v)
	return v, nil
}

// applyExamples stores the example agents that are not stored yet, so
// `jetloop dev` has agents to run; an agent already stored (changed with
// `jetloop apply`, say) is left as it is.
func applyExamples(ctx context.Context, rt *Runtime) error {
	store, err := policies.NewStore(ctx, rt.JS, rt.Names)
	if err != nil {
		return err
	}
	files, err := fs.Glob(examples.FS, "*.yaml")
	if err != nil {
		return err
	}
	for _, f := range files {
		b, err := fs.ReadFile(examples.FS, f)
		if err != nil {
			return err
		}
		c, err := policies.Parse("examples/"+f, b)
		if err != nil {
			return err
		}
		name := c.Definition.Name
		if _, err := store.Get(ctx, name); err == nil {
			continue
		} else if !errors.Is(err, policies.ErrNotFound) {
			return err
		}
		v, err := store.Put(ctx, c.Definition, policies.WithSource("examples/"+f))
		if err != nil {
			return err
		}
		rt.Log.Info("applied example agent", "agent", name, "version", v)
	}
	return nil
}

func runApply(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "apply", "[flags] FILE...")
	var sf serverFlags
	sf.register(fs, env)
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(env.Stderr, "jetloop apply: no files; usage: jetloop apply FILE...")
		return errUsage
	}
	// Validate every file first: nothing is stored unless all are valid.
	var defs []*policies.Compiled
	var errs []error
	for _, path := range fs.Args() {
		c, err := policies.LoadFile(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		defs = append(defs, c)
	}
	if len(errs) > 0 {
		for _, e := range policies.Errors(errors.Join(errs...)) {
			fmt.Fprintln(env.Stderr, e)
		}
		return fmt.Errorf("refused: %d problem(s); nothing was stored", len(policies.Errors(errors.Join(errs...))))
	}
	if err := admitCatalogs(ctx, env, defs, fs.Args()); err != nil {
		return err
	}
	for _, c := range defs {
		for _, w := range api.KeyWarnings(c.Definition, env.Getenv) {
			fmt.Fprintln(env.Stderr, "warning: "+w)
		}
	}
	rt, closeConn, err := dialNames(ctx, env, sf, "apply")
	if err != nil {
		return err
	}
	defer closeConn()
	store, err := policies.NewStore(ctx, rt.JS, rt.Names)
	if err != nil {
		return err
	}
	for i, c := range defs {
		before, _ := store.Get(ctx, c.Definition.Name)
		v, err := store.Put(ctx, c.Definition, policies.WithSource(fs.Arg(i)))
		if err != nil {
			return err
		}
		note := ""
		if before.Version == v {
			note = " (unchanged)"
		}
		fmt.Fprintf(env.Stdout, "%s version %d%s\n", c.Definition.Name, v, note)
		for _, s := range c.Definition.MCPServers {
			fmt.Fprintf(env.Stdout, "  mcp server %s: admitted %s\n", s.Name, strings.Join(s.Tools, ", "))
		}
	}
	return nil
}

// admitCatalogs records, from this process, what each definition's MCP
// servers offer of the tools it admits (mcp.Pool.Admit); a problem refuses
// the whole apply.
func admitCatalogs(ctx context.Context, env *Env, defs []*policies.Compiled, files []string) error {
	var pool *mcp.Pool
	var errs []error
	for i, c := range defs {
		if len(c.Definition.MCPServers) == 0 {
			continue
		}
		if pool == nil {
			p, err := mcp.NewPool(mcp.Options{Getenv: env.Getenv, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				return err
			}
			defer p.Close()
			pool = p
		}
		if err := pool.Admit(ctx, c, files[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	problems := policies.Errors(errors.Join(errs...))
	for _, e := range problems {
		fmt.Fprintln(env.Stderr, e)
	}
	return fmt.Errorf("refused: %d problem(s); nothing was stored", len(problems))
}

func dialNames(ctx context.Context, env *Env, sf serverFlags, verb string) (*Runtime, func(), error) {
	names, err := streams.NewNames(sf.prefix)
	if err != nil {
		return nil, nil, err
	}
	return dial(ctx, sf, names, "jetloop "+verb, env)
}

func runAgents(ctx context.Context, env *Env, args []string) error {
	rt, cf, rest, closeConn, err := clientRuntime(ctx, env, "agents", "[flags]", args, nil)
	if err != nil {
		return err
	}
	defer closeConn()
	if len(rest) > 0 {
		fmt.Fprintf(env.Stderr, "jetloop agents: unexpected argument %q\n", rest[0])
		return errUsage
	}
	resp, err := api.NewClient(rt.NC, rt.Names).Agents(ctx)
	if err != nil {
		return err
	}
	recs := resp.Agents
	if cf.json {
		type row struct {
			Name      string    `json:"name"`
			Version   uint64    `json:"version"`
			Model     string    `json:"model"`
			Triggers  []string  `json:"triggers"`
			Schedules []string  `json:"schedules"`
			Source    string    `json:"source,omitempty"`
			AppliedAt time.Time `json:"applied_at"`
		}
		rows := make([]row, 0, len(recs))
		for _, r := range recs {
			d := r.Definition
			rows = append(rows, row{Name: d.Name, Version: d.Version, Model: modelName(d.Model), Triggers: triggerNames(d),
				Schedules: scheduleNames(d), Source: r.Source, AppliedAt: r.AppliedAt})
		}
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	now := time.Now()
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tVERSION\tMODEL\tTRIGGERS\tSCHEDULES\tAPPLIED\tSOURCE")
	for _, r := range recs {
		d := r.Definition
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", d.Name, d.Version, modelName(d.Model),
			orDash(strings.Join(triggerNames(d), ",")), orDash(strings.Join(scheduleNames(d), ",")), ago(r.AppliedAt, now), orDash(r.Source))
	}
	return tw.Flush()
}

func modelName(m policies.Model) string {
	if m.Name == "" {
		return m.Provider
	}
	return m.Provider + "/" + m.Name
}

func triggerNames(d policies.Definition) []string {
	out := []string{}
	for _, t := range d.Triggers {
		out = append(out, t.Name)
	}
	return out
}

func scheduleNames(d policies.Definition) []string {
	out := []string{}
	for _, s := range d.Schedules {
		out = append(out, s.Name)
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func runEvents(ctx context.Context, env *Env, args []string) error {
	var agent string
	var since time.Duration
	var n int
	rt, cf, rest, closeConn, err := clientRuntime(ctx, env, "events", "[flags]", args, func(fs *flag.FlagSet) {
		fs.StringVar(&agent, "agent", "", "only this agent's decisions")
		fs.DurationVar(&since, "since", time.Hour, "how far back to look")
		fs.IntVar(&n, "n", 50, "at most this many decisions, the newest")
	})
	if err != nil {
		return err
	}
	defer closeConn()
	if len(rest) > 0 {
		fmt.Fprintf(env.Stderr, "jetloop events: unexpected argument %q\n", rest[0])
		return errUsage
	}
	if n < 1 || n > 10000 {
		return fmt.Errorf("-n %d: want 1 to 10000", n)
	}
	resp, err := api.NewClient(rt.NC, rt.Names).Events(ctx, api.EventsRequest{Agent: agent, Since: time.Now().Add(-since), Limit: n})
	if err != nil {
		return err
	}
	recs := resp.Records
	if resp.Truncated {
		fmt.Fprintf(env.Stderr, "jetloop events: only the newest %d decisions fit one answer\n", len(recs))
	}
	if cf.json {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(recs)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tDECISION\tRULE\tSESSION\tTYPE\tEVENT\tREASON")
	for _, r := range recs {
		rule := r.Rule
		if rule == "" {
			rule = orDash(r.Agent)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Time.Local().Format("15:04:05"), r.Outcome, rule, orDash(r.Session),
			r.Event.Type, oneLine(r.Event.ID, 40), oneLine(orDash(r.Reason), 80))
	}
	return tw.Flush()
}

func runWebhook(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "webhook", "github [flags] EVENT FILE")
	url := fs.String("url", "http://127.0.0.1:8080", "base URL of the ingest HTTP listener")
	delivery := fs.String("delivery", "", "X-GitHub-Delivery (default: a new GUID; repeat one to test redelivery)")
	data := fs.String("data", ".jetloop", "`jetloop dev` --data folder whose generated secret to use when JETLOOP_GITHUB_SECRET is unset")
	if len(args) == 0 || args[0] != "github" {
		fs.Usage()
		return errUsage
	}
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return errUsage
	}
	event, file := fs.Arg(0), fs.Arg(1)
	body, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	secret := env.Getenv("JETLOOP_GITHUB_SECRET")
	if secret == "" {
		b, err := os.ReadFile(filepath.Join(*data, githubSecretFile))
		if err != nil {
			return fmt.Errorf("no secret: set JETLOOP_GITHUB_SECRET or point --data at a `jetloop dev` folder: %w", err)
		}
		secret = string(bytes.TrimSpace(b))
	}
	if *delivery == "" {
		*delivery = uuid.NewString()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(*url, "/")+"/webhooks/github", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "GitHub-Hookshot/jetloop-webhook")
	req.Header.Set(ingest.HeaderGitHubEvent, event)
	req.Header.Set(ingest.HeaderGitHubDelivery, *delivery)
	req.Header.Set(ingest.HeaderGitHubSignature, ingest.Sign([]byte(secret), body))
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("post %s: %w", req.URL, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	fmt.Fprintf(env.Stdout, "%s delivery %s: %s\n%s", event, *delivery, resp.Status, out)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered %s", req.URL, resp.Status)
	}
	return nil
}
