package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/cli"
	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/ingest/slack"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
)

// runDev runs `jetloop dev` in this process until the test ends and
// returns its ready line's nats and http addresses and its data folder.
func runDev(t *testing.T, vars map[string]string, extra ...string) (natsURL, httpURL, data string) {
	t.Helper()
	data = t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := newSyncBuffer(), newSyncBuffer()
	done := make(chan int, 1)
	args := append([]string{"dev", "--data", data, "--nats-port", "0", "--http", "127.0.0.1:0", "--workers", "0"}, extra...)
	go func() { done <- cli.MainEnv(ctx, env(stdout, stderr, vars), args) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("jetloop dev exited %d; stderr:\n%s", code, stderr.String())
		}
	})
	stdout.waitFor(t, "jetloop ready", 2*time.Minute)
	m := regexp.MustCompile(`nats=(\S+) http=(\S+)`).FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("ready line: %q", stdout.String())
	}
	return m[1], m[2], data
}

func run(t *testing.T, vars map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := cli.MainEnv(context.Background(), env(&out, &errb, vars), args)
	return code, out.String(), errb.String()
}

// putState writes a session's state as a worker would, so a control verb
// has a session to act on while no worker runs.
func putState(t *testing.T, js jetstream.JetStream, name string, status record.Status, turns int, call, gate string) {
	t.Helper()
	var st record.State
	st.Agent, st.Session, st.Status, st.Since, st.Turns, st.NextEntry = "demo", name, status, time.Now().UTC(), turns, 1
	if status == record.StatusBlocked {
		st.BlockedCall, st.WaitingFor, st.Approval = call, call, gate
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, streams.Default().BucketSessions())
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := streams.NewSessionRef("demo", name)
	b, _ := json.Marshal(st)
	if _, err := kv.Put(ctx, streams.Default().StateKey(ref), b); err != nil {
		t.Fatal(err)
	}
}

// TestControlVerbs runs every control verb against `jetloop dev --workers
// 0`: each is stored in JL_CTL while no worker runs, and one that cannot
// apply to its session is refused with exit 3 (not found) or 4 (conflict)
// and not stored.
func TestControlVerbs(t *testing.T) {
	natsURL, httpURL, data := runDev(t, nil)
	srv := []string{"--server", natsURL}
	_, js := natstest.Connect(t, natsURL)
	putState(t, js, "s1", record.StatusWorking, 3, "", "")
	putState(t, js, "gated", record.StatusBlocked, 2, "toolu_01", "rule 1")
	putState(t, js, "paused", record.StatusPaused, 2, "", "")
	tests := []struct {
		name string
		args []string
		want control.Message
	}{
		{name: "steer", args: []string{"steer", "demo/s1", "focus", "on", "the", "tests"}, want: control.Message{Verb: control.Steer, Text: "focus on the tests"}},
		{name: "interrupt", args: []string{"interrupt", "demo/s1"}, want: control.Message{Verb: control.Interrupt}},
		{name: "resume with flags after", args: []string{"resume", "demo/paused", "go on", "--id", "r-1"}, want: control.Message{Verb: control.Resume, Text: "go on", ID: "r-1"}},
		{name: "approve", args: []string{"approve", "demo/gated", "toolu_01"}, want: control.Message{Verb: control.Approve, CallID: "toolu_01"}},
		{name: "deny", args: []string{"deny", "demo/gated", "toolu_01", "not", "now"}, want: control.Message{Verb: control.Deny, CallID: "toolu_01", Text: "not now"}},
		{name: "fork", args: []string{"fork", "demo/s1", "--at", "2", "--as", "s1-retry"}, want: control.Message{Verb: control.Fork, Turn: 2, As: "s1-retry"}},
		{name: "cancel", args: []string{"cancel", "demo/s1"}, want: control.Message{Verb: control.Cancel}},
	}
	ctlStream, err := js.Stream(context.Background(), streams.Default().StreamCtl())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := run(t, nil, append(tt.args, append(srv, "--json")...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			var resp struct {
				Seq uint64 `json:"seq"`
			}
			if err := json.Unmarshal([]byte(out), &resp); err != nil || resp.Seq == 0 {
				t.Fatalf("output %q names no sequence (%v)", out, err)
			}
			raw, err := ctlStream.GetMsg(context.Background(), resp.Seq)
			if err != nil {
				t.Fatal(err)
			}
			m, err := control.Parse(&nats.Msg{Subject: raw.Subject, Header: raw.Header, Data: raw.Data})
			if err != nil {
				t.Fatal(err)
			}
			w := tt.want
			if m.Verb != w.Verb || m.Text != w.Text || m.CallID != w.CallID || m.Turn != w.Turn || m.As != w.As || (w.ID != "" && m.ID != w.ID) || m.Source != "/jetloop/cli" {
				t.Errorf("%s: stored %+v, want %+v", tt.name, m, w)
			}
		})
	}
	if code, out, errs := run(t, nil, append([]string{"steer", "demo/s1", "plain"}, srv...)...); code != 0 || !strings.Contains(out, "seq") {
		t.Errorf("steer without --json: exit %d, %q %q", code, out, errs)
	}

	for _, tt := range []struct {
		name string
		args []string
		says string
	}{
		{name: "approve without call id", args: []string{"approve", "demo/s1"}, says: "no call id"},
		{name: "fork without --at", args: []string{"fork", "demo/s1", "--as", "x"}, says: "--at TURN"},
		{name: "steer without text", args: []string{"steer", "demo/s1"}, says: "no text"},
		{name: "no session", args: []string{"cancel"}, says: "no session"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errs := run(t, nil, append(tt.args, srv...)...)
			if code != 2 || !strings.Contains(errs, tt.says) {
				t.Errorf("exit %d, stderr %q: want 2 saying %q", code, errs, tt.says)
			}
		})
	}
	for _, tt := range []struct {
		name string
		args []string
		exit int
		says string
	}{
		{name: "unknown agent", args: []string{"steer", "nosuchagent/x", "hello"}, exit: cli.ExitNotFound, says: `no agent "nosuchagent"`},
		{name: "unknown session", args: []string{"steer", "demo/nosuch", "hello"}, exit: cli.ExitNotFound, says: "no session demo/nosuch"},
		{name: "approve of a call not pending", args: []string{"approve", "demo/gated", "toolu_99"}, exit: cli.ExitConflict, says: "waits for approval of call toolu_01"},
		{name: "deny of a session waiting for nothing", args: []string{"deny", "demo/paused", "toolu_01"}, exit: cli.ExitConflict, says: "waits for no approval"},
		{name: "fork onto an existing session", args: []string{"fork", "demo/s1", "--at", "1", "--as", "gated"}, exit: cli.ExitConflict, says: "session demo/gated exists"},
		{name: "fork past the last turn", args: []string{"fork", "demo/s1", "--at", "9", "--as", "new"}, exit: cli.ExitFailure, says: "past the last turn, 3"},
		{name: "fork onto itself", args: []string{"fork", "demo/s1", "--at", "1", "--as", "s1"}, exit: cli.ExitConflict, says: "session demo/s1 exists"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before, err := ctlStream.Info(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			code, out, errs := run(t, nil, append(tt.args, srv...)...)
			if code != tt.exit || !strings.Contains(errs, tt.says) || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q: want %d saying %q", code, out, errs, tt.exit, tt.says)
			}
			after, err := ctlStream.Info(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if after.State.LastSeq != before.State.LastSeq {
				t.Errorf("a refused verb was stored: JL_CTL from %d to %d", before.State.LastSeq, after.State.LastSeq)
			}
		})
	}
	// No phantom session: a refused verb created none.
	if code, out, errs := run(t, nil, append([]string{"status", "--json"}, srv...)...); code != 0 || strings.Contains(out, "nosuch") {
		t.Errorf("status after refused verbs: exit %d, %s %s", code, out, errs)
	}

	t.Run("http", func(t *testing.T) {
		token, err := os.ReadFile(filepath.Join(data, "api-token"))
		if err != nil {
			t.Fatal(err)
		}
		post := func(path, body string) (int, map[string]any) {
			req, _ := http.NewRequest(http.MethodPost, httpURL+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var out map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&out)
			return resp.StatusCode, out
		}
		if code, out := post("/v1/agents/demo/sessions/s1/control", `{"verb":"steer","text":"from http"}`); code != http.StatusAccepted || out["verb"] != "steer" {
			t.Errorf("%d %v", code, out)
		}
		if code, out := post("/v1/agents/demo/sessions/nosuch/control", `{"verb":"cancel"}`); code != http.StatusNotFound {
			t.Errorf("cancel of an unknown session: %d %v", code, out)
		}
		if code, out := post("/v1/agents/demo/sessions/gated/control", `{"verb":"approve","call_id":"toolu_2"}`); code != http.StatusConflict || !strings.Contains(fmt.Sprint(out["message"]), "toolu_01") {
			t.Errorf("approve of a call not pending: %d %v", code, out)
		}
		resp2, err := http.Post(httpURL+"/chat/slack", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp2.Body.Close()
		if resp2.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("POST /chat/slack without a signing secret: %d, want 503", resp2.StatusCode)
		}
	})
}

func TestControlVerbWithoutAPI(t *testing.T) {
	s := natstest.RunServer(t)
	code, _, errs := run(t, nil, "cancel", "demo/s1", "--server", s.ClientURL())
	if code != 1 || !strings.Contains(errs, "no jetloop API answers on jl.api.cancel") {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
}

// TestDevAuth runs `jetloop dev --auth examples/auth.conf`: clients must
// log in, the admin may use the CLI, and the chat bot may publish its
// agents' control messages.
func TestDevAuth(t *testing.T) {
	t.Setenv("JETLOOP_ADMIN_PASSWORD", "admin-pw")
	t.Setenv("JETLOOP_CHATBOT_PASSWORD", "bot-pw")
	natsURL, _, _ := runDev(t, nil, "--auth", "../examples/auth.conf")
	if nc, err := nats.Connect(natsURL); err == nil {
		nc.Close()
		t.Fatal("a client without credentials was admitted")
	}
	admin := strings.Replace(natsURL, "nats://", "nats://admin:admin-pw@", 1)
	_, adminJS := natstest.Connect(t, admin)
	putState(t, adminJS, "main", record.StatusWorking, 1, "", "")
	if code, _, errs := run(t, nil, "steer", "demo/main", "hello", "--server", admin); code != 0 {
		t.Fatalf("admin steer: exit %d: %s", code, errs)
	}
	if code, _, errs := run(t, nil, "steer", "demo/main", "hello", "--server", natsURL); code != 1 || !strings.Contains(errs, "Authorization") {
		t.Errorf("steer without credentials: exit %d, stderr %q", code, errs)
	}
	bot, err := nats.Connect(natsURL, nats.UserInfo("chatbot", "bot-pw"), nats.CustomInboxPrefix("_INBOX_chatbot"))
	if err != nil {
		t.Fatal(err)
	}
	defer bot.Close()
	js, _ := jetstream.New(bot)
	ref, _ := streams.NewSessionRef("demo", "main")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := control.Publish(ctx, js, streams.Default(), ref, control.Message{Verb: control.Interrupt}); err != nil {
		t.Errorf("chatbot's interrupt: %v", err)
	}
}

// TestAgentsAndEventsThroughTheAPI runs the verbs that are clients of the
// API against `jetloop dev`, and against a server with no API.
func TestAgentsAndEventsThroughTheAPI(t *testing.T) {
	natsURL, _, _ := runDev(t, nil)
	code, out, errs := run(t, nil, "agents", "--json", "--server", natsURL)
	if code != 0 || !strings.Contains(out, `"name": "demo"`) || !strings.Contains(out, `"source": "examples/demo.yaml"`) ||
		!strings.Contains(out, `"description": "Runs one shell command in its work folder, then answers."`) {
		t.Errorf("agents: exit %d, %s %s", code, out, errs)
	}
	code, out, errs = run(t, nil, "events", "--json", "--server", natsURL)
	if code != 0 || !strings.HasPrefix(strings.TrimSpace(out), "[") {
		t.Errorf("events: exit %d, %s %s", code, out, errs)
	}
	// A JL_AUDIT message that holds no decision record is skipped, and
	// said so on stderr.
	_, js := natstest.Connect(t, natsURL)
	subject, err := streams.Default().Audit(admission.AuditKind, "demo")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, subject, []byte("not a record")); err != nil {
		t.Fatal(err)
	}
	code, out, errs = run(t, nil, "events", "--server", natsURL)
	if code != 0 || !strings.Contains(errs, "1 JL_AUDIT messages held lines of no decision record, skipped") || !strings.Contains(errs, `"not a record"`) {
		t.Errorf("events with a message of no record: exit %d, %s %s", code, out, errs)
	}
	s := natstest.RunServer(t)
	if code, _, errs := run(t, nil, "agents", "--server", s.ClientURL()); code != 1 || !strings.Contains(errs, "no jetloop API answers") {
		t.Errorf("agents without an API: exit %d, %s", code, errs)
	}
}

// TestSlackCommandOfAMissingSession posts a Slack `stop` for a session
// that does not exist yet to `jetloop dev`: it is answered with the reason
// and publishes nothing, so no session is created (a cancelled one would
// dead-letter every later event); once the session exists, `stop` is
// published.
func TestSlackCommandOfAMissingSession(t *testing.T) {
	channels := filepath.Join(t.TempDir(), "channels.yaml")
	if err := os.WriteFile(channels, []byte("channels:\n  C0LATER: demo/later\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	natsURL, httpURL, _ := runDev(t, map[string]string{"JETLOOP_SLACK_SIGNING_SECRET": "s3cret", "JETLOOP_SLACK_CHANNELS": channels})
	_, js := natstest.Connect(t, natsURL)
	stop := func(id string) map[string]any {
		t.Helper()
		body := fmt.Sprintf(`{"type":"event_callback","team_id":"T1","event_id":%q,"event":{"type":"app_mention","user":"U1","text":"<@B1> stop","channel":"C0LATER","ts":"1.0"}}`, id)
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		req, _ := http.NewRequest(http.MethodPost, httpURL+"/chat/slack", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(slack.HeaderTimestamp, ts)
		req.Header.Set(slack.HeaderSignature, slack.Sign([]byte("s3cret"), ts, []byte(body)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d, %v", resp.StatusCode, err)
		}
		return out
	}
	ctl, err := js.Stream(context.Background(), streams.Default().StreamCtl())
	if err != nil {
		t.Fatal(err)
	}
	out := stop("Ev1")
	if out["ok"] != false || !strings.Contains(fmt.Sprint(out["text"]), "no session demo/later") {
		t.Errorf("stop of a missing session answered %v", out)
	}
	if info, err := ctl.Info(context.Background()); err != nil || info.State.Msgs != 0 {
		t.Fatalf("JL_CTL after a refused stop: %+v, %v", info.State, err)
	}
	putState(t, js, "later", record.StatusWorking, 1, "", "")
	if out := stop("Ev2"); out["ok"] != true || out["verb"] != "cancel" {
		t.Errorf("stop of a working session answered %v", out)
	}
}

// TestApplyChecksAgainstTheRuntime: apply refuses a tool no worker runs,
// with the file, line and field, storing nothing; it stores a definition
// whose model key is not set where it runs, with a warning naming the
// variable.
func TestApplyChecksAgainstTheRuntime(t *testing.T) {
	natsURL, _, _ := runDev(t, nil)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: bad\nmodel: {provider: scripted, script: [{text: hi}]}\ntools: [shell, sh]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := run(t, nil, "apply", bad, "--server", natsURL)
	if code != 1 || !strings.Contains(errs, bad+":3:16: tools[1]: unknown tool \"sh\"") {
		t.Fatalf("apply of an unknown tool: exit %d, %s %s", code, out, errs)
	}
	if _, out, _ := run(t, nil, "agents", "--json", "--server", natsURL); strings.Contains(out, `"name": "bad"`) {
		t.Fatalf("a refused definition was stored: %s", out)
	}
	keyed := filepath.Join(dir, "keyed.yaml")
	if err := os.WriteFile(keyed, []byte("name: keyed\nmodel: {provider: anthropic, name: claude-sonnet-4-5, api_key_env: TEAM_ANTHROPIC_KEY}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs = run(t, nil, "apply", keyed, "--server", natsURL)
	if code != 0 || !strings.Contains(out, "keyed version") || !strings.Contains(errs, "warning: agent keyed: model provider anthropic reads its API key from TEAM_ANTHROPIC_KEY, which is not set here") {
		t.Fatalf("apply without the key: exit %d, %s %s", code, out, errs)
	}
	code, _, errs = run(t, map[string]string{"TEAM_ANTHROPIC_KEY": "k"}, "apply", keyed, "--server", natsURL)
	if code != 0 || strings.Contains(errs, "warning") {
		t.Fatalf("apply with the key: exit %d, %s", code, errs)
	}
}

// TestStatusPagesThroughAll lists 2,500 sessions with `jetloop status`,
// which the API serves a page (1,000) at a time from the status index:
// every session once, and the blocked ones with --status.
func TestStatusPagesThroughAll(t *testing.T) {
	natsURL, _, _ := runDev(t, nil)
	_, js := natstest.Connect(t, natsURL)
	names := streams.Default()
	const total = 2500
	var futures []jetstream.PubAckFuture
	for i := range total {
		ref, _ := streams.NewSessionRef("demo", fmt.Sprintf("s%04d", i))
		st := record.StatusDone
		if i%100 == 0 {
			st = record.StatusBlocked
		}
		b, _ := json.Marshal(record.Summary{Agent: ref.Agent, Session: ref.Session, Status: st, Since: time.Now().UTC()})
		key, _ := names.StatusKey(string(st), ref)
		f, err := js.PublishAsync(streams.KVSubject(names.BucketStatus(), key), b)
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatal(err)
		case <-time.After(30 * time.Second):
			t.Fatal("publish not acknowledged")
		}
	}
	count := func(args ...string) int {
		t.Helper()
		code, out, errs := run(t, nil, append([]string{"status", "--json", "--server", natsURL}, args...)...)
		var rows []map[string]any
		if err := json.Unmarshal([]byte(out), &rows); code != 0 || err != nil {
			t.Fatalf("status %v: exit %d, %v: %s", args, code, err, errs)
		}
		seen := map[string]bool{}
		for _, r := range rows {
			seen[fmt.Sprint(r["session"])] = true
		}
		if len(seen) != len(rows) {
			t.Errorf("status %v listed %d rows for %d sessions", args, len(rows), len(seen))
		}
		return len(rows)
	}
	if n := count(); n != total {
		t.Errorf("status listed %d of %d sessions", n, total)
	}
	if n := count("--status", "blocked"); n != total/100 {
		t.Errorf("status --status blocked listed %d, want %d", n, total/100)
	}
	if n := count("--limit", "1200"); n != 1200 {
		t.Errorf("status --limit 1200 listed %d", n)
	}
}

// TestSecretsNeverLogged runs `jetloop dev`, which generates its tokens
// and reads a Slack signing secret and a model key from the environment,
// sends a message and stops: no secret shows in what it logged; the
// generated ones are in their files under --data.
func TestSecretsNeverLogged(t *testing.T) {
	data := t.TempDir()
	vars := map[string]string{"JETLOOP_SLACK_SIGNING_SECRET": "slack-signing-s3cret-value", "OPENAI_API_KEY": "sk-test-never-logged", "JETLOOP_WORK_DIR": t.TempDir()}
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := newSyncBuffer(), newSyncBuffer()
	done := make(chan int, 1)
	go func() {
		done <- cli.MainEnv(ctx, env(stdout, stderr, vars), []string{"dev", "--data", data, "--nats-port", "0", "--http", "127.0.0.1:0", "--workers", "1"})
	}()
	stdout.waitFor(t, "jetloop ready", 2*time.Minute)
	natsURL := regexp.MustCompile(`nats=(\S+)`).FindStringSubmatch(stdout.String())[1]
	if code, _, errs := run(t, nil, "send", "--wait", "--timeout", "1m", "demo", "s1", "hello", "--server", natsURL); code != 0 {
		t.Fatalf("send: exit %d: %s", code, errs)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("dev did not stop")
	}
	logged := stderr.String() + stdout.String()
	secrets := []string{vars["JETLOOP_SLACK_SIGNING_SECRET"], vars["OPENAI_API_KEY"]}
	for _, f := range []string{"api-token", "ingest-token", "github-secret"} {
		b, err := os.ReadFile(filepath.Join(data, f))
		if err != nil {
			t.Fatalf("generated secret %s: %v", f, err)
		}
		secrets = append(secrets, strings.TrimSpace(string(b)))
		if !strings.Contains(logged, filepath.Join(data, f)) {
			t.Errorf("the log does not say where %s is", f)
		}
	}
	for _, s := range secrets {
		if strings.Contains(logged, s) {
			t.Errorf("a secret (%.6s…) was logged", s)
		}
	}
}

// TestWorkFoldersUnderTheDeployment runs the example agent, which appends
// to a ledger in its work folder, in two `jetloop dev` deployments: each
// session's folder is under its own --data, so the second deployment's
// fresh demo/s1 starts with an empty ledger.
func TestWorkFoldersUnderTheDeployment(t *testing.T) {
	for i := range 2 {
		natsURL, _, data := runDev(t, nil, "--workers", "1")
		if code, out, errs := run(t, nil, "send", "--wait", "--timeout", "1m", "demo", "s1", "hello", "--server", natsURL); code != 0 || !strings.Contains(out, "done") {
			t.Fatalf("deployment %d: send: exit %d: %s %s", i, code, out, errs)
		}
		b, err := os.ReadFile(filepath.Join(data, "work", "demo", "s1", "ledger.txt"))
		if err != nil {
			t.Fatalf("deployment %d: %v", i, err)
		}
		if n := strings.Count(string(b), "noted"); n != 1 {
			t.Fatalf("deployment %d: the ledger has %d lines, want this deployment's one: %q", i, n, b)
		}
	}
}
