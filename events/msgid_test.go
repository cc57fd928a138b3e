package events_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jetloop/jetloop/events"
)

// streamedMsgID is the message id written the way it was before it was
// hashed from one buffer: each part written to a streaming SHA-256.
func streamedMsgID(parts ...string) string {
	h := sha256.New()
	for i, p := range parts {
		if i > 0 {
			h.Write([]byte{0})
		}
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// FuzzMsgID holds MsgID and SubjectMsgID to the streamed hash of their
// parts, for parts short enough to hash on the stack and longer ones.
func FuzzMsgID(f *testing.F) {
	f.Add("jl.in.reviewer.octo=2Frepo=2312", "https://github.com/octo/repo", "2d1c0a40-6b1f-11ef-8f4e-2f1b2d7f0e11")
	f.Add("", "/", "1")
	f.Add(strings.Repeat("s", 300), strings.Repeat("u", 300), strings.Repeat("i", 300))
	f.Add("a\x00b", "c", "\x00")
	f.Fuzz(func(t *testing.T, subject, source, id string) {
		if source == "" || id == "" {
			t.Skip()
		}
		e := event.New()
		e.SetID(id)
		e.SetSource(source)
		if got, want := events.MsgID(e), streamedMsgID(e.Source(), e.ID()); got != want {
			t.Fatalf("MsgID = %q, want %q", got, want)
		}
		if got, want := events.SubjectMsgID(subject, e), streamedMsgID(subject, e.Source(), e.ID()); got != want {
			t.Fatalf("SubjectMsgID = %q, want %q", got, want)
		}
	})
}

// TestToMsgHeaderAddKeepsOthers checks that the headers ToMsg writes,
// which share one array of values, stay apart when one is added to.
func TestToMsgHeaderAddKeepsOthers(t *testing.T) {
	e := newEvent(t)
	m, err := events.ToMsg(testSubject, e)
	if err != nil {
		t.Fatal(err)
	}
	before := make(map[string][]string, len(m.Header))
	for k, v := range m.Header {
		before[k] = append([]string(nil), v...)
	}
	for k := range before {
		m.Header.Add(k, "added")
		for other, v := range before {
			got := m.Header.Values(other)
			if other == k {
				v = append(append([]string(nil), v...), "added")
			}
			if strings.Join(got, "\n") != strings.Join(v, "\n") {
				t.Fatalf("after Add(%q): %s = %q, want %q", k, other, got, v)
			}
		}
		before[k] = append(before[k], "added")
	}
}
