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
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
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
		{name: "agents", summary: "list agent definitions; agents history|show|diff|rollback|rollout NAME: their versions and rollouts", run: runAgents},
		{name: "events", summary: "show recent admission decisions with their rules, and definition changes", run: runEvents},
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
	shares, err := rt.InShares()
	if err != nil {
		return nil, err
	}
	srv, err := ingest.New(ingest.Config{
		Names:          rt.Names,
		Shares:         shares,
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
	rt.readmit = srv.Readmit
	rt.requests = srv.Request
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
// generated the first time (into a file only its owner reads) so
// `jetloop webhook` and the operator can use it.
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
	// The value stays in the file: a secret never goes to the log.
	rt.Log.Info("generated a secret into its file; set "+name+" to choose your own", "env", name, "file", path)
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
		v, err := store.Put(ctx, c.Definition, policies.WithSource("examples/"+f), policies.WithAppliedBy("jetloop dev"))
		if err != nil {
			return err
		}
		rt.Log.Info("applied example agent", "agent", name, "version", v)
	}
	return nil
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
	var definitions bool
	rt, cf, rest, closeConn, err := clientRuntime(ctx, env, "events", "[flags]", args, func(fs *flag.FlagSet) {
		fs.StringVar(&agent, "agent", "", "only this agent's decisions and changes")
		fs.DurationVar(&since, "since", time.Hour, "how far back to look")
		fs.IntVar(&n, "n", 50, "at most this many decisions (and as many definition changes), the newest")
		fs.BoolVar(&definitions, "definitions", false, "only definition changes: versions applied or restored, rollouts started, changed or ended (with --json: their array; without it --json prints the admission decisions)")
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
	recs, changes := resp.Records, resp.Changes
	if definitions {
		recs = nil
	}
	if resp.Truncated {
		fmt.Fprintf(env.Stderr, "jetloop events: only the newest %d decisions and %d changes fit one answer\n", len(resp.Records), len(changes))
	}
	if resp.Skipped > 0 {
		fmt.Fprintf(env.Stderr, "jetloop events: %d JL_AUDIT messages held lines of no decision record, skipped (the first: %s)\n", resp.Skipped, resp.SkippedError)
	}
	if cf.json {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		if definitions {
			if changes == nil {
				changes = []policies.Event{}
			}
			return enc.Encode(changes)
		}
		return enc.Encode(recs)
	}
	// Decisions and changes, merged by time.
	type row struct {
		at    time.Time
		cells string
	}
	var rows []row
	for _, r := range recs {
		rule := r.Rule
		if rule == "" {
			rule = orDash(r.Agent)
		}
		rows = append(rows, row{r.Time, fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", r.Time.Local().Format("15:04:05"), r.Outcome, rule, orDash(r.Session),
			r.Event.Type, oneLine(r.Event.ID, 40), oneLine(orDash(r.Reason), 80))})
	}
	for _, c := range changes {
		rows = append(rows, row{c.Time, fmt.Sprintf("%s\t%s\t%s\t-\tdefinition\tv%d\t%s", c.Time.Local().Format("15:04:05"), c.Change, c.Agent,
			c.Version, oneLine(c.Summary, 160)+byNote(c.By))})
	}
	slices.SortStableFunc(rows, func(a, b row) int { return a.at.Compare(b.at) })
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tDECISION\tRULE\tSESSION\tTYPE\tEVENT\tREASON")
	for _, r := range rows {
		fmt.Fprintln(tw, r.cells)
	}
	return tw.Flush()
}

func byNote(by string) string {
	if by == "" {
		return ""
	}
	return " (by " + by + ")"
}

func runWebhook(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "webhook", "github [flags] EVENT FILE")
	url := fs.String("url", "http://127.0.0.1:8080", "base URL of the ingest HTTP listener")
	delivery := fs.String("delivery", "", "X-GitHub-Delivery (default: a new GUID; repeat one to test redelivery)")
	data := fs.String("data", ".jetloop", "`jetloop dev` --data folder whose generated secret to use when JETLOOP_GITHUB_SECRET is unset")
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
		fs.Usage()
		return flag.ErrHelp
	}
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
