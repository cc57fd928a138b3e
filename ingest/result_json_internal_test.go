package ingest

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// FuzzMarshalResult holds marshalResult to encoding/json: the dedupe
// record and the answer of every event are its bytes, which readers
// decode as Marshal's.
func FuzzMarshalResult(f *testing.F) {
	f.Add("d1", "pr-reviewer", "octo/repo#12", "demo", "", "no rule matched", uint64(7), 3, true, false)
	f.Add("<&>\u2028\u2029\"\\\x00\x1f\x7f", "a\xffb", "\b\f\n\r\t", "é", "s", "\xe2\x80", uint64(0), 0, false, true)
	f.Add("", "", "", "", "", "", uint64(1<<63), 7, true, true)
	f.Fuzz(func(t *testing.T, id, agent, session, refAgent, refSession, reason string, seq uint64, shape int, dup, throttledAt bool) {
		r := &Result{ID: id, Duplicate: dup}
		if shape&1 != 0 {
			r.Admitted = []Target{}
		}
		if shape&2 != 0 {
			r.Admitted = append(r.Admitted,
				Target{Agent: agent, Session: session, Seq: seq},
				Target{Agent: session, Session: agent, Debounced: true},
				Target{Agent: agent, Session: "", Throttled: true})
		}
		if throttledAt && len(r.Admitted) > 0 {
			r.Admitted[len(r.Admitted)-1].At = time.Unix(int64(seq%(1<<34)), int64(seq%1e9)).UTC()
		}
		if shape&4 != 0 {
			r.Refused = []Refusal{{Agent: refAgent, Session: refSession, Reason: reason}, {Agent: reason, Reason: refAgent}}
		} else if shape&8 != 0 {
			r.Refused = []Refusal{}
		}
		want, werr := json.Marshal(r)
		got, err := marshalResult(r)
		if (err == nil) != (werr == nil) {
			t.Fatalf("marshalResult error %v, json.Marshal error %v", err, werr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("marshalResult\n%s\njson.Marshal\n%s", got, want)
		}
	})
}
