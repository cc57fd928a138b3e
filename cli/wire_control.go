package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/ingest/slack"
	"github.com/jetloop/jetloop/natsd"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools/mcp"
	"github.com/jetloop/jetloop/ui"
)

// Files under `jetloop dev`'s --data folder holding the API token it
// generates when the environment sets none.
const apiTokenFile = "api-token"

// controlCommands are the control verbs: thin clients of the runtime API.
func controlCommands() []command {
	return []command{
		{name: "steer", summary: "queue text for a session's next model call: steer AGENT/SESSION TEXT", run: controlVerb(control.Steer)},
		{name: "interrupt", summary: "pause a session at its next step boundary: interrupt AGENT/SESSION [REASON]", run: controlVerb(control.Interrupt)},
		{name: "resume", summary: "continue a paused or blocked session: resume AGENT/SESSION [TEXT]", run: controlVerb(control.Resume)},
		{name: "cancel", summary: "stop a session now, cancelling its model call and tool: cancel AGENT/SESSION [REASON]", run: controlVerb(control.Cancel)},
		{name: "approve", summary: "let a gated tool call run: approve AGENT/SESSION CALL_ID [NOTE]", run: controlVerb(control.Approve)},
		{name: "deny", summary: "refuse a gated tool call: deny AGENT/SESSION CALL_ID [REASON]", run: controlVerb(control.Deny)},
		{name: "fork", summary: "copy a session up to a turn into a new one: fork AGENT/SESSION --at TURN --as NEW [TEXT]", run: controlVerb(control.Fork)},
	}
}

// controlSynopsis is each verb's command line.
var controlSynopsis = map[control.Verb]string{
	control.Steer:     "[flags] AGENT/SESSION TEXT",
	control.Interrupt: "[flags] AGENT/SESSION [REASON]",
	control.Resume:    "[flags] AGENT/SESSION [TEXT]",
	control.Cancel:    "[flags] AGENT/SESSION [REASON]",
	control.Approve:   "[flags] AGENT/SESSION CALL_ID [NOTE]",
	control.Deny:      "[flags] AGENT/SESSION CALL_ID [REASON]",
	control.Fork:      "[flags] AGENT/SESSION --at TURN --as NEW [TEXT]",
}

// controlVerb runs one control verb through the API.
func controlVerb(verb control.Verb) func(ctx context.Context, env *Env, args []string) error {
	return func(ctx context.Context, env *Env, args []string) error {
		var id string
		at := -1
		var as string
		synopsis := controlSynopsis[verb]
		rt, cf, rest, closeConn, err := clientRuntime(ctx, env, string(verb), synopsis, args, func(fs *flag.FlagSet) {
			fs.StringVar(&id, "id", "", "idempotency key: the same message sent twice with one key is applied once (default: a new id)")
			if verb == control.Fork {
				fs.IntVar(&at, "at", -1, "the last turn to copy (0: only what came before the first model call)")
				fs.StringVar(&as, "as", "", "name of the new session")
			}
		})
		if err != nil {
			return err
		}
		defer closeConn()
		usage := func(why string) error {
			fmt.Fprintf(env.Stderr, "jetloop %s: %s\nUsage: jetloop %s %s\n", verb, why, verb, synopsis)
			return errUsage
		}
		if len(rest) == 0 {
			return usage("no session")
		}
		ref, err := parseRef(rest[0])
		if err != nil {
			return err
		}
		rest = rest[1:]
		req := api.ControlRequest{Agent: ref.Agent, Session: ref.Session, ID: id, Source: "/jetloop/cli"}
		switch verb {
		case control.Approve, control.Deny:
			if len(rest) == 0 {
				return usage("no call id (see 'jetloop status' for what a blocked session waits for)")
			}
			req.CallID, rest = rest[0], rest[1:]
		case control.Fork:
			if at < 0 || as == "" {
				return usage("fork needs --at TURN and --as NEW")
			}
			req.Turn, req.As = &at, as
		}
		req.Text = strings.Join(rest, " ")
		if verb == control.Steer && strings.TrimSpace(req.Text) == "" {
			return usage("no text")
		}
		resp, err := api.NewClient(rt.NC, rt.Names).Control(ctx, verb, req)
		if err != nil {
			return err // the API's errors name the verb and the session
		}
		if cf.json {
			return json.NewEncoder(env.Stdout).Encode(resp)
		}
		fmt.Fprintf(env.Stdout, "%s %s: stored (seq %d, id %s)\n", verb, ref, resp.Seq, resp.ID)
		return nil
	}
}

// apiComponents serve the runtime API: the jetloop micro service on
// jl.api.*, and on rt.Mux the HTTP control and sessions routes (bearer
// token JETLOOP_API_TOKEN, generated under `jetloop dev`) and POST
// /chat/slack when JETLOOP_SLACK_SIGNING_SECRET is set (channels mapped in
// the file JETLOOP_SLACK_CHANNELS names). `jetloop dev` and `jetloop
// ingest` run them: the API is the front door beside the HTTP receivers,
// and it must answer while no worker runs, since a control message for a
// session nobody runs is exactly what JL_CTL keeps for later.
func apiComponents(ctx context.Context, rt *Runtime) ([]Component, error) {
	log := rt.Log.With("component", "api")
	metrics := api.NewMetrics()
	if err := metrics.Register(prometheus.DefaultRegisterer); err != nil {
		return nil, fmt.Errorf("register api metrics: %w", err)
	}
	// apply records MCP servers' catalogs from here, with this process's
	// environment for their headers; a stdio server runs as a process
	// tree recorded with the workers' tool processes, so the next worker
	// here sweeps what a process killed during an apply left.
	trees, err := rt.Trees(rt.workDir())
	if err != nil {
		return nil, err
	}
	catalogs, err := mcp.NewPool(mcp.Options{Getenv: rt.Getenv, Logger: log, Trees: trees})
	if err != nil {
		return nil, err
	}
	shares, err := rt.InShares()
	if err != nil {
		return nil, err
	}
	svc, err := api.New(ctx, rt.NC, rt.JS, api.Config{Names: rt.Names, Build: Version, Log: log, Metrics: metrics, Readmit: rt.readmit, Requests: rt.requests, Catalogs: catalogs, Shares: shares})
	if err != nil {
		return nil, err
	}
	token, err := devSecret(rt, "JETLOOP_API_TOKEN", apiTokenFile)
	if err != nil {
		return nil, err
	}
	if token == "" {
		log.Warn("JETLOOP_API_TOKEN is not set: the API's HTTP routes (/v1/...) answer 503 and the dashboard (/ui/) is off")
	}
	g, err := rt.Gate()
	if err != nil {
		return nil, err
	}
	hc := api.HTTPConfig{Token: token, Gate: g, Stop: ctx.Done()}
	if token != "" {
		// The dashboard signs in with the same token, and calls the
		// routes above with its session cookie.
		auth, err := ui.NewAuth(token)
		if err != nil {
			return nil, err
		}
		auth.Mount(rt.Mux, rt.Log.With("component", "ui"))
		hc.Sessions, rt.ui = auth, auth
	}
	svc.MountHTTP(rt.Mux, hc)
	// Without a signing secret POST /chat/slack answers 503 (not
	// configured), so a misconfigured app is told rather than sent a 404.
	secret := rt.Getenv("JETLOOP_SLACK_SIGNING_SECRET")
	var channels slack.Channels
	if path := rt.Getenv("JETLOOP_SLACK_CHANNELS"); path != "" {
		if channels, err = slack.LoadChannels(path); err != nil {
			return nil, err
		}
	} else if secret != "" {
		log.Warn("JETLOOP_SLACK_CHANNELS is not set: Slack commands control no session")
	}
	check := func(ctx context.Context, ref streams.SessionRef, m control.Message) (string, error) {
		err := svc.CheckControl(ctx, ref, m)
		if e := (*api.Error)(nil); errors.As(err, &e) && e.Code < 500 {
			return e.Message, nil
		}
		return "", err
	}
	// A message that is not a command is a user request to its channel's
	// session, on the path of every user request.
	send := func(ctx context.Context, ref streams.SessionRef, text, id, source, thread string) (uint64, error) {
		if rt.requests == nil {
			return 0, errors.New("this process runs no ingest to admit requests")
		}
		res, err := rt.requests(ctx, events.Request{Agent: ref.Agent, Session: ref.Session, Text: text, ID: id, Source: source, Thread: thread}, "slack")
		if err != nil {
			return 0, err
		}
		for _, t := range res.Admitted {
			if t.Agent == ref.Agent {
				return t.Seq, nil
			}
		}
		return 0, nil
	}
	r, err := slack.New(ctx, rt.JS, slack.Config{Names: rt.Names, SigningSecret: []byte(secret), Channels: channels, Check: check, Send: send,
		Log: log.With("receiver", "slack"), Gate: g})
	if err != nil {
		return nil, err
	}
	r.Mount(rt.Mux)
	if secret != "" {
		log.Info("slack commands enabled", "channels", len(channels))
	}
	mountMetrics(rt.Mux)
	return []Component{{Name: "api", Run: svc.Run}}, nil
}

// devUser is the user `jetloop dev --auth` adds for its own components.
const devUser = "jetloop-dev"

// devAuth reads the users of `jetloop dev --auth FILE` and adds the
// process's own user, with a password made for this run and every
// permission, returning the option its connection logs in with.
func devAuth(path string) (*natsd.Auth, nats.Option, error) {
	a, err := natsd.LoadAuth(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--auth: %w", err)
	}
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return nil, nil, fmt.Errorf("--auth: generate a password: %w", err)
	}
	pass := hex.EncodeToString(raw)
	a.Users = append(a.Users, &server.User{Username: devUser, Password: pass})
	if err := a.Validate(); err != nil {
		return nil, nil, fmt.Errorf("--auth %s: %w (the name %q is the dev process's own)", path, err, devUser)
	}
	return &a, nats.UserInfo(devUser, pass), nil
}
