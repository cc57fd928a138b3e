package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/internal/logtest"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/natsd"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
)

const (
	secret = "It's a Secret to Everybody"
	token  = "t0ken"
)

const reviewerYAML = `name: pr-reviewer
model: {provider: scripted, script: [{text: LGTM.}]}
triggers:
  - name: pr
    when: event.type in ["com.github.pull_request.opened", "com.github.pull_request.synchronize"] && !event.data.pull_request.draft
    session: event.data.repository.full_name + "#" + string(event.data.pull_request.number)
`

const demoYAML = `name: demo
model: {provider: scripted, script: [{text: hi}]}
triggers:
  - name: request
    when: event.type == "dev.jetloop.request"
    session: event.subject
`

type harness struct {
	url   string // HTTP
	nats  string
	js    jetstream.JetStream
	names streams.Names
	srv   *natsd.Server
	adm   *admission.Admitter
	store *dedupe.Store
	ing   *ingest.Server
}

func start(t testing.TB, window time.Duration, natsOpts ...natstest.Option) *harness {
	t.Helper()
	return startWith(t, window, []string{reviewerYAML, demoYAML}, natsOpts...)
}

// startWith is start with the definitions defs.
func startWith(t testing.TB, window time.Duration, defs []string, natsOpts ...natstest.Option) *harness {
	t.Helper()
	return startTimeout(t, window, defs, 3*time.Second, natsOpts...)
}

// startTimeout is startWith with the ingest's request timeout.
func startTimeout(t testing.TB, window time.Duration, defs []string, timeout time.Duration, natsOpts ...natstest.Option) *harness {
	t.Helper()
	s := natstest.RunServer(t, natsOpts...)
	_, js := natstest.Connect(t, s.ClientURL())
	ctx := context.Background()
	names := streams.Default()
	if _, err := streams.Provision(ctx, js, streams.Options{DedupeWindow: window}); err != nil {
		t.Fatal(err)
	}
	h := serve(t, js, names, defs, timeout)
	h.nats, h.srv = s.ClientURL(), s
	return h
}

// serve builds admission, the dedupe store and the ingest with the
// definitions defs on js, and serves the ingest over HTTP on loopback:
// the harness without its server.
func serve(t testing.TB, js jetstream.JetStream, names streams.Names, defs []string, timeout time.Duration) *harness {
	t.Helper()
	ctx := context.Background()
	rules := admission.NewRules()
	for _, y := range defs {
		c, err := policies.Parse("def.yaml", []byte(y))
		if err != nil {
			t.Fatal(err)
		}
		rules.Set(c)
	}
	adm, err := admission.New(ctx, js, rules, admission.Config{Names: names})
	if err != nil {
		t.Fatal(err)
	}
	store, err := dedupe.New(ctx, js, dedupe.Config{Names: names})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ingest.New(ingest.Config{Names: names, GitHubSecret: []byte(secret), Token: token, Timeout: timeout, Log: logtest.ForTest(t)}, js, store, adm)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	srv.Mount(mux)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return &harness{url: hs.URL, js: js, names: names, adm: adm, store: store, ing: srv}
}

func fixture(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/github/" + path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type reply struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func post(t *testing.T, url string, header map[string]string, body []byte) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func githubHeaders(event, delivery string, body []byte) map[string]string {
	return map[string]string{
		ingest.HeaderGitHubEvent:     event,
		ingest.HeaderGitHubDelivery:  delivery,
		ingest.HeaderGitHubSignature: ingest.Sign([]byte(secret), body),
		"Content-Type":               "application/json",
	}
}

// inCount is the number of messages on one jl.in subject, or on all of
// them for "".
func (h *harness) inCount(t *testing.T, subject string) uint64 {
	t.Helper()
	s, err := h.js.Stream(context.Background(), h.names.StreamIn())
	if err != nil {
		t.Fatal(err)
	}
	if subject == "" {
		info, err := s.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subject]
}

func (h *harness) subject(t *testing.T, agent, session string) string {
	ref, err := streams.NewSessionRef(agent, session)
	if err != nil {
		t.Fatal(err)
	}
	return h.names.In(ref)
}

func TestGitHubSignatureVector(t *testing.T) {
	const want = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	if got := ingest.Sign([]byte("It's a Secret to Everybody"), []byte("Hello, World!")); got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
	tests := []struct {
		name string
		sig  string
		ok   bool
	}{
		{name: "published", sig: want, ok: true},
		{name: "upper-case hex", sig: strings.ToUpper(want[:7]) + want[7:], ok: false},
		{name: "no prefix", sig: want[7:], ok: false},
		{name: "one digit off", sig: want[:len(want)-1] + "8", ok: false},
		{name: "short", sig: want[:20], ok: false},
		{name: "not hex", sig: "sha256=zz", ok: false},
		{name: "empty", sig: "", ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ingest.VerifySignature([]byte("It's a Secret to Everybody"), []byte("Hello, World!"), tt.sig); got != tt.ok {
				t.Fatalf("verify %q = %v", tt.sig, got)
			}
		})
	}
}

// The acceptance path: a signed real pull_request opened delivery gets
// 202 and one message on the reviewer's session subject; the same
// delivery again gets 202 duplicate and stores nothing, also after the
// stream's duplicate window has passed.
func TestGitHubDeliveryOnceAcrossTheWindow(t *testing.T) {
	const window = time.Second
	h := start(t, window)
	body := fixture(t, "pull_request/opened.payload.json")
	const delivery = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
	r := post(t, h.url+"/webhooks/github", githubHeaders("pull_request", delivery, body), body)
	if r.status != http.StatusAccepted || r.body["duplicate"] != false || r.body["id"] != delivery {
		t.Fatalf("first delivery: %d %s", r.status, r.raw)
	}
	adm, _ := r.body["admitted"].([]any)
	if len(adm) != 1 || adm[0].(map[string]any)["session"] != "Codertocat/Hello-World#2" {
		t.Fatalf("admitted %v", r.body["admitted"])
	}
	subject := h.subject(t, "pr-reviewer", "Codertocat/Hello-World#2")
	if n := h.inCount(t, subject); n != 1 {
		t.Fatalf("%d messages on %s, want 1", n, subject)
	}
	checkMessage(t, h, subject, delivery, body)

	again := post(t, h.url+"/webhooks/github", githubHeaders("pull_request", delivery, body), body)
	if again.status != http.StatusAccepted || again.body["duplicate"] != true {
		t.Fatalf("redelivery: %d %s", again.status, again.raw)
	}

	// Wait until the stream's window has passed: a probe message id is
	// accepted again once its first publish has left the window.
	probe := nats.NewMsg(h.subject(t, "probe", "window"))
	probe.Header.Set(nats.MsgIdHdr, "probe")
	if _, err := h.js.PublishMsg(context.Background(), probe); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*window, func() error {
		ack, err := h.js.PublishMsg(context.Background(), probe)
		if err != nil || ack.Duplicate {
			return errorf("window not passed yet")
		}
		return nil
	})
	late := post(t, h.url+"/webhooks/github", githubHeaders("pull_request", delivery, body), body)
	if late.status != http.StatusAccepted || late.body["duplicate"] != true {
		t.Fatalf("redelivery after the window: %d %s", late.status, late.raw)
	}
	if n := h.inCount(t, subject); n != 1 {
		t.Fatalf("%d messages on %s after redeliveries, want 1", n, subject)
	}
}

type errorf string

func (e errorf) Error() string { return string(e) }

func checkMessage(t *testing.T, h *harness, subject, id string, body []byte) {
	t.Helper()
	s, _ := h.js.Stream(context.Background(), h.names.StreamIn())
	raw, err := s.GetLastMsgForSubject(context.Background(), subject)
	if err != nil {
		t.Fatal(err)
	}
	e, err := events.FromMsg(&nats.Msg{Subject: raw.Subject, Header: raw.Header, Data: raw.Data})
	if err != nil {
		t.Fatal(err)
	}
	if e.ID() != id || e.Type() != "com.github.pull_request.opened" || e.Source() != "https://github.com/Codertocat/Hello-World" ||
		e.Subject() != "pull/2" || !bytes.Equal(e.Data(), body) || e.Extensions()[admission.ExtTrigger] != "pr" {
		t.Fatalf("stored event %s", e)
	}
	// The id the stream's duplicate window drops a repeat by: the event's
	// and its session's.
	if got, want := raw.Header.Get(nats.MsgIdHdr), dedupe.MsgID(e, subject); got != want {
		t.Fatalf("stored event's %s = %q, want %q", nats.MsgIdHdr, got, want)
	}
}

func TestGitHubRefusals(t *testing.T) {
	h := start(t, time.Minute)
	body := fixture(t, "pull_request/opened.payload.json")
	bad := []byte(`{"action": "opened", "pull_request": `)
	// A repository name that makes no source URI: the sender's mistake,
	// answered 400 every time, not a publish that fails on every retry.
	noURI := bytes.ReplaceAll(body, []byte(`"Codertocat/Hello-World"`), []byte(`"%zz/Hello-World"`))
	tests := []struct {
		name   string
		header map[string]string
		body   []byte
		status int
	}{
		{name: "bad signature", header: map[string]string{ingest.HeaderGitHubEvent: "pull_request", ingest.HeaderGitHubDelivery: "d1", ingest.HeaderGitHubSignature: ingest.Sign([]byte("other"), body)}, body: body, status: 401},
		{name: "missing signature", header: map[string]string{ingest.HeaderGitHubEvent: "pull_request", ingest.HeaderGitHubDelivery: "d1"}, body: body, status: 401},
		{name: "signature of other bytes", header: githubHeaders("pull_request", "d1", append([]byte(" "), body...)), body: body, status: 401},
		{name: "missing delivery", header: githubHeaders("pull_request", "", body), body: body, status: 400},
		{name: "missing event", header: githubHeaders("", "d1", body), body: body, status: 400},
		{name: "broken JSON", header: githubHeaders("pull_request", "d1", bad), body: bad, status: 400},
		{name: "JSON array", header: githubHeaders("pull_request", "d1", []byte(`[1]`)), body: []byte(`[1]`), status: 400},
		{name: "repository name no URI", header: githubHeaders("pull_request", "d1", noURI), body: noURI, status: 400},
		{name: "ping", header: githubHeaders("ping", "d2", fixture(t, "ping/payload.json")), body: fixture(t, "ping/payload.json"), status: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := post(t, h.url+"/webhooks/github", tt.header, tt.body)
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.raw)
			}
			if tt.name == "repository name no URI" && !strings.Contains(r.raw, `%zz/Hello-World`) {
				t.Fatalf("the answer does not name the source it could not make: %s", r.raw)
			}
		})
	}
	big := bytes.Repeat([]byte(" "), ingest.MaxGitHubBody+1)
	if r := post(t, h.url+"/webhooks/github", githubHeaders("push", "d3", big), big); r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized body: %d %s", r.status, r.raw)
	}
	if n := h.inCount(t, ""); n != 0 {
		t.Fatalf("%d messages stored for refused deliveries", n)
	}
	for _, id := range []string{"d1", "d2", "d3"} {
		if _, seen, _ := h.store.Seen(context.Background(), "https://github.com/Codertocat/Hello-World", id); seen {
			t.Fatalf("delivery %s recorded as handled", id)
		}
	}
}

// A delivery whose publish went through but whose dedupe record was never
// written (a crash between the two) is handled again on retry, and the
// stream's Nats-Msg-Id window keeps the session from getting it twice.
func TestCrashBetweenPublishAndRecordLosesNothingAndDuplicatesNothing(t *testing.T) {
	h := start(t, time.Minute)
	body := fixture(t, "pull_request/synchronize.payload.json")
	hdr := http.Header{}
	for k, v := range githubHeaders("pull_request", "crash-1", body) {
		hdr.Set(k, v)
	}
	// The pipeline without its dedupe step is what ran before the crash.
	e := mustGitHubEvent(t, h, hdr, body)
	partial := ingest.Chain(ingest.Publish(h.js, h.adm, h.names, ingest.NewMetrics()), ingest.Admit(h.adm))
	if _, err := partial(context.Background(), &ingest.Delivery{Event: e, Receiver: "github"}); err != nil {
		t.Fatal(err)
	}
	subject := h.subject(t, "pr-reviewer", "Codertocat/Hello-World#2")
	if n := h.inCount(t, subject); n != 1 {
		t.Fatalf("%d messages before the retry", n)
	}
	r := post(t, h.url+"/webhooks/github", githubHeaders("pull_request", "crash-1", body), body)
	if r.status != http.StatusAccepted {
		t.Fatalf("retry: %d %s", r.status, r.raw)
	}
	if n := h.inCount(t, subject); n != 1 {
		t.Fatalf("%d messages after the retry, want 1", n)
	}
	if _, seen, _ := h.store.Seen(context.Background(), e.Source(), e.ID()); !seen {
		t.Fatal("retry did not record the delivery")
	}
}

func mustGitHubEvent(t *testing.T, h *harness, hdr http.Header, body []byte) event.Event {
	t.Helper()
	e := event.New()
	e.SetID(hdr.Get(ingest.HeaderGitHubDelivery))
	e.SetType(events.GitHubType(hdr.Get(ingest.HeaderGitHubEvent), "synchronize"))
	e.SetSource("https://github.com/Codertocat/Hello-World")
	e.SetSubject("pull/2")
	if err := e.SetData("application/json", body); err != nil {
		t.Fatal(err)
	}
	return e
}

// NATS down: 503 with Retry-After, never 2xx.
func TestNATSDownAnswers503(t *testing.T) {
	h := start(t, time.Minute)
	ctx := context.Background()
	if err := h.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	body := fixture(t, "pull_request/opened.payload.json")
	r := post(t, h.url+"/webhooks/github", githubHeaders("pull_request", "down-1", body), body)
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("with NATS down: %d (Retry-After %q) %s", r.status, r.header.Get("Retry-After"), r.raw)
	}
}

func TestCloudEventsOverHTTP(t *testing.T) {
	h := start(t, time.Minute)
	body := fixture(t, "pull_request/opened.payload.json")
	e := event.New()
	e.SetID("ce-1")
	e.SetSource("https://github.com/Codertocat/Hello-World")
	e.SetType("com.github.pull_request.opened")
	if err := e.SetData("application/json", body); err != nil {
		t.Fatal(err)
	}
	// Binary mode, as sdk-go's HTTP protocol writes it.
	req, err := cehttp.NewHTTPRequestFromEvent(context.Background(), h.url+"/events", e)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("binary mode: %d", resp.StatusCode)
	}
	// Structured mode.
	e2 := e.Clone()
	e2.SetID("ce-2")
	structured, _ := json.Marshal(e2)
	r := post(t, h.url+"/events", map[string]string{"Content-Type": "application/cloudevents+json", "Authorization": "Bearer " + token}, structured)
	if r.status != http.StatusAccepted || len(r.body["admitted"].([]any)) != 1 {
		t.Fatalf("structured mode: %d %s", r.status, r.raw)
	}
	if n := h.inCount(t, h.subject(t, "pr-reviewer", "Codertocat/Hello-World#2")); n != 2 {
		t.Fatalf("%d messages, want 2", n)
	}
	refusals := []struct {
		name   string
		header map[string]string
		body   []byte
		status int
	}{
		{name: "no token", header: map[string]string{"Content-Type": "application/cloudevents+json"}, body: structured, status: 401},
		{name: "wrong token", header: map[string]string{"Content-Type": "application/cloudevents+json", "Authorization": "Bearer x"}, body: structured, status: 401},
		{name: "not an event", header: map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + token}, body: []byte(`{}`), status: 400},
		{name: "missing id", header: map[string]string{"Content-Type": "application/cloudevents+json", "Authorization": "Bearer " + token}, body: []byte(`{"specversion":"1.0","source":"s","type":"t"}`), status: 400},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			if r := post(t, h.url+"/events", tt.header, tt.body); r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.raw)
			}
		})
	}
}

func TestUserRequests(t *testing.T) {
	h := start(t, time.Minute)
	auth := map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json", "Idempotency-Key": "req-1"}
	url := h.url + "/v1/agents/demo/sessions/s1/messages"
	r := post(t, url, auth, []byte(`{"text": "hello"}`))
	if r.status != http.StatusAccepted || r.body["id"] != "req-1" || len(r.body["admitted"].([]any)) != 1 {
		t.Fatalf("request: %d %s", r.status, r.raw)
	}
	if r := post(t, url, auth, []byte(`{"text": "hello"}`)); r.status != http.StatusAccepted || r.body["duplicate"] != true {
		t.Fatalf("same Idempotency-Key: %d %s", r.status, r.raw)
	}
	if n := h.inCount(t, h.subject(t, "demo", "s1")); n != 1 {
		t.Fatalf("%d messages, want 1", n)
	}
	tests := []struct {
		name   string
		url    string
		body   string
		status int
	}{
		{name: "unknown agent", url: h.url + "/v1/agents/nobody/sessions/s1/messages", body: `{"text": "x"}`, status: 404},
		{name: "empty text", url: url, body: `{"text": ""}`, status: 400},
		{name: "not JSON", url: url, body: `hello`, status: 400},
		{name: "unknown field", url: url, body: `{"text": "x", "extra": 1}`, status: 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := map[string]string{"Authorization": "Bearer " + token}
			if r := post(t, tt.url, hdr, []byte(tt.body)); r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.raw)
			}
		})
	}
}

// TestGitHubRulesReadTheirPaths posts webhooks whose body the receiver
// decodes only as far as the rules read it: a draft is refused by the
// reviewer's condition (pull_request.draft), and a second agent's session
// is named by a field no other rule reads (sender.login).
func TestGitHubRulesReadTheirPaths(t *testing.T) {
	const senderYAML = `name: by-sender
model: {provider: scripted, script: [{text: hi}]}
triggers:
  - name: any-pr
    when: event.type.startsWith("com.github.pull_request.")
    session: event.data.sender.login + "/" + string(event.data.sender.id)
`
	h := startWith(t, time.Minute, []string{reviewerYAML, senderYAML})
	body := fixture(t, "pull_request/opened.payload.json")
	sessions := func(r reply) []string {
		t.Helper()
		if r.status != http.StatusAccepted {
			t.Fatalf("status %d: %s", r.status, r.raw)
		}
		var out []string
		for _, a := range r.body["admitted"].([]any) {
			m := a.(map[string]any)
			out = append(out, m["agent"].(string)+":"+m["session"].(string))
		}
		slices.Sort(out)
		return out
	}
	got := sessions(post(t, h.url+"/webhooks/github", githubHeaders("pull_request", "d-1", body), body))
	if want := []string{"by-sender:Codertocat/21031067", "pr-reviewer:Codertocat/Hello-World#2"}; !slices.Equal(got, want) {
		t.Fatalf("ready pull request admitted to %v, want %v", got, want)
	}
	draft := bytes.Replace(body, []byte(`"draft": false`), []byte(`"draft": true`), 1)
	if bytes.Equal(draft, body) {
		t.Fatal("the fixture has no draft field")
	}
	got = sessions(post(t, h.url+"/webhooks/github", githubHeaders("pull_request", "d-2", draft), draft))
	if want := []string{"by-sender:Codertocat/21031067"}; !slices.Equal(got, want) {
		t.Fatalf("draft admitted to %v, want %v", got, want)
	}
}
