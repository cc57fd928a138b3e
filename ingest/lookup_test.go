package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/internal/logtest"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
)

// Agents with every limit admission keeps state for: a rate limit of one
// event a minute, a throttle of one a minute, a debounce, and one without
// any.
const (
	limitedAllYAML = `name: limited
model: {provider: scripted}
triggers:
  - name: pr
    when: event.type == "com.github.pull_request.opened"
    session: "'all'"
    rate: {key: event.data.repository.full_name, per_minute: 1}
`
	throttledAllYAML = `name: throttled
model: {provider: scripted}
triggers:
  - name: pr
    when: event.type == "com.github.pull_request.opened"
    session: "'all'"
    throttle: {per_minute: 1}
`
)

// dedupeKeys are the keys of jl_dedupe: the dedupe records, and the
// rate-limit and throttle state admission keeps there.
func (h *harness) dedupeKeys(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	kv, err := h.js.KeyValue(ctx, h.names.BucketDedupe())
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// auditDecisions are the outcomes of the decision records in JL_AUDIT.
func (h *harness) auditDecisions(t *testing.T) []admission.Outcome {
	t.Helper()
	recs, err := admission.Recent(context.Background(), h.js, h.names, "", time.Time{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []admission.Outcome
	for _, r := range recs {
		out = append(out, r.Decision.Outcome)
	}
	return out
}

// A delivery of an event jl_dedupe remembers, which every agent's rules
// would admit, publishes
// nothing to JL_IN, takes no rate-limit token, claims no throttle turn,
// joins no burst, writes only its duplicate record, and is answered with
// the first handling's outcome. The next new event then finds the token,
// the turn and the burst as they were.
func TestDuplicateOfAdmittableEventActsOnNothing(t *testing.T) {
	h := startDefs(t, nil, limitedAllYAML, throttledAllYAML, debouncedYAML, watcherYAML)
	ctx := context.Background()
	const source = "https://github.com/Codertocat/Hello-World"
	first := ingest.Result{ID: "dup-1", Admitted: []ingest.Target{{Agent: "watcher", Session: "all", Seq: 7}}}
	outcome, err := json.Marshal(first)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.store.Record(ctx, source, "dup-1", outcome); err != nil {
		t.Fatal(err)
	}
	keys := h.dedupeKeys(t)
	body := fixture(t, "pull_request/opened.payload.json")
	for i := range 3 {
		r := post(t, h.url+"/webhooks/github", githubHeaders("pull_request", "dup-1", body), body)
		if r.status != http.StatusAccepted || r.body["duplicate"] != true {
			t.Fatalf("delivery %d of a remembered event: %d %s, want 202 duplicate", i, r.status, r.raw)
		}
		want := `{"id":"dup-1","duplicate":true,"admitted":[{"agent":"watcher","session":"all","seq":7}]}`
		if strings.TrimSpace(r.raw) != want {
			t.Fatalf("duplicate answered %s, want the first handling's %s", r.raw, want)
		}
	}
	if n := h.inCount(t, ""); n != 0 {
		t.Fatalf("%d messages in JL_IN (events, bursts, throttled turns) after duplicates, want 0", n)
	}
	if got := h.dedupeKeys(t); !reflect.DeepEqual(got, keys) {
		t.Fatalf("jl_dedupe keys after duplicates %v, want %v: a duplicate left rate-limit or throttle state", got, keys)
	}
	// The redeliveries' records share the event's message id: one.
	if got, want := h.auditDecisions(t), []admission.Outcome{admission.Duplicate}; !reflect.DeepEqual(got, want) {
		t.Fatalf("JL_AUDIT holds %v, want %v", got, want)
	}

	// A new event finds everything untouched: the token, the turn now.
	r := post(t, h.url+"/webhooks/github", githubHeaders("pull_request", "new-1", body), body)
	if r.status != http.StatusAccepted {
		t.Fatalf("new event: %d %s", r.status, r.raw)
	}
	got := map[string]string{}
	for _, x := range r.body["admitted"].([]any) {
		tg := x.(map[string]any)
		how := "now"
		if tg["debounced"] == true {
			how = "debounced"
		}
		if tg["throttled"] == true {
			how = "throttled"
		}
		got[tg["agent"].(string)] = how
	}
	if want := map[string]string{"limited": "now", "throttled": "now", "digest": "debounced", "watcher": "now"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("new event admitted %v, want %v (%s)", got, want, r.raw)
	}
	// Its redelivery is answered as it was, and acts on nothing either.
	in := h.inCount(t, "")
	again := post(t, h.url+"/webhooks/github", githubHeaders("pull_request", "new-1", body), body)
	if again.status != http.StatusAccepted || again.body["duplicate"] != true || !reflect.DeepEqual(again.body["admitted"], r.body["admitted"]) {
		t.Fatalf("redelivery: %d %s, want a duplicate admitted as %s", again.status, again.raw, r.raw)
	}
	if n := h.inCount(t, ""); n != in {
		t.Fatalf("JL_IN went from %d to %d messages on a redelivery", in, n)
	}
	// And the token and turn are spent now: another event is limited.
	r = post(t, h.url+"/webhooks/github", githubHeaders("pull_request", "new-2", body), body)
	if r.status != http.StatusAccepted {
		t.Fatalf("second new event: %d %s", r.status, r.raw)
	}
	for _, x := range r.body["admitted"].([]any) {
		if tg := x.(map[string]any); tg["agent"] == "limited" || tg["agent"] == "throttled" && tg["throttled"] != true {
			t.Fatalf("second new event admitted %v at once: %s", tg, r.raw)
		}
	}
}

// A look-up that fails (jl_dedupe is gone, so no server answers it)
// answers 503 with Retry-After, whatever the rules would admit: nothing
// is published, recorded or audited. The agents keep no state in
// jl_dedupe (a rate limit or throttle would fail without the bucket, and
// so write nothing whether or not the look-up's answer was awaited): with
// the bucket there, the same delivery is admitted to both.
func TestFailedLookupAnswers503AndWritesNothing(t *testing.T) {
	body := fixture(t, "pull_request/opened.payload.json")
	ok := startDefs(t, nil, watcherYAML, debouncedYAML)
	if r := post(t, ok.url+"/webhooks/github", githubHeaders("pull_request", "gone-1", body), body); r.status != http.StatusAccepted || len(r.body["admitted"].([]any)) != 2 {
		t.Fatalf("with jl_dedupe there: %d %s, want 202 admitted to watcher and digest", r.status, r.raw)
	}

	h := startDefs(t, nil, watcherYAML, debouncedYAML)
	ctx := context.Background()
	if err := h.js.DeleteKeyValue(ctx, h.names.BucketDedupe()); err != nil {
		t.Fatal(err)
	}
	r := post(t, h.url+"/webhooks/github", githubHeaders("pull_request", "gone-1", body), body)
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("with jl_dedupe gone: %d (Retry-After %q) %s, want 503", r.status, r.header.Get("Retry-After"), r.raw)
	}
	if msg, _ := r.body["error"].(string); !strings.Contains(msg, "gone-1") {
		t.Fatalf("the error %q does not name the event's id", r.body["error"])
	}
	if n := h.inCount(t, ""); n != 0 {
		t.Fatalf("%d messages in JL_IN (events, bursts) after a failed look-up, want 0", n)
	}
	if n := h.auditCount(t); n != 0 {
		t.Fatalf("%d records in JL_AUDIT after a failed look-up, want 0", n)
	}
}

// A look-up that fails while jl_dedupe itself still takes writes (the
// server did not answer the read in time, say) records nothing there
// either: a record would answer the sender's retry as a duplicate of an
// event that was never published. Nor is anything published or audited.
func TestFailedLookupRecordsNothing(t *testing.T) {
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s.ClientURL())
	h := serveLookup(t, js, lookupFailsJS{js}, 5*time.Second, nil, watcherYAML, debouncedYAML)
	body := fixture(t, "pull_request/opened.payload.json")
	r := post(t, h.url+"/webhooks/github", githubHeaders("pull_request", "slow-1", body), body)
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("with the look-up failing: %d (Retry-After %q) %s, want 503", r.status, r.header.Get("Retry-After"), r.raw)
	}
	if keys := h.dedupeKeys(t); len(keys) != 0 {
		t.Fatalf("jl_dedupe holds %v after a failed look-up, want nothing: the retry would be answered as a duplicate", keys)
	}
	if n := h.inCount(t, ""); n != 0 {
		t.Fatalf("%d messages in JL_IN (events, bursts) after a failed look-up, want 0", n)
	}
	if n := h.auditCount(t); n != 0 {
		t.Fatalf("%d records in JL_AUDIT after a failed look-up, want 0", n)
	}
}

// lookupFailsJS is a JetStream whose key-value buckets answer every read
// with a timeout, and take every write.
type lookupFailsJS struct{ jetstream.JetStream }

func (j lookupFailsJS) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := j.JetStream.KeyValue(ctx, bucket)
	if err != nil {
		return nil, err
	}
	return lookupFailsKV{kv}, nil
}

type lookupFailsKV struct{ jetstream.KeyValue }

func (lookupFailsKV) Get(_ context.Context, key string) (jetstream.KeyValueEntry, error) {
	return nil, fmt.Errorf("injected: get %s: %w", key, nats.ErrTimeout)
}

// A sender that gives up while the look-up is under way (NATS down, so it
// is never answered) leaves no handler waiting for it. Nothing else ends
// the wait within the test: the ingest's timeout and the JetStream
// client's default timeout are an hour, so the handler returns only if the
// sender's cancellation reaches the look-up.
func TestCancelledLookupLeavesNoGoroutine(t *testing.T) {
	s := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, s.ClientURL())
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	returned := make(chan struct{}, 1)
	h := serveLookup(t, js, js, time.Hour, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				select {
				case returned <- struct{}{}:
				default:
				}
			}()
			next.ServeHTTP(w, r)
		})
	}, watcherYAML)
	// Run before the HTTP server's close, which waits for its handlers: a
	// handler still waiting (the test failed) is released by the
	// connection's close.
	t.Cleanup(nc.Close)

	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if st := nc.Status(); st != nats.RECONNECTING {
			return fmt.Errorf("connection %s, want reconnecting", st)
		}
		return nil
	})
	body := fixture(t, "pull_request/opened.payload.json")
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, h.url+"/webhooks/github", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range githubHeaders("pull_request", "gone-1", body) {
		req.Header.Set(k, v)
	}
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("answered %d", resp.StatusCode)
		}
		done <- err
	}()
	// The look-up is sent, into the buffer the connection keeps while it
	// reconnects, and waits for its answer: nothing else of the handler's
	// goes to NATS before it.
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n, err := nc.Buffered(); err != nil || n == 0 {
			return fmt.Errorf("no look-up sent yet (%d bytes buffered, %v)", n, err)
		}
		return nil
	})
	select {
	case <-returned:
		t.Fatal("the handler returned before the sender gave up")
	case err := <-done:
		t.Fatalf("the request ended before the sender gave up: %v", err)
	default:
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("request: %v, want it cancelled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled request did not return")
	}
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("a handler still waits for its look-up 10s after its sender gave up")
	}
}

// serveLookup provisions the deployment on js and serves an ingest on
// loopback whose dedupe store reads and writes jl_dedupe through storeJS
// and whose HTTP handler is wrapped by wrap (when not nil), with the
// definitions yamls and the request timeout timeout.
func serveLookup(t *testing.T, js, storeJS jetstream.JetStream, timeout time.Duration, wrap func(http.Handler) http.Handler, yamls ...string) *harness {
	t.Helper()
	ctx := context.Background()
	names := streams.Default()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	rules := admission.NewRules()
	for _, y := range yamls {
		c, err := policies.Parse(t.Name()+".yaml", []byte(y))
		if err != nil {
			t.Fatal(err)
		}
		rules.Set(c)
	}
	adm, err := admission.New(ctx, js, rules, admission.Config{Names: names})
	if err != nil {
		t.Fatal(err)
	}
	store, err := dedupe.New(ctx, storeJS, dedupe.Config{Names: names})
	if err != nil {
		t.Fatal(err)
	}
	ing, err := ingest.New(ingest.Config{Names: names, GitHubSecret: []byte(secret), Token: token, Timeout: timeout, Log: logtest.ForTest(t)}, js, store, adm)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	ing.Mount(mux)
	var hd http.Handler = mux
	if wrap != nil {
		hd = wrap(mux)
	}
	hs := httptest.NewServer(hd)
	t.Cleanup(hs.Close)
	return &harness{url: hs.URL, js: js, names: names, adm: adm, store: store, ing: ing}
}
