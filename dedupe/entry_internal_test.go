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
	if _, err := (Entry{At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}).encode(); err == nil {
		t.Error("a time past year 9999 was encoded")
	}
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
