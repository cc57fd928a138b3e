package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/cli"
	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/internal/natstest"
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

// TestControlVerbs runs every control verb against `jetloop dev --workers
// 0`: each is stored in JL_CTL, in order, while no worker runs.
func TestControlVerbs(t *testing.T) {
	natsURL, httpURL, data := runDev(t, nil)
	srv := []string{"--server", natsURL}
	tests := []struct {
		name string
		args []string
		want control.Message
	}{
		{name: "steer", args: []string{"steer", "demo/s1", "focus", "on", "the", "tests"}, want: control.Message{Verb: control.Steer, Text: "focus on the tests"}},
		{name: "interrupt", args: []string{"interrupt", "demo/s1"}, want: control.Message{Verb: control.Interrupt}},
		{name: "resume with flags after", args: []string{"resume", "demo/s1", "go on", "--id", "r-1"}, want: control.Message{Verb: control.Resume, Text: "go on", ID: "r-1"}},
		{name: "approve", args: []string{"approve", "demo/s1", "toolu_01"}, want: control.Message{Verb: control.Approve, CallID: "toolu_01"}},
		{name: "deny", args: []string{"deny", "demo/s1", "toolu_02", "not", "now"}, want: control.Message{Verb: control.Deny, CallID: "toolu_02", Text: "not now"}},
		{name: "fork", args: []string{"fork", "demo/s1", "--at", "2", "--as", "s1-retry"}, want: control.Message{Verb: control.Fork, Turn: 2, As: "s1-retry"}},
		{name: "cancel", args: []string{"cancel", "demo/s1", "--json"}, want: control.Message{Verb: control.Cancel}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := run(t, nil, append(tt.args, srv...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if !strings.Contains(out, "seq") {
				t.Errorf("output %q names no sequence", out)
			}
		})
	}
	_, js := natstest.Connect(t, natsURL)
	names := streams.Default()
	ref, _ := streams.NewSessionRef("demo", "s1")
	cons, err := js.OrderedConsumer(context.Background(), names.StreamCtl(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{names.Ctl(ref)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		jm, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		m, err := control.ParseJS(jm)
		if err != nil {
			t.Fatal(err)
		}
		w := tt.want
		if m.Verb != w.Verb || m.Text != w.Text || m.CallID != w.CallID || m.Turn != w.Turn || m.As != w.As || (w.ID != "" && m.ID != w.ID) || m.Source != "/jetloop/cli" {
			t.Errorf("%s: stored %+v, want %+v", tt.name, m, w)
		}
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
	t.Run("refused by the API", func(t *testing.T) {
		code, _, errs := run(t, nil, append([]string{"fork", "demo/s1", "--at", "1", "--as", "s1"}, srv...)...)
		if code != 1 || !strings.Contains(errs, "session being forked") {
			t.Errorf("exit %d, stderr %q", code, errs)
		}
	})

	t.Run("http", func(t *testing.T) {
		token, err := os.ReadFile(filepath.Join(data, "api-token"))
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, httpURL+"/v1/agents/demo/sessions/s1/control", strings.NewReader(`{"verb":"steer","text":"from http"}`))
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		if resp.StatusCode != http.StatusAccepted || out["verb"] != "steer" {
			t.Errorf("%d %v", resp.StatusCode, out)
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
	if code != 0 || !strings.Contains(out, `"name": "demo"`) || !strings.Contains(out, `"source": "examples/demo.yaml"`) {
		t.Errorf("agents: exit %d, %s %s", code, out, errs)
	}
	code, out, errs = run(t, nil, "events", "--json", "--server", natsURL)
	if code != 0 || !strings.HasPrefix(strings.TrimSpace(out), "[") {
		t.Errorf("events: exit %d, %s %s", code, out, errs)
	}
	s := natstest.RunServer(t)
	if code, _, errs := run(t, nil, "agents", "--server", s.ClientURL()); code != 1 || !strings.Contains(errs, "no jetloop API answers") {
		t.Errorf("agents without an API: exit %d, %s", code, errs)
	}
}
