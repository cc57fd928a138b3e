package ingest_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/admission"
)

// Every decision record the ingest writes counts in the audit metrics,
// not only admission's: a duplicate delivery's record and a no_room
// refusal's too, so the messages and records counted are the ones
// JL_AUDIT holds.
func TestAuditMetricsCountEveryRecordWritten(t *testing.T) {
	h := serveMetrics(t, []string{reviewerYAML})
	ctx := context.Background()
	// JL_IN's room small enough for the agent's share (25% of half) to be two
	// messages: the third delivery is refused for room.
	s, err := h.js.Stream(ctx, h.names.StreamIn())
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxMsgs = 16
	if _, err := h.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	body := fixture(t, "pull_request/opened.payload.json")
	for _, d := range []struct {
		delivery string
		status   int
	}{
		{"d1", http.StatusAccepted},
		{"d1", http.StatusAccepted}, // a duplicate: its record is _'s
		{"d2", http.StatusAccepted},
		{"d3", http.StatusServiceUnavailable}, // no room: a no_room record
	} {
		if r := post(t, h.url+"/webhooks/github", githubHeaders("pull_request", d.delivery, body), body); r.status != d.status {
			t.Fatalf("delivery %s: %d %s, want %d", d.delivery, r.status, r.raw, d.status)
		}
	}
	// What JL_AUDIT holds, by agent.
	as, err := h.js.Stream(ctx, h.names.StreamAudit())
	if err != nil {
		t.Fatal(err)
	}
	info, err := as.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	messages, records := map[string]int{}, map[string]int{}
	outcomes := map[admission.Outcome]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := as.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		agent := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		recs, err := admission.ParseRecords(m.Data)
		if err != nil {
			t.Fatalf("JL_AUDIT message %d: %v", seq, err)
		}
		messages[agent]++
		records[agent] += len(recs)
		for _, r := range recs {
			outcomes[r.Outcome]++
		}
	}
	if outcomes[admission.Duplicate] != 1 || outcomes[admission.NoRoom] != 1 || outcomes[admission.Admitted] != 2 {
		t.Fatalf("JL_AUDIT holds %v, want 2 admitted, 1 duplicate, 1 no_room", outcomes)
	}
	got := scrape(t, h.url)
	for _, agent := range []string{"pr-reviewer", admission.NoAgent} {
		if v := got[`jetloop_ingest_audit_records_total{agent="`+agent+`"}`]; v != float64(records[agent]) {
			t.Errorf("records of %s counted %v; JL_AUDIT holds %d", agent, v, records[agent])
		}
		if v := got[`jetloop_ingest_audit_messages_total{agent="`+agent+`"}`]; v != float64(messages[agent]) {
			t.Errorf("messages of %s counted %v; JL_AUDIT holds %d", agent, v, messages[agent])
		}
	}
	if v := got[`jetloop_ingest_audit_record_wait_seconds_count`]; v != 4 {
		t.Errorf("record waits counted %v, want 4", v)
	}
}
