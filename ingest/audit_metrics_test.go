package ingest_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/internal/logtest"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
)

// serveMetrics is serve with the ingest's metrics registered on a
// registry of their own, served on GET /metrics beside the receivers,
// as `jetloop dev` serves them.
func serveMetrics(t *testing.T, defs []string) *harness {
	t.Helper()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s.ClientURL())
	ctx := context.Background()
	names := streams.Default()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
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
	m := ingest.NewMetrics()
	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	srv, err := ingest.New(ingest.Config{Names: names, GitHubSecret: []byte(secret), Token: token, Timeout: 30 * time.Second, Log: logtest.ForTest(t), Metrics: m}, js, store, adm)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	srv.Mount(mux)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return &harness{url: hs.URL, js: js, names: names, adm: adm, store: store, ing: srv, nats: s.ClientURL(), srv: s}
}

// scrape returns the samples GET /metrics serves, by series as the text
// format writes it (`name{label="value",...}`).
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 1<<20))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// The decision records concurrent webhooks write count in the ingest's
// metrics: every record and every JL_AUDIT message stored by agent, as
// many records a message as JL_AUDIT holds, each record's wait, and no
// failure; a write JL_AUDIT refuses counts as failed, by agent.
func TestAuditMetrics(t *testing.T) {
	h := serveMetrics(t, []string{reviewerYAML, demoYAML})
	body := fixture(t, "pull_request/opened.payload.json")
	const n = 16
	grouped, total := false, 0
	for burst := 0; burst < 5 && !grouped; burst++ {
		before := h.auditCount(t)
		for i, s := range postAll(t, h, fmt.Sprint("m", burst), n, body) {
			if s != http.StatusAccepted {
				t.Fatalf("webhook %d: status %d", i, s)
			}
		}
		total += n
		grouped = h.auditCount(t)-before < n
	}
	// Whether a burst was grouped is the machine's doing (that it can be
	// is TestConcurrentWebhooksEachHaveOneDecision's): the counts hold
	// either way.
	msgs := h.auditCount(t)
	got := scrape(t, h.url)
	for series, want := range map[string]float64{
		`jetloop_ingest_audit_records_total{agent="pr-reviewer"}`:  float64(total),
		`jetloop_ingest_audit_messages_total{agent="pr-reviewer"}`: float64(msgs),
		`jetloop_ingest_audit_message_records_count`:               float64(msgs),
		`jetloop_ingest_audit_message_records_sum`:                 float64(total),
		`jetloop_ingest_audit_record_wait_seconds_count`:           float64(total),
	} {
		if got[series] != want {
			t.Errorf("%s = %v, want %v", series, got[series], want)
		}
	}
	if ones := got[`jetloop_ingest_audit_message_records_bucket{le="1"}`]; grouped && ones == float64(msgs) || !grouped && ones != float64(msgs) {
		t.Errorf("%v messages counted as holding one record; %d messages hold %d", ones, msgs, total)
	}
	for series := range got {
		if strings.HasPrefix(series, "jetloop_ingest_audit_records_failed_total") {
			t.Errorf("a failure counted: %s = %v", series, got[series])
		}
	}

	// JL_AUDIT gone: the record's write is refused, the delivery answered
	// 503, and the failure counted.
	if err := h.js.DeleteStream(context.Background(), h.names.StreamAudit()); err != nil {
		t.Fatal(err)
	}
	if s := postAll(t, h, "gone", 1, body); s[0] != http.StatusServiceUnavailable {
		t.Fatalf("a webhook whose decision could not be recorded: status %d, want 503", s[0])
	}
	got = scrape(t, h.url)
	if v := got[`jetloop_ingest_audit_records_failed_total{agent="pr-reviewer",reason="error"}`]; v != 1 {
		t.Errorf("records failed with JL_AUDIT gone: %v, want 1 (%v)", v, got)
	}
	if v := got[`jetloop_ingest_audit_records_total{agent="pr-reviewer"}`]; v != float64(total) {
		t.Errorf("records stored with JL_AUDIT gone: %v, want still %d", v, total)
	}
}
