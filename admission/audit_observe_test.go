package admission_test

import (
	"context"
	"testing"
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
