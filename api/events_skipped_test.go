package api_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/api"
)

// A JL_AUDIT message with lines that hold no decision record is read for
// the records it has, and the answer says how many messages had lines
// skipped, rather than dropping them without a word.
func TestEventsSayWhatWasSkipped(t *testing.T) {
	h := start(t, api.Config{})
	subject, err := h.names.Audit(admission.AuditKind, "a")
	if err != nil {
		t.Fatal(err)
	}
	rec := `{"time":"` + time.Now().UTC().Format(time.RFC3339Nano) + `","event":{"id":"1","source":"s","type":"t"},"agent":"a","decision":"admitted"}`
	for _, body := range []string{rec + "\nnot a record", `{}`} {
		m := nats.NewMsg(subject)
		m.Data = []byte(body)
		if _, err := h.js.PublishMsg(ctx(t), m); err != nil {
			t.Fatal(err)
		}
	}
	ev, err := h.client.Events(ctx(t), api.EventsRequest{Since: time.Now().Add(-time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if len(ev.Records) != 1 || ev.Records[0].Event.ID != "1" {
		t.Fatalf("records %+v, want the one record", ev.Records)
	}
	if ev.Skipped != 2 || !strings.Contains(ev.SkippedError, "not a record") {
		t.Fatalf("skipped %d (%q), want 2 messages, the first's line named", ev.Skipped, ev.SkippedError)
	}
}
