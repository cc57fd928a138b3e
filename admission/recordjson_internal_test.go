package admission

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// FuzzRecordJSON holds appendRecord to json.Marshal: the same bytes for
// any record, escapes, invalid UTF-8, zero and non-zero fields and times
// out of RFC 3339's range included (those it leaves to json.Marshal).
func FuzzRecordJSON(f *testing.F) {
	f.Add(int64(1764650000), int64(123456789), "id", "https://github.com/o/r", "com.github.push", "", "pr-reviewer", "pr", "admitted", "o/r#12", "", uint64(3), "", int64(0), "", 0, false)
	f.Add(int64(-70000000000), int64(0), "<&>", "\"\\\b\f\n\r\t\x00\x1f\x7f", "\u2028\u2029", "\xff\xfe", "a", "", "debounced", "s", "no trigger matched é", uint64(0), "k", int64(1764650000), "enqueue", 7, true)
	f.Add(int64(300000000000), int64(5), "", "", "", "", "", "", "", "", "", uint64(1<<63), "", int64(-1), "", -3, false)
	f.Fuzz(func(t *testing.T, sec, nsec int64, id, source, typ, subject, agent, trigger, outcome, session, reason string, version uint64, key string, at int64, onBusy string, count int, zoned bool) {
		rec := Record{Time: time.Unix(sec, nsec).UTC(), Event: EventInfo{ID: id, Source: source, Type: typ, Subject: subject},
			Decision: Decision{Agent: agent, Trigger: trigger, Outcome: Outcome(outcome), Session: session, Reason: reason,
				Version: version, DebounceKey: key, OnBusy: onBusy, Prompt: "not written", Window: time.Second},
			Count: count, Seq: 9}
		rec.Rule = rec.Decision.Rule()
		if at != 0 {
			rec.At = time.Unix(at, nsec).UTC()
		}
		if zoned {
			rec.Time = rec.Time.In(time.FixedZone("z", 3600))
		}
		want, wantErr := json.Marshal(rec)
		got, ok := appendRecord([]byte("prefix"), &rec)
		if !ok {
			if !bytes.Equal(got, []byte("prefix")) {
				t.Fatalf("refused, having appended %q", got)
			}
			return
		}
		if wantErr != nil {
			t.Fatalf("encoded %q where json.Marshal fails: %v", got, wantErr)
		}
		if !bytes.Equal(got[len("prefix"):], want) {
			t.Fatalf("appendRecord\n%s\njson.Marshal\n%s", got[len("prefix"):], want)
		}
	})
}
