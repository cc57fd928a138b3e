package ingest_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/internal/logtest"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
)

// startDefs is start with the given definitions; wrap, when not nil,
// wraps the JetStream the pipeline publishes through (to make publishes
// fail), while h.js stays the real one.
func startDefs(t *testing.T, wrap func(jetstream.JetStream) jetstream.JetStream, yamls ...string) *harness {
	t.Helper()
	return startConfig(t, wrap, nil, yamls...)
}

// startConfig is startDefs with the ingest config adjusted by cfg.
func startConfig(t *testing.T, wrap func(jetstream.JetStream) jetstream.JetStream, cfg func(*ingest.Config), yamls ...string) *harness {
	t.Helper()
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s.ClientURL())
	ctx := context.Background()
	names := streams.Default()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	pjs := js
	if wrap != nil {
		pjs = wrap(js)
	}
	rules := admission.NewRules()
	for _, y := range yamls {
		c, err := policies.Parse(t.Name()+".yaml", []byte(y))
		if err != nil {
			t.Fatal(err)
		}
		rules.Set(c)
	}
	adm, err := admission.New(ctx, pjs, rules, admission.Config{Names: names})
	if err != nil {
		t.Fatal(err)
	}
	store, err := dedupe.New(ctx, js, dedupe.Config{Names: names})
	if err != nil {
		t.Fatal(err)
	}
	// As the ingest component sets it: what the server's max payload
	// leaves once headers have room.
	c := ingest.Config{Names: names, GitHubSecret: []byte(secret), Token: token, Timeout: 5 * time.Second, Log: logtest.ForTest(t),
		MaxEventSize: int(nc.MaxPayload()) - 64<<10}
	if cfg != nil {
		cfg(&c)
	}
	srv, err := ingest.New(c, pjs, store, adm)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	srv.Mount(mux)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return &harness{url: hs.URL, nats: s.ClientURL(), js: js, names: names, srv: s, adm: adm, store: store}
}

// lastEvent is the newest event on subject of stream.
func (h *harness) lastEvent(t *testing.T, stream, subject string) (nats.Header, *nats.Msg) {
	t.Helper()
	s, err := h.js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := s.GetLastMsgForSubject(context.Background(), subject)
	if err != nil {
		t.Fatalf("nothing on %s: %v", subject, err)
	}
	return raw.Header, &nats.Msg{Subject: raw.Subject, Header: raw.Header, Data: raw.Data}
}

const promptedYAML = `name: pr-reviewer
model: {provider: scripted}
triggers:
  - name: pr
    when: event.type == "com.github.pull_request.opened"
    session: event.data.repository.full_name + "#" + string(event.data.pull_request.number)
    prompt: |
      Review this pull request.
      Title: {{ event.data.pull_request.title }}
`

// A prompt written as a YAML block has newlines, which no CloudEvents
// string attribute may hold: it travels encoded and reads back whole.
func TestMultilinePromptReachesTheSession(t *testing.T) {
	h := startDefs(t, nil, promptedYAML)
	body := fixture(t, "pull_request/opened.payload.json")
	r := post(t, h.url+"/webhooks/github", githubHeaders("pull_request", "prompt-1", body), body)
	if r.status != http.StatusAccepted || len(r.body["admitted"].([]any)) != 1 {
		t.Fatalf("delivery: %d %s", r.status, r.raw)
	}
	_, m := h.lastEvent(t, h.names.StreamIn(), h.subject(t, "pr-reviewer", "Codertocat/Hello-World#2"))
	e, err := events.FromMsg(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := admission.Prompt(e)
	if err != nil {
		t.Fatal(err)
	}
	if want := "Review this pull request.\nTitle: Update the README with new information.\n"; got != want {
		t.Fatalf("prompt %q, want %q", got, want)
	}
}

const newlineSessionYAML = `name: broken-session
model: {provider: scripted}
triggers:
  - name: t
    when: event.type == "com.github.pull_request.opened"
    session: event.data.pull_request.title + "\n"
`

// A rule whose session cannot be published (a control character) fails
// alone: the delivery is accepted, the other agent gets the event, and the
// failing rule's copy goes to the dead letter stream with the reason.
func TestUnpublishableSessionFailsOnlyItsRule(t *testing.T) {
	h := startDefs(t, nil, reviewerYAML, newlineSessionYAML)
	body := fixture(t, "pull_request/opened.payload.json")
	r := post(t, h.url+"/webhooks/github", githubHeaders("pull_request", "ctl-1", body), body)
	if r.status != http.StatusAccepted {
		t.Fatalf("delivery: %d %s", r.status, r.raw)
	}
	adm, _ := r.body["admitted"].([]any)
	if len(adm) != 1 || adm[0].(map[string]any)["agent"] != "pr-reviewer" {
		t.Fatalf("admitted %v, want pr-reviewer only", r.body["admitted"])
	}
	if n := h.inCount(t, h.subject(t, "pr-reviewer", "Codertocat/Hello-World#2")); n != 1 {
		t.Fatalf("%d messages for pr-reviewer, want 1", n)
	}
	dlq, err := h.names.DLQ(string(admission.DLQReason))
	if err != nil {
		t.Fatal(err)
	}
	hdr, _ := h.lastEvent(t, h.names.StreamDLQ(), dlq)
	if hdr.Get(admission.HeaderRule) != "broken-session/t" || !strings.Contains(hdr.Get(admission.HeaderError), "cannot be published") {
		t.Fatalf("dead letter headers %v", hdr)
	}
}

// failingJS fails the next n async publishes (on subject only, when it
// is set), as a NATS connection that drops in the middle of a delivery
// would.
type failingJS struct {
	jetstream.JetStream
	subject string
	n       atomic.Int32
}

func (f *failingJS) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	if (f.subject == "" || m.Subject == f.subject) && f.n.Add(-1) >= 0 {
		return nil, errors.New("injected: connection lost")
	}
	return f.JetStream.PublishMsgAsync(m, opts...)
}

const limitedYAML = `name: pr-reviewer
model: {provider: scripted}
triggers:
  - name: pr
    when: event.type.startsWith("com.github.pull_request.")
    session: event.data.repository.full_name + "#" + string(event.data.pull_request.number)
    rate: {key: event.data.repository.full_name, per_minute: 1}
`

// A delivery whose publish failed took the rate limit's only token; its
// retry is admitted and published rather than refused by that same token,
// answered 202 and recorded as handled with nothing published.
func TestRetryAfterFailedPublishKeepsItsRateToken(t *testing.T) {
	fj := &failingJS{}
	h := startDefs(t, func(js jetstream.JetStream) jetstream.JetStream { fj.JetStream = js; return fj }, limitedYAML)
	fj.n.Store(1)
	body := fixture(t, "pull_request/opened.payload.json")
	subject := h.subject(t, "pr-reviewer", "Codertocat/Hello-World#2")
	if r := post(t, h.url+"/webhooks/github", githubHeaders("pull_request", "rl-1", body), body); r.status != http.StatusServiceUnavailable {
		t.Fatalf("delivery with a failing publish: %d %s, want 503", r.status, r.raw)
	}
	r := post(t, h.url+"/webhooks/github", githubHeaders("pull_request", "rl-1", body), body)
	if r.status != http.StatusAccepted || len(r.body["admitted"].([]any)) != 1 {
		t.Fatalf("retry: %d %s, want 202 admitted to pr-reviewer", r.status, r.raw)
	}
	if n := h.inCount(t, subject); n != 1 {
		t.Fatalf("%d messages on %s after the retry, want 1", n, subject)
	}
	// The token is spent: another event is limited.
	r = post(t, h.url+"/webhooks/github", githubHeaders("pull_request", "rl-2", body), body)
	if r.status != http.StatusAccepted || len(r.body["admitted"].([]any)) != 0 {
		t.Fatalf("another event: %d %s, want 202 admitted to none", r.status, r.raw)
	}
}

const watcherYAML = `name: watcher
model: {provider: scripted}
triggers:
  - name: pr
    when: event.type == "com.github.pull_request.opened"
    session: "'all'"
`

const debouncedYAML = `name: digest
model: {provider: scripted}
triggers:
  - name: pr
    when: event.type == "com.github.pull_request.opened"
    session: "'all'"
    debounce: {window: 1s}
`

// A failure in the middle of the pipeline: the event was published to
// one agent's session and added to another's burst, then the publish to a
// third failed (503). The retry completes the delivery, and each session
// gets the event once: the publish that went through is dropped by its
// Nats-Msg-Id, the burst does not count it twice and fires once.
func TestRetryAfterPartialPublishDeliversOnceToEach(t *testing.T) {
	fj := &failingJS{}
	h := startDefs(t, func(js jetstream.JetStream) jetstream.JetStream { fj.JetStream = js; return fj }, reviewerYAML, watcherYAML, debouncedYAML)
	reviewer := h.subject(t, "pr-reviewer", "Codertocat/Hello-World#2")
	watcher := h.subject(t, "watcher", "all")
	digest := h.subject(t, "digest", "all")
	fj.subject = watcher
	fj.n.Store(1)
	ctx := context.Background()
	fired, err := h.js.OrderedConsumer(ctx, h.names.StreamIn(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{digest}})
	if err != nil {
		t.Fatal(err)
	}
	body := fixture(t, "pull_request/opened.payload.json")
	if r := post(t, h.url+"/webhooks/github", githubHeaders("pull_request", "part-1", body), body); r.status != http.StatusServiceUnavailable {
		t.Fatalf("delivery with a failing publish: %d %s, want 503", r.status, r.raw)
	}
	if _, seen, _ := h.store.Seen(ctx, "https://github.com/Codertocat/Hello-World", "part-1"); seen {
		t.Fatal("a delivery answered 503 was recorded as handled")
	}
	r := post(t, h.url+"/webhooks/github", githubHeaders("pull_request", "part-1", body), body)
	if r.status != http.StatusAccepted || len(r.body["admitted"].([]any)) != 3 {
		t.Fatalf("retry: %d %s, want 202 admitted to three sessions", r.status, r.raw)
	}
	for _, subject := range []string{reviewer, watcher} {
		if n := h.inCount(t, subject); n != 1 {
			t.Errorf("%d messages on %s, want 1", n, subject)
		}
	}
	m, err := fired.Next(jetstream.FetchMaxWait(15 * time.Second))
	if err != nil {
		t.Fatalf("the burst never fired: %v", err)
	}
	e, err := events.FromMsg(&nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
	if err != nil {
		t.Fatal(err)
	}
	if e.ID() != "part-1" || e.Extensions()[admission.ExtCount] != "1" {
		t.Fatalf("fired event %s with count %v, want part-1 counted once", e.ID(), e.Extensions()[admission.ExtCount])
	}
	if r := post(t, h.url+"/webhooks/github", githubHeaders("pull_request", "part-1", body), body); r.status != http.StatusAccepted || r.body["duplicate"] != true {
		t.Fatalf("redelivery after the retry: %d %s, want a duplicate", r.status, r.raw)
	}
}

// A GitHub body larger than a NATS message (2 MiB against the server's
// default 1 MiB) is delivered, not refused: admission reads it whole, the
// session's event carries a claim check whose handle holds the body in
// jl_blobs, and a rule's dead letter describes the data without it.
func TestLargeGitHubBodyIsClaimChecked(t *testing.T) {
	h := startDefs(t, nil, reviewerYAML, newlineSessionYAML)
	var payload map[string]any
	if err := json.Unmarshal(fixture(t, "pull_request/opened.payload.json"), &payload); err != nil {
		t.Fatal(err)
	}
	payload["padding"] = strings.Repeat("x", 2<<20)
	body, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	r := post(t, h.url+"/webhooks/github", githubHeaders("pull_request", "big-1", body), body)
	if r.status != http.StatusAccepted || len(r.body["admitted"].([]any)) != 1 {
		t.Fatalf("delivery of %d bytes: %d %s", len(body), r.status, r.raw)
	}
	_, m := h.lastEvent(t, h.names.StreamIn(), h.subject(t, "pr-reviewer", "Codertocat/Hello-World#2"))
	e, err := events.FromMsg(m)
	if err != nil {
		t.Fatal(err)
	}
	var ref ingest.BlobRef
	if err := json.Unmarshal(e.Data(), &ref); err != nil {
		t.Fatalf("data %q is no claim check: %v", e.Data(), err)
	}
	sum := sha256.Sum256(body)
	if ref.Blob.Handle == "" || e.Extensions()[ingest.ExtBlob] != ref.Blob.Handle || ref.Blob.Size != len(body) || ref.Blob.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("claim check %+v, extensions %v", ref, e.Extensions())
	}
	obs, err := h.js.ObjectStore(context.Background(), h.names.ObjectBlobs())
	if err != nil {
		t.Fatal(err)
	}
	stored, err := obs.GetBytes(context.Background(), ref.Blob.Handle)
	if err != nil || !bytes.Equal(stored, body) {
		t.Fatalf("blob %s: %d bytes (%v), want the body's %d", ref.Blob.Handle, len(stored), err, len(body))
	}
	if owner, err := h.names.ParseSessionKey(ref.Blob.Handle); err != nil || owner.Agent != "pr-reviewer" {
		t.Fatalf("handle %s names %+v (%v), want a pr-reviewer session", ref.Blob.Handle, owner, err)
	}
	dlq, _ := h.names.DLQ(string(admission.DLQReason))
	_, dm := h.lastEvent(t, h.names.StreamDLQ(), dlq)
	if len(dm.Data) > 4<<10 || !bytes.Contains(dm.Data, []byte(ref.Blob.SHA256)) {
		t.Fatalf("dead letter data: %d bytes", len(dm.Data))
	}
}

// The delegation hops an event sent to /events claims must be a count,
// since the worker caps delegation depth by it.
func TestEventsDelegationHopsAreACount(t *testing.T) {
	h := startDefs(t, nil, reviewerYAML)
	tests := []struct {
		name, hops string
		status     int
	}{
		{name: "count", hops: "3", status: http.StatusAccepted},
		{name: "negative", hops: "-1", status: http.StatusBadRequest},
		{name: "not a number", hops: "many", status: http.StatusBadRequest},
		{name: "too deep", hops: "1001", status: http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := fmt.Sprintf(`{"specversion":"1.0","id":%q,"source":"/test","type":"dev.example.thing","jlhops":%q}`, "hops-"+tt.name, tt.hops)
			r := post(t, h.url+"/events", map[string]string{"Content-Type": "application/cloudevents+json", "Authorization": "Bearer " + token}, []byte(body))
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.raw)
			}
		})
	}
}

// The chat thread an event answers in is the runtime's to name (the Slack
// receiver sets it from the message it read): an event sent to /events
// naming one is refused, so that a sender cannot have a run's answer, an
// approval request or an ask_human question posted into a channel it
// chose, nor answer a question asked in a thread it names.
func TestEventsChatThreadIsTheRuntimes(t *testing.T) {
	h := startDefs(t, nil, reviewerYAML)
	body := `{"specversion":"1.0","id":"thread-1","source":"/test","type":"dev.example.thing","jlthread":"slack:C0OTHER:1700000000.000100"}`
	r := post(t, h.url+"/events", map[string]string{"Content-Type": "application/cloudevents+json", "Authorization": "Bearer " + token}, []byte(body))
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.raw), "jlthread") {
		t.Fatalf("status %d, want 400 naming jlthread: %s", r.status, r.raw)
	}
}
