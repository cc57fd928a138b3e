package admission_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/jetloop/jetloop/admission"
)

// FuzzParseRecords feeds arbitrary bodies to the reader of JL_AUDIT
// messages: it never panics, and records written one a line, as the
// audit writer groups them, read back whole and in order around a line
// that is not a record.
func FuzzParseRecords(f *testing.F) {
	for _, s := range []struct {
		id, reason string
		junk       []byte
	}{
		{"1", "", []byte(`{"time": not a record`)},
		{"delivery-2", "rate limit 2/min for key \"a\nb\" exhausted", []byte("\n\n")},
		{"", "", []byte(`{"time":"2026-05-01T12:00:00Z","event":{"id":"x"},"decision":"admitted"}`)},
		{"3", "\u2028", []byte{0xff, '\n', '{'}},
	} {
		f.Add(s.id, s.reason, s.junk)
	}
	f.Fuzz(func(t *testing.T, id, reason string, junk []byte) {
		recs, err := admission.ParseRecords(junk)
		if err == nil && len(recs) == 0 {
			t.Fatalf("%q read as no record and no error", junk)
		}
		for _, r := range recs {
			if r.Time.IsZero() || r.Outcome == "" {
				t.Fatalf("%q read as an empty record %+v", junk, r)
			}
		}
		want := []admission.Record{
			{Time: time.Unix(1, 0).UTC(), Event: admission.EventInfo{ID: id, Source: "s"}, Decision: admission.Decision{Agent: "a", Outcome: admission.Admitted, Reason: reason}},
			{Time: time.Unix(2, 0).UTC(), Event: admission.EventInfo{ID: id + "/2", Source: "s"}, Decision: admission.Decision{Agent: "a", Outcome: admission.RateLimited}},
		}
		var lines [][]byte
		for i, r := range want {
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.IndexByte(b, '\n') >= 0 {
				t.Fatalf("a record's JSON holds a newline: %q", b)
			}
			lines = append(lines, b)
			// What a record alone reads as (invalid UTF-8 is replaced).
			if err := json.Unmarshal(b, &want[i]); err != nil {
				t.Fatal(err)
			}
		}
		// The junk without newlines is one line between the two.
		body := bytes.Join([][]byte{lines[0], bytes.ReplaceAll(junk, []byte("\n"), nil), lines[1]}, []byte("\n"))
		got, _ := admission.ParseRecords(body)
		var kept []admission.Record
		for _, r := range got {
			if r.Event.Source == "s" && r.Agent == "a" && (r.Event.ID == want[0].Event.ID || r.Event.ID == want[1].Event.ID) && !r.Time.IsZero() {
				kept = append(kept, r)
			}
		}
		if len(kept) < 2 || kept[0].Event.ID != want[0].Event.ID || kept[0].Reason != want[0].Reason || kept[len(kept)-1].Event.ID != want[1].Event.ID {
			t.Fatalf("records of %q read as %+v", body, got)
		}
	})
}
