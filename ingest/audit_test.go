package ingest_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

// auditCount is the number of messages in JL_AUDIT.
func (h *harness) auditCount(t *testing.T) uint64 {
	t.Helper()
	s, err := h.js.Stream(context.Background(), h.names.StreamAudit())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// postAll posts n webhooks at once, deliveries prefix-0 to prefix-(n-1),
// and returns their statuses.
func postAll(t *testing.T, h *harness, prefix string, n int, body []byte) []int {
	t.Helper()
	statuses := make([]int, n)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-release
			req, err := http.NewRequest(http.MethodPost, h.url+"/webhooks/github", bytes.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			for k, v := range githubHeaders("pull_request", fmt.Sprint(prefix, "-", i), body) {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		})
	}
	close(release)
	wg.Wait()
	return statuses
}

// Concurrent webhooks' decision records are written together, and each
// webhook has exactly its one decision, read by admission.Recent and by
// the API's events endpoint (what `jetloop events` and the dashboard
// show).
func TestConcurrentWebhooksEachHaveOneDecision(t *testing.T) {
	h := startTimeout(t, time.Minute, []string{reviewerYAML, demoYAML}, 30*time.Second)
	body := fixture(t, "pull_request/opened.payload.json")
	// As many at once as the gate lets one address send.
	const n = 16
	grouped, total := false, 0
	for burst := 0; burst < 5 && !grouped; burst++ {
		before := h.auditCount(t)
		for i, s := range postAll(t, h, fmt.Sprint("c", burst), n, body) {
			if s != http.StatusAccepted {
				t.Fatalf("webhook %d: status %d", i, s)
			}
		}
		total += n
		grouped = h.auditCount(t)-before < n
	}
	if !grouped {
		t.Fatalf("5 bursts of %d concurrent webhooks stored one decision a message", n)
	}
	check := func(who string, recs []admission.Record) {
		t.Helper()
		ids := map[string]bool{}
		for _, r := range recs {
			if r.Outcome != admission.Admitted || r.Rule != "pr-reviewer/pr" || r.Session != "Codertocat/Hello-World#2" {
				t.Errorf("%s: record %+v", who, r)
			}
			if ids[r.Event.ID] {
				t.Errorf("%s: event %s has two decisions", who, r.Event.ID)
			}
			ids[r.Event.ID] = true
		}
		if len(ids) != total {
			t.Errorf("%s: decisions of %d webhooks, want %d", who, len(ids), total)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs, err := admission.Recent(ctx, h.js, h.names, "", time.Now().Add(-time.Hour), 1000)
	if err != nil {
		t.Fatal(err)
	}
	check("admission.Recent", recs)

	svc, err := api.New(ctx, h.js.Conn(), h.js, api.Config{Names: h.names, Requests: h.ing.Request})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = svc.Run(runCtx) })
	t.Cleanup(func() { stop(); wg.Wait() })
	client := api.NewClient(h.js.Conn(), h.names)
	var ev api.EventsResponse
	natstest.WaitFor(t, 10*time.Second, func() error {
		ev, err = client.Events(ctx, api.EventsRequest{Agent: "pr-reviewer", Limit: 1000})
		return err
	})
	check("api events", ev.Records)
}

// A failed write of decision records fails the webhooks it held: each is
// answered 503, no dedupe record is stored, and the retry is admitted.
func TestFailedDecisionRecordAnswers503AndRetryIsAdmitted(t *testing.T) {
	h := startTimeout(t, time.Minute, []string{reviewerYAML, demoYAML}, 30*time.Second)
	body := fixture(t, "pull_request/opened.payload.json")
	ctx := context.Background()
	if err := h.js.DeleteStream(ctx, h.names.StreamAudit()); err != nil {
		t.Fatal(err)
	}
	const n = 16
	for i, s := range postAll(t, h, "fail", n, body) {
		if s != http.StatusServiceUnavailable {
			t.Fatalf("webhook %d without JL_AUDIT: status %d, want 503", i, s)
		}
	}
	for i := range n {
		if _, seen, err := h.store.Seen(ctx, "https://github.com/Codertocat/Hello-World", fmt.Sprint("fail-", i)); err != nil || seen {
			t.Fatalf("dedupe record of a 503'd webhook %d: %v %v", i, seen, err)
		}
	}
	if _, err := streams.Provision(ctx, h.js, streams.Options{DedupeWindow: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for i, s := range postAll(t, h, "fail", n, body) {
		if s != http.StatusAccepted {
			t.Fatalf("retry of webhook %d: status %d, want 202", i, s)
		}
	}
	if _, seen, err := h.store.Seen(ctx, "https://github.com/Codertocat/Hello-World", "fail-0"); err != nil || !seen {
		t.Fatalf("dedupe record of an admitted retry: %v %v", seen, err)
	}
	recs, err := admission.Recent(ctx, h.js, h.names, "pr-reviewer", time.Now().Add(-time.Hour), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != n {
		t.Fatalf("%d decisions after the retries, want %d", len(recs), n)
	}
}
