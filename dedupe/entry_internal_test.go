package dedupe

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// encode writes what json.Marshal writes of an entry whose outcome is
// compact JSON, and what decodes back to the same entry otherwise.
func TestEntryEncode(t *testing.T) {
	at := time.Date(2026, 12, 1, 18, 4, 5, 123456789, time.UTC)
	for _, e := range []Entry{
		{At: at},
		{At: at.Truncate(time.Second), Outcome: json.RawMessage(`{"id":"x","admitted":[{"agent":"a","session":"s","seq":7}]}`)},
		{At: at, Digest: "0f3a"},
		{At: at.In(time.FixedZone("x", 3600)), Outcome: json.RawMessage(`"<&>"`), Digest: "a\"b\\c\u2028<&>\x01"},
		{At: time.Time{}, Outcome: json.RawMessage(`null`)},
	} {
		got, err := e.encode()
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var back, wantBack Entry
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("encode = %s: %v", got, err)
		}
		if err := json.Unmarshal(want, &wantBack); err != nil {
			t.Fatal(err)
		}
		if !back.At.Equal(wantBack.At) || back.Digest != wantBack.Digest || !reflect.DeepEqual(value(t, back.Outcome), value(t, wantBack.Outcome)) {
			t.Fatalf("encode = %s, decodes to %+v; json.Marshal = %s, %+v", got, back, want, wantBack)
		}
		if !bytes.ContainsAny(e.Outcome, "<&>") && !bytes.Equal(got, want) {
			t.Errorf("encode = %s, json.Marshal = %s", got, want)
		}
	}
	for _, at := range []time.Time{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Unix(0, 0).In(time.FixedZone("x", 30*3600))} {
		if got, err := (Entry{At: at}).encode(); err == nil {
			t.Errorf("time %s, which json.Marshal refuses, was encoded: %s", at, got)
		}
	}
}

// FuzzEntryEncode: encode fails where json.Marshal fails, and otherwise
// writes what decodes to the entry json.Marshal's output decodes to,
// byte for byte what it writes when the outcome is compact and holds
// nothing json.Marshal escapes.
func FuzzEntryEncode(f *testing.F) {
	f.Add(int64(0), 0, []byte(`{"id":"x","admitted":[]}`), "0f3a")
	f.Add(int64(1)<<62, 3600, []byte(` [1, "<&>"] `), "a\xff\"b")
	f.Add(int64(-1)<<62, 30*3600, []byte(`null`), "")
	f.Fuzz(func(t *testing.T, ns int64, offset int, outcome []byte, digest string) {
		e := Entry{At: time.Unix(0, ns).In(time.FixedZone("z", offset%(48*3600))), Digest: digest}
		if json.Valid(outcome) {
			e.Outcome = outcome
		}
		got, err := e.encode()
		want, werr := json.Marshal(e)
		if (err == nil) != (werr == nil) {
			t.Fatalf("encode error %v, json.Marshal error %v, of %+v", err, werr, e)
		}
		if err != nil {
			return
		}
		var back, wantBack Entry
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("encode = %q does not decode: %v", got, err)
		}
		if err := json.Unmarshal(want, &wantBack); err != nil {
			t.Fatal(err)
		}
		if !back.At.Equal(wantBack.At) || back.Digest != wantBack.Digest || !reflect.DeepEqual(value(t, back.Outcome), value(t, wantBack.Outcome)) {
			t.Fatalf("encode = %q, json.Marshal = %q", got, want)
		}
		var compact bytes.Buffer
		if json.Compact(&compact, e.Outcome) == nil && bytes.Equal(compact.Bytes(), e.Outcome) &&
			!bytes.ContainsAny(e.Outcome, "<&>\u2028\u2029") && !bytes.Equal(got, want) {
			t.Fatalf("encode = %q, json.Marshal = %q", got, want)
		}
	})
}

// value is what JSON b holds, nil for none.
func value(t *testing.T, b []byte) any {
	t.Helper()
	if len(b) == 0 {
		return nil
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}
