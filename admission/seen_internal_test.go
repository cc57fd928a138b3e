package admission

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// BenchmarkRecordsSeen is Recent's dedupe of b.N distinct decisions
// inside one duplicate window, as a busy ingest stores them (over 16,384
// in two minutes is 137 webhooks a second): the cost a record must not
// grow with the records already read.
func BenchmarkRecordsSeen(b *testing.B) {
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	recs := make([]Record, b.N)
	for i := range recs {
		recs[i] = Record{Time: at.Add(time.Duration(i) * time.Microsecond), Event: EventInfo{ID: fmt.Sprint(i), Source: "s"},
			Decision: Decision{Agent: "a", Outcome: Admitted}}
	}
	seen := newRecordsSeen()
	b.ResetTimer()
	for i := range recs {
		if seen.repeats(recs[i]) {
			b.Fatalf("record %d taken for a repeat", i)
		}
	}
}

// A decision read again within the window is a repeat however many
// records came between; once the window has passed it is a decision of
// its own, and the records forgotten are those older than the window.
func TestRecordsSeenForgetsOnlyPastTheWindow(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	rec := func(id string, d time.Duration) Record {
		return Record{Time: at.Add(d), Event: EventInfo{ID: id, Source: "s"}, Decision: Decision{Agent: "a", Outcome: Admitted}}
	}
	seen := newRecordsSeen()
	if seen.repeats(rec("x", 0)) {
		t.Fatal("the first record taken for a repeat")
	}
	const between = 20000
	for i := range between {
		if seen.repeats(rec(fmt.Sprint(i), time.Duration(i)*time.Millisecond)) {
			t.Fatalf("record %d taken for a repeat", i)
		}
	}
	if !seen.repeats(rec("x", recordWindow-time.Second)) {
		t.Error("x again within the window, after 20,000 others, not a repeat")
	}
	if seen.repeats(rec("x", recordWindow+time.Second)) {
		t.Error("x again past the window taken for a repeat")
	}
	if !seen.repeats(rec("x", recordWindow+2*time.Second)) {
		t.Error("x a third time, a second after the second, not a repeat")
	}
	// Past 2 min + 1 s, the records up to 1 s are gone: 1,001 of them.
	if n, want := len(seen.at), between+1-1001; n != want {
		t.Errorf("%d records remembered, want %d", n, want)
	}
}

// A message of one record is read whole, as it always was, however its
// JSON is laid out; several records are read one a line.
func TestParseRecordsReadsOneRecordWhole(t *testing.T) {
	pretty := "{\n  \"time\": \"2026-05-01T12:00:00Z\",\n  \"event\": {\"id\": \"1\", \"source\": \"s\", \"type\": \"t\"},\n  \"agent\": \"a\",\n  \"decision\": \"admitted\"\n}\n"
	got, err := ParseRecords([]byte(pretty))
	if err != nil || len(got) != 1 || got[0].Event.ID != "1" || got[0].Agent != "a" || got[0].Outcome != Admitted {
		t.Fatalf("a record laid out on lines read as %+v, %v", got, err)
	}
	lines := `{"time":"2026-05-01T12:00:00Z","event":{"id":"1","source":"s","type":"t"},"agent":"a","decision":"admitted"}` + "\n" +
		`{"time":"2026-05-01T12:00:01Z","event":{"id":"2","source":"s","type":"t"},"agent":"a","decision":"admitted"}`
	if got, err := ParseRecords([]byte(lines)); err != nil || len(got) != 2 || got[0].Event.ID != "1" || got[1].Event.ID != "2" {
		t.Fatalf("two records one a line read as %+v, %v", got, err)
	}
}

// A line of a grouped message that parses but is no decision (null, {},
// an object without a time or a decision) is skipped, never read as an
// empty record, and the error says how many lines were and which first;
// a whole body that is one of them is no record either.
func TestParseRecordsSkipsEmptyRecords(t *testing.T) {
	rec := `{"time":"2026-05-01T12:00:00Z","event":{"id":"1","source":"s","type":"t"},"agent":"a","decision":"admitted"}`
	body := strings.Join([]string{`null`, rec, `{}`, `{"agent":"a"}`, `{"time":"2026-05-01T12:00:00Z"}`}, "\n")
	got, err := ParseRecords([]byte(body))
	if len(got) != 1 || got[0].Event.ID != "1" || got[0].Outcome != Admitted {
		t.Fatalf("records of %q: %+v", body, got)
	}
	if err == nil || !strings.Contains(err.Error(), "4 of 5 lines") || !strings.Contains(err.Error(), "line 1: ") {
		t.Fatalf("records of %q: error %v, want one naming 4 of 5 lines skipped, line 1 first", body, err)
	}
	for _, body := range []string{``, `null`, `{}`, " { } \n", `{"event":{"id":"1"},"agent":"a"}`} {
		if got, err := ParseRecords([]byte(body)); len(got) != 0 || err == nil {
			t.Errorf("body %q read as %+v, %v; want no record and an error", body, got, err)
		}
	}
}
