package slack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/ingest/slack"
	"github.com/jetloop/jetloop/internal/logtest"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

// The published test vector of ../shared/fixtures/slack.
const (
	vectorSecret    = "e6b19c573432dcc6b075501d51b51bb8"
	vectorTimestamp = "1531431954"
	vectorSignature = "v0=adada4ed31709aef585c2580ca3267678c6a8eaeb7e0c1aca3ee57b656886b2c"
)

func fixture(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/app_mention.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSignatureVector(t *testing.T) {
	body := fixture(t)
	if got := slack.Sign([]byte(vectorSecret), vectorTimestamp, body); got != vectorSignature {
		t.Fatalf("Sign = %s, want %s", got, vectorSignature)
	}
	tests := []struct {
		name      string
		secret    string
		timestamp string
		body      []byte
		sig       string
		want      bool
	}{
		{name: "vector", secret: vectorSecret, timestamp: vectorTimestamp, body: body, sig: vectorSignature, want: true},
		{name: "other secret", secret: "x", timestamp: vectorTimestamp, body: body, sig: vectorSignature},
		{name: "other timestamp", secret: vectorSecret, timestamp: "1531431955", body: body, sig: vectorSignature},
		{name: "body with a trailing newline", secret: vectorSecret, timestamp: vectorTimestamp, body: append(bytes.Clone(body), '\n'), sig: vectorSignature},
		{name: "no version", secret: vectorSecret, timestamp: vectorTimestamp, body: body, sig: strings.TrimPrefix(vectorSignature, "v0=")},
		{name: "v1", secret: vectorSecret, timestamp: vectorTimestamp, body: body, sig: "v1=" + strings.TrimPrefix(vectorSignature, "v0=")},
		{name: "upper-case hex", secret: vectorSecret, timestamp: vectorTimestamp, body: body, sig: "v0=" + strings.ToUpper(strings.TrimPrefix(vectorSignature, "v0=")), want: true},
		{name: "truncated", secret: vectorSecret, timestamp: vectorTimestamp, body: body, sig: vectorSignature[:40]},
		{name: "empty", secret: vectorSecret, timestamp: vectorTimestamp, body: body},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := slack.Verify([]byte(tt.secret), tt.timestamp, tt.body, tt.sig); got != tt.want {
				t.Errorf("Verify = %v, want %v", got, tt.want)
			}
		})
	}
}

type harness struct {
	js    jetstream.JetStream
	names streams.Names
	srv   *httptest.Server
	now   time.Time
}

func start(t *testing.T, secret string, now time.Time) *harness {
	t.Helper()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := streams.Default()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	channels, err := slack.ParseChannels([]byte("channels:\n  TTTTTTTTT: demo/main\n  C0SECOND: pr-reviewer/octo/repo#12\n"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := slack.New(ctx, js, slack.Config{Names: names, SigningSecret: []byte(secret), Channels: channels, Now: func() time.Time { return now }, Log: logtest.ForTest(t)})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	r.Mount(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &harness{js: js, names: names, srv: srv, now: now}
}

func (h *harness) post(t *testing.T, ctype, ts, sig string, body []byte) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.srv.URL+"/chat/slack", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	if ts != "" {
		req.Header.Set(slack.HeaderTimestamp, ts)
	}
	if sig != "" {
		req.Header.Set(slack.HeaderSignature, sig)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// signed posts body signed with the secret at the harness's clock plus skew.
func (h *harness) signed(t *testing.T, ctype string, body []byte, skew time.Duration) (int, map[string]any) {
	t.Helper()
	ts := strconv.FormatInt(h.now.Add(skew).Unix(), 10)
	return h.post(t, ctype, ts, slack.Sign([]byte("s3cret"), ts, body), body)
}

func (h *harness) ctlCount(t *testing.T) uint64 {
	t.Helper()
	st, err := h.js.Stream(context.Background(), h.names.StreamCtl())
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().State.Msgs
}

// TestFixtureVectorAndReplay posts the fixture as Slack signed it: it is
// accepted (its text is no command) at a clock inside the window, refused
// when replayed, and refused outside the window.
func TestFixtureVectorAndReplay(t *testing.T) {
	body := fixture(t)
	ts, _ := strconv.ParseInt(vectorTimestamp, 10, 64)
	h := start(t, vectorSecret, time.Unix(ts, 0).Add(4*time.Minute))
	code, out := h.post(t, "application/json", vectorTimestamp, vectorSignature, body)
	if code != http.StatusOK || out["ok"] != false || !strings.Contains(out["text"].(string), "no command") {
		t.Fatalf("signed fixture: %d %v", code, out)
	}
	code, out = h.post(t, "application/json", vectorTimestamp, vectorSignature, body)
	if code != http.StatusUnauthorized || !strings.Contains(out["error"].(string), "replayed") {
		t.Fatalf("replay: %d %v", code, out)
	}

	late := start(t, vectorSecret, time.Unix(ts, 0).Add(5*time.Minute+time.Second))
	code, out = late.post(t, "application/json", vectorTimestamp, vectorSignature, body)
	if code != http.StatusUnauthorized || !strings.Contains(out["error"].(string), "from now") {
		t.Fatalf("outside the window: %d %v", code, out)
	}
	early := start(t, vectorSecret, time.Unix(ts, 0).Add(-5*time.Minute-time.Second))
	if code, out = early.post(t, "application/json", vectorTimestamp, vectorSignature, body); code != http.StatusUnauthorized {
		t.Fatalf("timestamp in the future: %d %v", code, out)
	}
}

func TestRefusals(t *testing.T) {
	body := fixture(t)
	ts, _ := strconv.ParseInt(vectorTimestamp, 10, 64)
	h := start(t, vectorSecret, time.Unix(ts, 0))
	tests := []struct {
		name, ts, sig string
		body          []byte
		want          int
		says          string
	}{
		{name: "no signature", ts: vectorTimestamp, body: body, want: 401, says: "missing"},
		{name: "no timestamp", sig: vectorSignature, body: body, want: 401, says: "missing"},
		{name: "tampered body", ts: vectorTimestamp, sig: vectorSignature, body: bytes.Replace(body, []byte("hello"), []byte("stop!"), 1), want: 401, says: "does not match"},
		{name: "moved timestamp", ts: "1531431955", sig: vectorSignature, body: body, want: 401, says: "does not match"},
		{name: "too large", ts: vectorTimestamp, sig: vectorSignature, body: bytes.Repeat([]byte(" "), slack.MaxBody+1), want: 413, says: "body over"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out := h.post(t, "application/json", tt.ts, tt.sig, tt.body)
			if code != tt.want || !strings.Contains(out["error"].(string), tt.says) {
				t.Errorf("%d %v, want %d saying %q", code, out, tt.want, tt.says)
			}
		})
	}
	// The signature was never accepted, so the genuine request still is.
	if code, out := h.post(t, "application/json", vectorTimestamp, vectorSignature, body); code != 200 {
		t.Errorf("genuine request after refusals: %d %v", code, out)
	}
	unconfigured := start(t, "", time.Unix(ts, 0))
	if code, _ := unconfigured.post(t, "application/json", vectorTimestamp, vectorSignature, body); code != http.StatusServiceUnavailable {
		t.Errorf("without a secret: %d, want 503", code)
	}
}

// event returns the fixture with its text, channel and event id replaced.
func event(t *testing.T, text, channel, id string) []byte {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(fixture(t), &v); err != nil {
		t.Fatal(err)
	}
	ev := v["event"].(map[string]any)
	ev["text"], ev["channel"] = text, channel
	v["event_id"] = id
	b, _ := json.Marshal(v)
	return b
}

func TestCommandsBecomeControlMessages(t *testing.T) {
	h := start(t, "s3cret", time.Now())
	cons, err := h.js.OrderedConsumer(context.Background(), h.names.StreamCtl(), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	next := func(t *testing.T) control.Message {
		t.Helper()
		jm, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		m, err := control.ParseJS(jm)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	tests := []struct {
		name, text, channel string
		want                control.Message
		session             string
	}{
		{name: "stop", text: "<@EEEEEEEEE> stop", want: control.Message{Verb: control.Cancel}},
		{name: "stop with reason", text: "<@EEEEEEEEE> STOP wrong repo", want: control.Message{Verb: control.Cancel, Text: "wrong repo"}},
		{name: "pause", text: "<@EEEEEEEEE> pause", want: control.Message{Verb: control.Interrupt}},
		{name: "resume", text: "<@EEEEEEEEE> resume", want: control.Message{Verb: control.Resume}},
		{name: "resume with text", text: "<@EEEEEEEEE> resume and skip the docs", want: control.Message{Verb: control.Resume, Text: "and skip the docs"}},
		{name: "steer", text: "<@EEEEEEEEE> steer focus on the tests &amp; the &lt;docs&gt;", want: control.Message{Verb: control.Steer, Text: "focus on the tests & the <docs>"}},
		{name: "steer multiline", text: "<@EEEEEEEEE> steer\nfirst this\nthen that", want: control.Message{Verb: control.Steer, Text: "first this\nthen that"}},
		{name: "approve", text: "<@EEEEEEEEE|jetloop> approve toolu_01", want: control.Message{Verb: control.Approve, CallID: "toolu_01"}},
		{name: "deny with reason", text: "deny toolu_02 not on main", want: control.Message{Verb: control.Deny, CallID: "toolu_02", Text: "not on main"}},
		{name: "second channel", text: "<@EEEEEEEEE> stop", channel: "C0SECOND", session: "octo/repo#12", want: control.Message{Verb: control.Cancel}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			channel := tt.channel
			if channel == "" {
				channel = "TTTTTTTTT"
			}
			id := "Ev" + strconv.Itoa(i)
			code, out := h.signed(t, "application/json", event(t, tt.text, channel, id), 0)
			if code != 200 || out["ok"] != true {
				t.Fatalf("%d %v", code, out)
			}
			m := next(t)
			if m.Verb != tt.want.Verb || m.Text != tt.want.Text || m.CallID != tt.want.CallID {
				t.Errorf("published %+v, want %+v", m, tt.want)
			}
			session := tt.session
			if session == "" {
				session = "main"
			}
			if m.Ref.Session != session || m.ID != id || m.Source != "/chat/slack/XXXXXXXXX" || uint64(out["seq"].(float64)) != m.Seq {
				t.Errorf("published %+v for answer %v", m, out)
			}
		})
	}
	before := h.ctlCount(t)
	t.Run("retry of a handled event", func(t *testing.T) {
		// Slack retries with the same event id and a fresh signature.
		code, out := h.signed(t, "application/json", event(t, "<@EEEEEEEEE> stop", "TTTTTTTTT", "Ev0"), time.Second)
		if code != 200 || out["ok"] != true {
			t.Fatalf("%d %v", code, out)
		}
	})
	for _, tt := range []struct{ name, text, channel, says string }{
		{name: "no command", text: "<@EEEEEEEEE> hello world", says: "no command"},
		{name: "approve without id", text: "<@EEEEEEEEE> approve", says: "approve needs call_id"},
		{name: "steer without text", text: "<@EEEEEEEEE> steer   ", says: "steer needs text"},
		{name: "unmapped channel", text: "<@EEEEEEEEE> stop", channel: "CUNKNOWN", says: "controls no session"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			channel := tt.channel
			if channel == "" {
				channel = "TTTTTTTTT"
			}
			code, out := h.signed(t, "application/json", event(t, tt.text, channel, "Ev-"+tt.name), 0)
			if code != 200 || out["ok"] != false || !strings.Contains(out["text"].(string), tt.says) {
				t.Errorf("%d %v, want 200 saying %q", code, out, tt.says)
			}
		})
	}
	t.Run("bot message", func(t *testing.T) {
		var v map[string]any
		_ = json.Unmarshal(event(t, "stop", "TTTTTTTTT", "Ev-bot"), &v)
		v["event"].(map[string]any)["bot_id"] = "B1"
		b, _ := json.Marshal(v)
		code, out := h.signed(t, "application/json", b, 0)
		if code != 200 || !strings.Contains(out["text"].(string), "ignored") {
			t.Errorf("%d %v", code, out)
		}
	})
	if after := h.ctlCount(t); after != before {
		t.Errorf("JL_CTL grew from %d to %d on a retry and on messages that are no command", before, after)
	}
	t.Run("slash command", func(t *testing.T) {
		form := url.Values{"team_id": {"T1"}, "channel_id": {"TTTTTTTTT"}, "user_id": {"U1"}, "command": {"/jetloop"},
			"text": {"steer look at CI first"}, "trigger_id": {"13345224609.738474920.8088930838d88f008e0"}}
		code, out := h.signed(t, "application/x-www-form-urlencoded", []byte(form.Encode()), 0)
		if code != 200 || out["response_type"] != "ephemeral" || !strings.Contains(out["text"].(string), "steer sent to demo/main") {
			t.Fatalf("%d %v", code, out)
		}
		m := next(t)
		if m.Verb != control.Steer || m.Text != "look at CI first" || m.Source != "/chat/slack/T1" {
			t.Errorf("published %+v", m)
		}
	})
	t.Run("url verification", func(t *testing.T) {
		code, out := h.signed(t, "application/json", []byte(`{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`), 0)
		if code != 200 || out["challenge"] != "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" {
			t.Errorf("%d %v", code, out)
		}
	})
}

// TestReplayRefusedAcrossReceivers shows the replay store is shared: a
// request accepted by one ingest process is refused by another on the same
// bucket.
func TestReplayRefusedAcrossReceivers(t *testing.T) {
	s := natstest.RunServer(t)
	ctx := context.Background()
	names := streams.Default()
	ts, _ := strconv.ParseInt(vectorTimestamp, 10, 64)
	var srvs []*httptest.Server
	for range 2 {
		_, js := natstest.Connect(t, s.ClientURL())
		if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
			t.Fatal(err)
		}
		r, err := slack.New(ctx, js, slack.Config{Names: names, SigningSecret: []byte(vectorSecret), Now: func() time.Time { return time.Unix(ts, 0) }})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		srvs = append(srvs, srv)
	}
	var codes []int
	for _, srv := range srvs {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(fixture(t)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(slack.HeaderTimestamp, vectorTimestamp)
		req.Header.Set(slack.HeaderSignature, vectorSignature)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	if codes[0] != 200 || codes[1] != 401 {
		t.Errorf("first receiver %d, second %d: want 200 then 401", codes[0], codes[1])
	}
}

func TestParseChannels(t *testing.T) {
	tests := []struct {
		name, file, want string
	}{
		{name: "yaml", file: "channels:\n  C01: demo/main\n"},
		{name: "json", file: `{"channels": {"C01": "pr-reviewer/octo/repo#12"}}`},
		{name: "unknown key", file: "channel:\n  C01: demo/main\n", want: "unknown field"},
		{name: "not an id", file: "channels:\n  general: demo/main\n", want: "not a Slack channel id"},
		{name: "no session", file: "channels:\n  C01: demo\n", want: "AGENT/SESSION"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := slack.ParseChannels([]byte(tt.file))
			if tt.want == "" {
				if err != nil || len(c) != 1 {
					t.Fatalf("%v, %v", c, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error saying %q", err, tt.want)
			}
		})
	}
	c, _ := slack.ParseChannels([]byte(`{"channels": {"C01": "pr-reviewer/octo/repo#12"}}`))
	if r := c["C01"]; r.Agent != "pr-reviewer" || r.Session != "octo/repo#12" {
		t.Errorf("C01 → %v", r)
	}
}

// A command that could not be published (JL_CTL unavailable) is answered
// 503, and the very same signed request, retried, is handled rather than
// refused as a replay of itself.
func TestIdenticalRetryAfterAFailureIsHandled(t *testing.T) {
	h := start(t, "s3cret", time.Now())
	ctx := context.Background()
	if err := h.js.DeleteStream(ctx, h.names.StreamCtl()); err != nil {
		t.Fatal(err)
	}
	body := event(t, "stop", "TTTTTTTTT", "Ev-retry")
	ts := strconv.FormatInt(h.now.Unix(), 10)
	sig := slack.Sign([]byte("s3cret"), ts, body)
	if status, out := h.post(t, "application/json", ts, sig, body); status != http.StatusServiceUnavailable {
		t.Fatalf("with JL_CTL gone: %d %v, want 503", status, out)
	}
	if _, err := streams.Provision(ctx, h.js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	if status, out := h.post(t, "application/json", ts, sig, body); status != http.StatusOK || out["ok"] != true {
		t.Fatalf("identical retry: %d %v, want 200 ok", status, out)
	}
	if n := h.ctlCount(t); n != 1 {
		t.Fatalf("%d control messages, want 1", n)
	}
	if status, _ := h.post(t, "application/json", ts, sig, body); status != http.StatusUnauthorized {
		t.Fatalf("replay of a handled request: %d, want 401", status)
	}
}

// A signed Events API body with anything after its JSON object is refused:
// what the signature covers is read as one value or not at all.
func TestTrailingDataRefused(t *testing.T) {
	h := start(t, "s3cret", time.Now())
	good := event(t, "<@EEEEEEEEE> stop", "C0123ABCD", "Ev-trailing")
	for _, tail := range []string{" x", "{}", `{"type":"event_callback"}`} {
		code, out := h.signed(t, "application/json", append(bytes.Clone(good), tail...), 0)
		if code != http.StatusBadRequest {
			t.Fatalf("body with %q after it: %d %v, want 400", tail, code, out)
		}
	}
	if n := h.ctlCount(t); n != 0 {
		t.Fatalf("%d control messages published for refused bodies", n)
	}
}
