package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/ghapp"
	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/proctree"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/tools/mcp"
	"github.com/jetloop/jetloop/worker"
)

// workerCommands are the client verbs of the session side (send, status,
// show, tail): thin clients of the runtime API (jl.api.*), which `jetloop
// dev` and `jetloop ingest` serve.
func workerCommands() []command {
	return []command{
		{name: "send", summary: "send a message to a session: send AGENT SESSION TEXT", run: runSend},
		{name: "status", summary: "list sessions: status, since when, turns, tokens, cost, what blocked ones wait for; --tree as delegation trees", run: runStatus},
		{name: "show", summary: "print a session's state, budget and transcript: show AGENT/SESSION [--from N] [--limit N]", run: runShow},
		{name: "context", summary: "print what a session's next model call receives, part by part, with token estimates: context AGENT/SESSION", run: runContext},
		{name: "tail", summary: "follow a session's transcript live: tail AGENT/SESSION", run: runTail},
	}
}

// workerComponent returns one worker with identity id, running every agent
// in jl_agents with the built-in tools and the model providers. The
// environment may set JETLOOP_WORK_DIR (the folder of the sessions' work
// folders, <dir>/<agent>/<session>: one root shared by every worker of the
// machine, so a session finds its files whichever worker runs it; its
// lease keeps two workers out of it at once), JETLOOP_LEASE_TTL and
// JETLOOP_ACK_WAIT (durations; every worker of a deployment must agree on
// the latter).
func workerComponent(ctx context.Context, rt *Runtime, id string) (Component, error) {
	log := rt.Log.With("component", "worker")
	store, err := policies.NewStore(ctx, rt.JS, rt.Names, policies.WithLogger(log))
	if err != nil {
		return Component{}, err
	}
	blobs, err := rt.JS.ObjectStore(ctx, rt.Names.ObjectBlobs())
	if err != nil {
		return Component{}, fmt.Errorf("open object store %s: %w", rt.Names.ObjectBlobs(), err)
	}
	in, err := rt.JS.Stream(ctx, rt.Names.StreamIn())
	if err != nil {
		return Component{}, fmt.Errorf("open stream %s: %w", rt.Names.StreamIn(), err)
	}
	sessions, err := rt.JS.KeyValue(ctx, rt.Names.BucketSessions())
	if err != nil {
		return Component{}, fmt.Errorf("open bucket %s: %w", rt.Names.BucketSessions(), err)
	}
	getenv := rt.Getenv
	workDir := rt.workDir()
	trees, err := rt.Trees(workDir)
	if err != nil {
		return Component{}, err
	}
	// No worker label: the series of a process's workers are one (a
	// process is told apart by its scrape target), so a restart with a
	// new --id mints no new series.
	reg := prometheus.DefaultRegisterer
	// One set of GitHub clients serves every session of the worker: they
	// share its installation tokens and rate limits.
	gh, err := ghapp.New(ghapp.Options{Getenv: rt.Getenv, Logger: log, Metrics: reg})
	if err != nil {
		return Component{}, err
	}
	horizon, err := rt.EventHorizon()
	if err != nil {
		return Component{}, err
	}
	registry, err := tools.NewRegistry(tools.RegistryOptions{Blobs: blobs, Names: rt.Names, Logger: log, Metrics: reg},
		workerTools(rt, blobs, gh, tools.Events(rt.JS, in), sessions, trees, horizon)...)
	if err != nil {
		return Component{}, err
	}
	metrics := worker.NewMetrics()
	if err := metrics.Register(reg); err != nil {
		return Component{}, fmt.Errorf("register worker metrics: %w", err)
	}
	leaseTTL, err := envDuration(getenv, "JETLOOP_LEASE_TTL")
	if err != nil {
		return Component{}, err
	}
	ackWait, err := envDuration(getenv, "JETLOOP_ACK_WAIT")
	if err != nil {
		return Component{}, err
	}
	// Delegate calls start their sessions through the same pipeline as
	// every event: dedupe, admission (its rules kept current here) and
	// publish.
	rules := admission.NewRules()
	admit, err := delegationAdmit(ctx, rt, rules, log)
	if err != nil {
		return Component{}, err
	}
	mm, err := modelMetrics()
	if err != nil {
		return Component{}, fmt.Errorf("register model metrics: %w", err)
	}
	w, err := worker.New(ctx, rt.JS, worker.Config{
		ID:          id,
		Admit:       admit,
		Names:       rt.Names,
		Definitions: storeDefinitions{store},
		Models: func(spec policies.Model) (model.Model, error) {
			return model.New(spec, model.WithGetenv(getenv), model.WithLogger(log), model.WithMetrics(mm))
		},
		Tools: worker.RegistryTools(registry),
		// Answers to Slack messages go back to their thread; without a
		// bot token the transcript says so.
		Reply:        tools.SlackReply(tools.SlackConfig{Token: getenv(tools.EnvSlackBotToken), APIURL: getenv("JETLOOP_SLACK_API_URL")}),
		MCP:          mcp.Options{Getenv: getenv, Metrics: reg},
		WorkDir:      workDir,
		Trees:        trees,
		LeaseTTL:     leaseTTL,
		AckWait:      ackWait,
		EventHorizon: horizon,
		Log:          log,
		Metrics:      metrics,
		Tracer:       rt.Tracer,
	})
	if err != nil {
		return Component{}, err
	}
	// A worker apart (`jetloop worker --http`) serves its own metrics.
	mountMetrics(rt.Mux)
	return Component{Name: "worker " + id, Run: func(ctx context.Context) error {
		wctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := rules.Watch(wctx, store, log); err != nil {
				log.Error("admission definitions of delegations no longer watched", "err", err)
			}
		})
		defer wg.Wait()
		defer cancel()
		return w.Run(ctx)
	}}, nil
}

// delegationAdmit is the admission pipeline of a worker's delegate calls
// (ingest.Pipeline over rules): a refusal, an unknown agent or a malformed
// delegation is an answer for the calling model, anything else an error
// to try again.
func delegationAdmit(ctx context.Context, rt *Runtime, rules *admission.Rules, log *slog.Logger) (worker.AdmitFunc, error) {
	adm, err := admission.New(ctx, rt.JS, rules, admission.Config{Names: rt.Names, Log: log})
	if err != nil {
		return nil, err
	}
	dd, err := dedupe.New(ctx, rt.JS, dedupe.Config{Names: rt.Names})
	if err != nil {
		return nil, err
	}
	shares, err := rt.InShares()
	if err != nil {
		return nil, err
	}
	// The ingest's metrics, shared with the ingest of the same process:
	// delegations' decisions and their records count beside webhooks'.
	metrics := ingest.NewMetrics()
	if err := metrics.Register(prometheus.DefaultRegisterer); err != nil {
		return nil, fmt.Errorf("register ingest metrics: %w", err)
	}
	pipe := ingest.Pipeline(rt.JS, dd, adm, rt.Names, metrics, int(rt.NC.MaxPayload())-64<<10, shares)
	return func(ctx context.Context, e event.Event) (worker.Admission, error) {
		res, err := pipe(ctx, &ingest.Delivery{Event: e, Receiver: "delegate"})
		switch {
		case errors.Is(err, ingest.ErrNotFound), errors.Is(err, ingest.ErrBadRequest), errors.Is(err, ingest.ErrTooLarge), errors.Is(err, ingest.ErrNotAdmitted):
			return worker.Admission{Refused: []string{err.Error()}}, nil
		case errors.Is(err, ingest.ErrConflict):
			return worker.Admission{Conflict: err.Error()}, nil
		case err != nil:
			return worker.Admission{}, err
		}
		out := worker.Admission{Duplicate: res.Duplicate}
		for _, t := range res.Admitted {
			out.Admitted = append(out.Admitted, t.Agent+"/"+t.Session)
		}
		for _, r := range res.Refused {
			out.Refused = append(out.Refused, r.Reason)
		}
		return out, nil
	}, nil
}

// workerTools are the tools a worker runs. Definitions are checked
// against tools.Names when they are applied: the two must name the same
// tools (wire_worker_internal_test.go holds them to it).
func workerTools(rt *Runtime, blobs tools.BlobStore, gh *ghapp.Clients, in tools.EventStore, sessions tools.NotesStore, trees *proctree.Starter, horizon int) []tools.Tool {
	if horizon == 0 {
		horizon = worker.DefaultEventHorizon
	}
	return append(tools.Builtins(tools.BuiltinConfig{Blobs: blobs, Names: rt.Names, Events: in, EventHorizon: max(horizon, 0), Sessions: sessions, Trees: trees,
		HTTPAllowPrivate: rt.Local || rt.Getenv("JETLOOP_HTTP_ALLOW_PRIVATE") == "1"}),
		tools.GitHub(tools.GitHubConfig{Clients: gh})...)
}

// envDuration reads a duration setting from the environment; unset is 0
// (the default).
func envDuration(getenv func(string) string, name string) (time.Duration, error) {
	v := getenv(name)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q: want a duration such as 30s", name, v)
	}
	return d, nil
}

// storeDefinitions serves the worker from jl_agents: versions, rollouts
// and the rollout guard's counts.
type storeDefinitions struct{ *policies.Store }

func (d storeDefinitions) Get(ctx context.Context, agent string) (policies.Definition, error) {
	def, err := d.Store.Get(ctx, agent)
	return def, notFound(err)
}

func notFound(err error) error {
	if errors.Is(err, policies.ErrNotFound) {
		return fmt.Errorf("%w: %w", worker.ErrNotFound, err)
	}
	return err
}

// clientFlags are the flags of the session verbs.
type clientFlags struct {
	serverFlags
	json bool
}

// clientRuntime parses a verb's flags and connects.
func clientRuntime(ctx context.Context, env *Env, name, synopsis string, args []string, extra func(fs *flag.FlagSet)) (*Runtime, *clientFlags, []string, func(), error) {
	var cf clientFlags
	fs := newFlags(env, name, synopsis)
	cf.register(fs, env)
	fs.BoolVar(&cf.json, "json", false, "print JSON for machines")
	if extra != nil {
		extra(fs)
	}
	if err := parse(fs, args); err != nil {
		return nil, nil, nil, nil, err
	}
	names, err := streams.NewNames(cf.prefix)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	rt, closeConn, err := dial(ctx, cf.serverFlags, names, "jetloop "+name, env)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	return rt, &cf, fs.Args(), closeConn, nil
}

// parseRef reads AGENT/SESSION; the session may itself contain '/'.
func parseRef(s string) (streams.SessionRef, error) {
	agent, session, ok := strings.Cut(s, "/")
	if !ok || agent == "" || session == "" {
		return streams.SessionRef{}, fmt.Errorf("%q: want AGENT/SESSION", s)
	}
	return streams.NewSessionRef(agent, session)
}

func runSend(ctx context.Context, env *Env, args []string) error {
	var id string
	var wait bool
	var timeout time.Duration
	rt, cf, rest, closeConn, err := clientRuntime(ctx, env, "send", "[flags] AGENT SESSION TEXT", args, func(fs *flag.FlagSet) {
		fs.StringVar(&id, "id", "", "idempotency key: a message sent twice with one key runs once (default: a new id)")
		fs.BoolVar(&wait, "wait", false, "wait until the session has handled the message, then print its answer")
		fs.DurationVar(&timeout, "timeout", 5*time.Minute, "with --wait, how long to wait")
	})
	if err != nil {
		return err
	}
	defer closeConn()
	if len(rest) != 3 {
		fmt.Fprintln(env.Stderr, "Usage: jetloop send [flags] AGENT SESSION TEXT")
		return errUsage
	}
	ref, err := streams.NewSessionRef(rest[0], rest[1])
	if err != nil {
		return err
	}
	c := api.NewClient(rt.NC, rt.Names)
	// The message's run is recorded after the entries the session has
	// now: waiting reads from there, so it costs what the run holds, not
	// what the session's age has put into its transcript.
	from := uint64(1)
	if wait {
		if from, err = transcriptEnd(ctx, c, ref); err != nil {
			return err
		}
	}
	sent, err := c.Send(ctx, api.SendRequest{Agent: ref.Agent, Session: ref.Session, Text: rest[2], ID: id})
	if err != nil {
		return err
	}
	if sent.Duplicate {
		// A message sent before may have run before the entries read.
		from = 1
	}
	seq := sent.Seq
	ref, _ = streams.NewSessionRef(sent.Agent, sent.Session)
	if !wait {
		if cf.json {
			return json.NewEncoder(env.Stdout).Encode(sent)
		}
		switch {
		case sent.Duplicate:
			fmt.Fprintf(env.Stdout, "sent to %s before (id %s, seq %d): not sent again\n", ref, sent.ID, seq)
		case sent.Debounced:
			fmt.Fprintf(env.Stdout, "sent to %s (id %s): joins a burst that reaches the session as one event\n", ref, sent.ID)
		case sent.Throttled:
			fmt.Fprintf(env.Stdout, "sent to %s (id %s): throttled, reaches the session at %s\n", ref, sent.ID, sent.At.Local().Format(time.RFC3339))
		default:
			fmt.Fprintf(env.Stdout, "sent to %s (seq %d)\n", ref, seq)
		}
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var final *record.State
	var answer string
	// Only an answer of the run this message started counts: from the
	// message's entry to the next input's.
	ours := false
	err = follow(wctx, rt, c, ref, from, func(u record.Update) error {
		switch {
		case u.Entry != nil && u.Entry.Event != nil && (u.Entry.Kind == record.KindUser || u.Entry.Kind == record.KindEvent):
			if seq == 0 && (u.Entry.Event.ID == sent.ID || sent.Debounced && u.Entry.Event.Count > 0) {
				// A message that waited (throttled, or in a burst whose
				// latest event stands for it) is known by its id.
				seq = u.Entry.Event.Seq
			}
			if seq != 0 && u.Entry.Event.Seq == seq {
				ours, answer = true, ""
			} else if seq != 0 && u.Entry.Event.Seq > seq {
				ours = false
			}
		case u.Entry != nil && u.Entry.Kind == record.KindAssistant && ours:
			answer = u.Entry.Text
		case u.State != nil && seq != 0 && u.State.InSeq >= seq && u.State.Status.Resting() && u.State.Status != record.StatusWaiting && u.State.Pending == nil:
			// A session waiting for the sessions it delegated to goes on
			// by itself when they answer: its run has not rested.
			final = u.State
			return record.ErrStop
		}
		return nil
	})
	if err != nil {
		return err
	}
	if final == nil {
		return fmt.Errorf("%s did not handle the message within %s (see 'jetloop show %s')", ref, timeout, ref)
	}
	if cf.json {
		if err := json.NewEncoder(env.Stdout).Encode(map[string]any{"agent": ref.Agent, "session": ref.Session, "seq": seq,
			"status": final.Status, "reason": final.Reason, "waiting_for": final.WaitingFor, "answer": answer}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(env.Stdout, "%s %s", ref, final.Status)
		if final.Reason != "" {
			fmt.Fprintf(env.Stdout, " (%s)", final.Reason)
		}
		if final.WaitingFor != "" {
			fmt.Fprintf(env.Stdout, " waiting for: %s", final.WaitingFor)
		}
		fmt.Fprintln(env.Stdout)
		if answer != "" {
			fmt.Fprintln(env.Stdout, answer)
		}
	}
	switch final.Status {
	case record.StatusFailed, record.StatusBudgetExceeded, record.StatusCancelled:
		// The message was handled and its run did not succeed: say so in
		// the exit status too.
		return fmt.Errorf("%s: the run ended %s: %s", ref, final.Status, final.Reason)
	}
	return nil
}

func runStatus(ctx context.Context, env *Env, args []string) error {
	var agent, status, since string
	var most int
	var tree bool
	rt, cf, rest, closeConn, err := clientRuntime(ctx, env, "status", "[flags]", args, func(fs *flag.FlagSet) {
		fs.StringVar(&agent, "agent", "", "only this agent's sessions")
		fs.StringVar(&status, "status", "", "only sessions with this status (e.g. blocked)")
		fs.StringVar(&since, "since", "", "only sessions whose status changed since: a time (RFC 3339) or how long ago (1h)")
		fs.IntVar(&most, "limit", 0, "print at most this many sessions (0: all, read a page at a time)")
		fs.BoolVar(&tree, "tree", false, "each session under the one that delegated to it, with the usage of its tree")
	})
	if err != nil {
		return err
	}
	defer closeConn()
	if len(rest) > 0 {
		fmt.Fprintf(env.Stderr, "jetloop status: unexpected argument %q\n", rest[0])
		return errUsage
	}
	if most < 0 {
		fmt.Fprintf(env.Stderr, "jetloop status: --limit %d: want 0 (all) or more\n", most)
		return errUsage
	}
	req := api.StatusRequest{Agent: agent, Status: status}
	if since != "" {
		if req.Since, err = parseSince(since, time.Now()); err != nil {
			return err
		}
	}
	// Page through the index: a page per request, however many sessions.
	rows := []record.Summary{}
	c := api.NewClient(rt.NC, rt.Names)
	for {
		if most > 0 {
			req.Limit = min(most-len(rows), record.DefaultPage)
		}
		resp, err := c.Status(ctx, req)
		if err != nil {
			return err
		}
		rows = append(rows, resp.Sessions...)
		if resp.Next == 0 || most > 0 && len(rows) >= most {
			break
		}
		req.Cursor = resp.Next
	}
	if tree {
		return printForest(env, api.Forest(rows), cf.json)
	}
	if cf.json {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	now := time.Now()
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tSTATUS\tSINCE\tVERSION\tTURNS\tTOKENS\tCOST\tWAITING FOR / REASON")
	for _, s := range rows {
		note := s.WaitingFor
		if note == "" {
			note = s.Reason
		}
		fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\t%d\t%d\t$%.4f\t%s\n", s.Agent, s.Session, s.Status, ago(s.Since, now),
			versionCell(s.DefinitionVersion, s.Rollout), s.Turns, s.Tokens, s.CostUSD, oneLine(note, 80))
	}
	return tw.Flush()
}

// printForest prints delegation trees: each session under the one that
// delegated to it, with its own usage and its tree's.
func printForest(env *Env, forest []api.Node, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		if forest == nil {
			forest = []api.Node{}
		}
		return enc.Encode(forest)
	}
	now := time.Now()
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tSTATUS\tSINCE\tTURNS\tTOKENS\tCOST\tTREE TURNS\tTREE TOKENS\tTREE COST\tWAITING FOR / REASON")
	var walk func(n api.Node, indent string)
	walk = func(n api.Node, indent string) {
		s := n.Summary
		note := s.WaitingFor
		if note == "" {
			note = s.Reason
		}
		name := s.Agent + "/" + s.Session
		if indent != "" {
			name = indent + "└ " + name
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t$%.4f\t%d\t%d\t$%.4f\t%s\n", name, s.Status, ago(s.Since, now),
			s.Turns, s.Tokens, s.CostUSD, s.SubtreeTurns, s.SubtreeTokens, s.SubtreeCostUSD, oneLine(note, 80))
		for _, c := range n.Children {
			walk(c, indent+"  ")
		}
	}
	for _, n := range forest {
		walk(n, "")
	}
	return tw.Flush()
}

func runShow(ctx context.Context, env *Env, args []string) error {
	var from uint64
	var most int
	rt, cf, rest, closeConn, err := clientRuntime(ctx, env, "show", "[flags] AGENT/SESSION", args, func(fs *flag.FlagSet) {
		fs.Uint64Var(&from, "from", 1, "first entry id to print")
		fs.IntVar(&most, "limit", 0, "print at most this many entries (0: all from --from on)")
	})
	if err != nil {
		return err
	}
	defer closeConn()
	if len(rest) != 1 {
		fmt.Fprintln(env.Stderr, "Usage: jetloop show [flags] AGENT/SESSION")
		return errUsage
	}
	if most < 0 {
		fmt.Fprintf(env.Stderr, "jetloop show: --limit %d: want 0 (all) or more\nUsage: jetloop show [flags] AGENT/SESSION\n", most)
		return errUsage
	}
	ref, err := parseRef(rest[0])
	if err != nil {
		return err
	}
	tr, err := showRange(ctx, api.NewClient(rt.NC, rt.Names), ref, max(from, 1), most)
	if errors.Is(err, api.ErrNotFound) {
		return missing("no session %s (see 'jetloop status')", ref)
	}
	if err != nil {
		return err
	}
	if cf.json {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(tr)
	}
	w := env.Stdout
	fmt.Fprintf(w, "%s/%s  %s since %s", tr.Agent, tr.Session, tr.Status, tr.Since.Local().Format(time.DateTime))
	if tr.Reason != "" {
		fmt.Fprintf(w, "  (%s)", tr.Reason)
	}
	fmt.Fprintln(w)
	if tr.WaitingFor != "" {
		fmt.Fprintf(w, "waiting for: %s\n", tr.WaitingFor)
	}
	if tr.Parent != "" {
		fmt.Fprintf(w, "forked from %s/%s at turn %d\n", tr.Agent, tr.Parent, tr.ForkTurn)
	}
	if d := tr.Delegation; d != nil {
		fmt.Fprintf(w, "delegated by %s (call %s), %d delegation(s) below %s; task: %s\n", d.Parent, d.CallID, d.Hops, pathRoot(d), oneLine(d.Task, 100))
	}
	u, r, l := tr.Budget.Usage, tr.Budget.Run, tr.Budget.Limits
	fmt.Fprintf(w, "definition %s  this run: turns %d%s  tokens %d%s  cost $%.4f%s\n", versionCell(tr.DefinitionVersion, tr.Rollout),
		r.Turns, limit(l.MaxTurns > 0, fmt.Sprint(l.MaxTurns)), r.Tokens, limit(l.MaxTokens > 0, fmt.Sprint(l.MaxTokens)),
		r.CostUSD, limit(l.MaxCostUSD > 0, fmt.Sprintf("$%.4f", l.MaxCostUSD)))
	fmt.Fprintf(w, "session total: turns %d  tokens %d  cost $%.4f\n", u.Turns, u.Tokens, u.CostUSD)
	if u.UnknownUsageCalls > 0 {
		fmt.Fprintf(w, "%d interrupted model call(s) of unknown usage\n", u.UnknownUsageCalls)
	}
	if p := tr.Pending; p != nil {
		fmt.Fprintf(w, "in flight: step %d %s %s (since %s, %s)\n", p.Step, p.Kind, p.Tool, p.Started.Local().Format(time.TimeOnly), p.Owner)
	}
	printDelegated(w, tr)
	fmt.Fprintln(w)
	for _, e := range tr.Transcript {
		printEntry(w, e)
	}
	return nil
}

// pathRoot is the root of a delegation's path.
func pathRoot(d *record.Delegation) string {
	if len(d.Path) == 0 {
		return d.Parent
	}
	return d.Path[0].Session
}

// printDelegated prints what a session delegated: its tree's usage, the
// live ledger account, and each child with its status.
func printDelegated(w io.Writer, tr record.Transcript) {
	if st := tr.Budget.Subtree; len(tr.Children) > 0 || tr.Budget.Delegated.Sessions > 0 {
		fmt.Fprintf(w, "with its delegations: turns %d  tokens %d  cost $%.4f (%d delegated session(s) answered)\n",
			st.Turns, st.Tokens, st.CostUSD, tr.Budget.Delegated.Sessions)
	}
	if a := tr.Ledger; a != nil {
		tot := a.Total()
		fmt.Fprintf(w, "ledger of run %s: turns %d%s  tokens %d%s  cost $%.4f%s over %d session(s)\n", a.Run,
			tot.Turns, limit(a.Ceiling.MaxTurns > 0, fmt.Sprint(a.Ceiling.MaxTurns)),
			tot.Tokens(), limit(a.Ceiling.MaxTokens > 0, fmt.Sprint(a.Ceiling.MaxTokens)),
			tot.CostUSD, limit(a.Ceiling.MaxCostUSD > 0, fmt.Sprintf("$%.4f", a.Ceiling.MaxCostUSD)), len(a.Parts))
	}
	for _, c := range tr.Children {
		state := string(c.Status)
		if state == "" {
			state = "not started yet"
		}
		if c.WaitingFor != "" {
			state += ": " + c.WaitingFor
		} else if c.Reason != "" {
			state += ": " + c.Reason
		}
		answered := "waited for"
		if c.Answered {
			answered = "answered"
		}
		fmt.Fprintf(w, "  delegated %s → %s  %s, %s  (tree: turns %d, $%.4f)\n", c.CallID, c.Session, oneLine(state, 80), answered, c.SubtreeTurns, c.SubtreeCostUSD)
	}
}

func runTail(ctx context.Context, env *Env, args []string) error {
	var untilRest bool
	rt, cf, rest, closeConn, err := clientRuntime(ctx, env, "tail", "[flags] AGENT/SESSION", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&untilRest, "until-rest", false, "exit once the session rests (no run in progress)")
	})
	if err != nil {
		return err
	}
	defer closeConn()
	if len(rest) != 1 {
		fmt.Fprintln(env.Stderr, "Usage: jetloop tail [flags] AGENT/SESSION")
		return errUsage
	}
	ref, err := parseRef(rest[0])
	if err != nil {
		return err
	}
	enc := json.NewEncoder(env.Stdout)
	enc.SetEscapeHTML(false)
	var last record.Status
	return follow(ctx, rt, api.NewClient(rt.NC, rt.Names), ref, 1, func(u record.Update) error {
		if u.Entry != nil {
			if cf.json {
				return enc.Encode(map[string]any{"entry": u.Entry})
			}
			printEntry(env.Stdout, *u.Entry)
			return nil
		}
		st := u.State
		if st.Status != last {
			last = st.Status
			if cf.json {
				if err := enc.Encode(map[string]any{"status": worker.StatusChange{Agent: st.Agent, Session: st.Session,
					Status: st.Status, Since: st.Since, Reason: st.Reason, WaitingFor: st.WaitingFor, Turns: st.Turns, Worker: st.Owner}}); err != nil {
					return err
				}
			} else {
				line := fmt.Sprintf("-- %s", st.Status)
				if st.Reason != "" {
					line += " (" + st.Reason + ")"
				}
				if st.WaitingFor != "" {
					line += " waiting for: " + st.WaitingFor
				}
				fmt.Fprintln(env.Stdout, line)
			}
		}
		if untilRest && st.Status.Resting() && st.Status != record.StatusWaiting && st.Pending == nil && st.NextEntry > 1 {
			return record.ErrStop
		}
		return nil
	})
}

// How often a follower of a session (send --wait, tail) asks the API for
// what is new. A status change wakes it at once (jl.status.<agent>.<session>);
// entries of a working run come at the next poll.
const (
	followPollWorking = 500 * time.Millisecond
	followPollResting = 2 * time.Second
	// maxShowPages bounds the requests of one showAll.
	maxShowPages = 10_000
)

// showAll reads a session's state and its transcript from entry from
// through the API, in as many requests as the transcript's size takes.
// Entries never change once written, so the pages and the state of the
// last one are consistent.
func showAll(ctx context.Context, c *api.Client, ref streams.SessionRef, from uint64) (record.Transcript, error) {
	return showRange(ctx, c, ref, from, 0)
}

// showRange is showAll of at most limit entries (0: all).
func showRange(ctx context.Context, c *api.Client, ref streams.SessionRef, from uint64, limit int) (record.Transcript, error) {
	entries := []record.Entry{}
	var first *record.Transcript
	for range maxShowPages {
		req := api.ShowRequest{Agent: ref.Agent, Session: ref.Session, From: from}
		if limit > 0 {
			req.Limit = min(limit-len(entries), api.MaxShowLimit)
		}
		resp, err := c.Show(ctx, req)
		if err != nil {
			return record.Transcript{}, err
		}
		entries = append(entries, resp.Transcript.Transcript...)
		if first == nil {
			f := resp.Transcript
			first = &f
		}
		if !resp.Truncated || (limit > 0 && len(entries) >= limit) {
			tr := resp.Transcript
			tr.Transcript = entries
			// The first page says what the session delegated.
			tr.Children, tr.Ledger, tr.WaitingFor = first.Children, first.Ledger, first.WaitingFor
			return tr, nil
		}
		if resp.Next <= from {
			return record.Transcript{}, fmt.Errorf("show %s: the API answered a truncated transcript without progress (next %d after %d)", ref, resp.Next, from)
		}
		from = resp.Next
	}
	return record.Transcript{}, fmt.Errorf("show %s: more than %d pages", ref, maxShowPages)
}

// transcriptEnd is the id the next entry of a session's transcript will
// have (1 for a session that does not exist yet), read with a show
// request past the transcript's end, which reads no entry.
func transcriptEnd(ctx context.Context, c *api.Client, ref streams.SessionRef) (uint64, error) {
	resp, err := c.Show(ctx, api.ShowRequest{Agent: ref.Agent, Session: ref.Session, From: math.MaxUint64, Limit: 1})
	switch {
	case errors.Is(err, api.ErrNotFound):
		return 1, nil
	case err != nil:
		return 0, fmt.Errorf("read where the transcript of %s ends: %w", ref, err)
	}
	return resp.Transcript.Entries + 1, nil
}

// follow calls fn with a session's transcript entries in order, from
// entry from, and with its state whenever it changes, read through the
// API, until ctx ends or fn returns an error (which follow returns;
// record.ErrStop ends it cleanly). A session that does not exist yet is
// waited for.
func follow(ctx context.Context, rt *Runtime, c *api.Client, ref streams.SessionRef, from uint64, fn func(record.Update) error) error {
	wake := make(chan struct{}, 1)
	sub, err := rt.NC.Subscribe(rt.Names.Status(ref), func(*nats.Msg) {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return fmt.Errorf("follow %s: subscribe to %s: %w", ref, rt.Names.Status(ref), err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	next := max(from, 1)
	var last *followed
	for {
		tr, err := showAll(ctx, c, ref, next)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, api.ErrNotFound):
		case err != nil:
			return err
		default:
			for i := range tr.Transcript {
				e := tr.Transcript[i]
				if e.ID < next {
					continue
				}
				next = e.ID + 1
				if err := fn(record.Update{Entry: &e}); err != nil {
					return stopped(err)
				}
			}
			st := stateOf(tr, next)
			if f := followedOf(st); last == nil || *last != f {
				last = &f
				if err := fn(record.Update{State: &st}); err != nil {
					return stopped(err)
				}
			}
		}
		poll := followPollResting
		if last != nil && last.status == record.StatusWorking {
			poll = followPollWorking
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-wake:
			t.Stop()
		case <-t.C:
		}
	}
}

func stopped(err error) error {
	if errors.Is(err, record.ErrStop) {
		return nil
	}
	return err
}

// followed is what of a state makes follow report it again.
type followed struct {
	status             record.Status
	since              time.Time
	reason, waitingFor string
	inSeq, ctlSeq      uint64
	pendingStep        uint64
	nextEntry          uint64
	owner              string
}

func followedOf(st record.State) followed {
	f := followed{status: st.Status, since: st.Since, reason: st.Reason, waitingFor: st.WaitingFor,
		inSeq: st.InSeq, ctlSeq: st.CtlSeq, nextEntry: st.NextEntry, owner: st.Owner}
	if st.Pending != nil {
		f.pendingStep = st.Pending.Step
	}
	return f
}

// stateOf is the part of a session's state that show answers with.
func stateOf(tr record.Transcript, nextEntry uint64) record.State {
	var st record.State
	st.Agent, st.Session, st.Parent, st.ForkTurn = tr.Agent, tr.Session, tr.Parent, tr.ForkTurn
	st.Status, st.Since, st.Reason, st.WaitingFor = tr.Status, tr.Since, tr.Reason, tr.WaitingFor
	st.DefinitionVersion, st.DefinitionRevision, st.Rollout, st.Limits = tr.DefinitionVersion, tr.DefinitionRevision, tr.Rollout, tr.Budget.Limits
	st.Turns, st.RunTurns, st.UnknownUsage = tr.Budget.Usage.Turns, tr.Budget.Run.Turns, tr.Budget.Usage.UnknownUsageCalls
	st.RunStarted, st.Pending, st.Steers = tr.Budget.Run.Started, tr.Pending, tr.Steers
	st.InSeq, st.CtlSeq, st.NextEntry, st.Owner = tr.InSeq, tr.CtlSeq, nextEntry, tr.Owner
	return st
}

// printEntry writes one transcript entry for people.
func printEntry(w io.Writer, e record.Entry) {
	head := fmt.Sprintf("[%d] t%d %s %s", e.ID, e.Turn, e.Time.Local().Format(time.TimeOnly), e.Kind)
	switch {
	case e.Context != "":
		// How the next model call sees it: masked, or summarised.
		head += " [" + e.Context + "]"
	case e.Kind == record.KindSummary && e.Covers != nil:
		head += fmt.Sprintf(" of %d-%d", e.Covers.From, e.Covers.To)
	}
	switch e.Kind {
	case record.KindToolCall:
		fmt.Fprintf(w, "%s %s %s (%s)\n", head, e.Name, oneLine(string(e.Args), 200), e.CallID)
	case record.KindToolResult:
		status := "ok"
		if e.IsError {
			status = "error"
		}
		fmt.Fprintf(w, "%s %s (%s) %s%s\n", head, e.Name, e.CallID, status, indent(e.Result))
		if e.Blob != "" {
			fmt.Fprintf(w, "    full result in %s\n", e.Blob)
		}
	case record.KindEvent:
		fmt.Fprintf(w, "%s %s%s\n", head, e.Name, indent(e.Text))
	default:
		fmt.Fprintf(w, "%s%s\n", head, indent(e.Text))
	}
}

// indent renders text after a heading: on the same line when it is one
// short line, else indented below.
func indent(text string) string {
	text = strings.TrimRight(text, "\n")
	if text == "" {
		return ""
	}
	if !strings.Contains(text, "\n") && len(text) <= 100 {
		return ": " + text
	}
	return "\n    " + strings.ReplaceAll(text, "\n", "\n    ")
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}

func limit(set bool, v string) string {
	if !set {
		return ""
	}
	return "/" + v
}

// ago writes how long ago t was, for tables.
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Round(time.Second).String() + " ago"
}

// versionCell names a session's definition version for people: "v4",
// "v5 (canary)", "-" before its first run.
func versionCell(v uint64, rollout string) string {
	switch {
	case v == 0:
		return "-"
	case rollout != "":
		return fmt.Sprintf("v%d (canary)", v)
	}
	return fmt.Sprintf("v%d", v)
}

// modelMetrics are the process's model metrics on the default registry,
// shared by every worker it runs (and every `jetloop dev` a test runs in
// one process).
var modelMetrics = sync.OnceValues(func() (*model.Metrics, error) {
	return model.NewMetrics(prometheus.DefaultRegisterer)
})

// defaultWorkDir is the work folder root of a deployment when
// JETLOOP_WORK_DIR sets none: <data>/work under `jetloop dev`, else a
// folder of the temp dir named by the prefix and the servers, so two
// deployments (or a test's and a user's) never share session folders.
// workDir is the folder of the sessions' work folders: JETLOOP_WORK_DIR,
// or the default.
func (rt *Runtime) workDir() string {
	if d := rt.Getenv("JETLOOP_WORK_DIR"); d != "" {
		return d
	}
	return defaultWorkDir(rt)
}

func defaultWorkDir(rt *Runtime) string {
	if rt.DataDir != "" {
		return filepath.Join(rt.DataDir, "work")
	}
	servers := rt.NC.Opts.Url
	if len(rt.NC.Opts.Servers) > 0 {
		servers += "," + strings.Join(rt.NC.Opts.Servers, ",")
	}
	h := sha256.Sum256([]byte(servers))
	return filepath.Join(os.TempDir(), "jetloop-work", rt.Names.Prefix()+"-"+hex.EncodeToString(h[:6]))
}
