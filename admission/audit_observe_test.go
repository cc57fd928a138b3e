package admission_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/admission"
)

// A lone record written again inside JL_AUDIT's duplicate window (a
// sender's retry after a write that failed once the record was stored:
// the same decision, the same Nats-Msg-Id) is dropped by the server, so
// the observer is not told it was stored a second time: the metrics
// count the messages JL_AUDIT holds.
func TestObserverNotToldOfARecordTheServerDropped(t *testing.T) {
	e := setup(t)
	a := newAdmitter(t, e, nil, compile(t, reviewer))
	obs := &recordObserver{}
	a.ObserveRecords(obs)
	ctx := context.Background()
	recs := recordsOf(t, a, "again")
	for i := range 2 {
		if err := a.WriteRecords(ctx, recs); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	s, err := e.js.Stream(ctx, e.names.StreamAudit())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("JL_AUDIT holds %d messages, want 1 (the second a duplicate)", info.State.Msgs)
	}
	if got, want := obs.String(), "stored reviewer 1"; got != want {
		t.Fatalf("observed %q, want %q", got, want)
	}
}

// ParseRecords' error for a skipped line shows the line, so whoever
// reads it can find the message that holds it.
func TestParseRecordsErrorShowsTheLine(t *testing.T) {
	rec := `{"time":"2026-05-01T12:00:00Z","event":{"id":"1","source":"s","type":"t"},"agent":"a","decision":"admitted"}`
	for _, bad := range []string{`{"agent":"nodecision"}`, `not json at all`} {
		body := rec + "\n" + bad
		got, err := admission.ParseRecords([]byte(body))
		if len(got) != 1 || err == nil || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), strconv.Quote(bad)) {
			t.Errorf("records of %q: %d, %v; want 1 and an error quoting line 2", body, len(got), err)
		}
	}
	long := `{"agent":"` + strings.Repeat("x", 500) + `"}`
	if _, err := admission.ParseRecords([]byte(rec + "\n" + long)); err == nil || len(err.Error()) > 300 {
		t.Errorf("a long skipped line: error %v, want one that shows the line's start only", err)
	}
}
