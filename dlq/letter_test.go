package dlq

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/streams"
)

func TestHeader(t *testing.T) {
	tests := []struct {
		name    string
		in      nats.Header
		keep    map[string]string
		dropped []string
		renamed map[string]string
	}{
		{
			name:    "fired tick",
			in:      nats.Header{"Nats-Scheduler": {"jl.sched.mon.drift"}, "Nats-Schedule-Next": {"2026-01-01T00:00:00Z"}, "Ce-Id": {"x"}},
			keep:    map[string]string{"Ce-Id": "x"},
			dropped: []string{"Nats-Scheduler", "Nats-Schedule-Next"},
			renamed: map[string]string{"Jl-Orig-Nats-Scheduler": "jl.sched.mon.drift", "Jl-Orig-Nats-Schedule-Next": "2026-01-01T00:00:00Z"},
		},
		{
			name:    "server directives in any case",
			in:      nats.Header{"Nats-TTL": {"never"}, "nats-rollup": {"sub"}, "Nats-Expected-Last-Subject-Sequence": {"4"}, "Nats-Batch-Id": {"b"}},
			dropped: []string{"Nats-TTL", "nats-rollup", "Nats-Expected-Last-Subject-Sequence", "Nats-Batch-Id"},
			renamed: map[string]string{"Jl-Orig-Nats-TTL": "never", "Jl-Orig-nats-rollup": "sub"},
		},
		{
			name:    "a status its sender set, in any case",
			in:      nats.Header{"Status": {"503"}, "description": {"No Responders"}, "Ce-Id": {"x"}},
			keep:    map[string]string{"Ce-Id": "x"},
			dropped: []string{"Status", "description"},
			renamed: map[string]string{"Jl-Orig-Status": "503", "Jl-Orig-description": "No Responders"},
		},
		{
			name: "message id kept for dedupe",
			in:   nats.Header{"Nats-Msg-Id": {"delivery-1"}},
			keep: map[string]string{"Nats-Msg-Id": "delivery-1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := Header(tc.in)
			for k, v := range tc.keep {
				if got := out[k]; len(got) != 1 || got[0] != v {
					t.Errorf("%s = %v, want %q", k, got, v)
				}
			}
			for _, k := range tc.dropped {
				if _, ok := out[k]; ok {
					t.Errorf("%s kept: the server would act on it", k)
				}
			}
			for k, v := range tc.renamed {
				if got := out[k]; len(got) != 1 || got[0] != v {
					t.Errorf("%s = %v, want %q", k, got, v)
				}
			}
		})
	}
}

func TestNew(t *testing.T) {
	names := streams.Default()
	h := nats.Header{"Ce-Id": {"e1"}, "Nats-Msg-Id": {"m1"}, "Nats-TTL": {"never"}}
	m, err := New(names, NoSession, "cancel for demo/x:\nno such session", "jl.ctl.demo.x", 7, h, []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != "jl.dlq.no_session" || m.Header.Get(HeaderReason) != "no_session" || m.Header.Get(HeaderDetail) != "cancel for demo/x:; no such session" ||
		m.Header.Get(HeaderSubject) != "jl.ctl.demo.x" || m.Header.Get(HeaderSeq) != "7" || m.Header.Get(nats.MsgIdHdr) != "m1" || m.Header.Get("Jl-Orig-Nats-TTL") != "never" {
		t.Errorf("letter %s %v", m.Subject, m.Header)
	}
	m, err = New(names, BadSubject, strings.Repeat("é", MaxDetail), "jl.in.x", 3, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := m.Header.Get(HeaderDetail); len(d) > MaxDetail || !strings.HasSuffix(d, "...") || !utf8.ValidString(d) || m.Header.Get(nats.MsgIdHdr) != "dlq-jl.in.x-3" {
		t.Errorf("long detail: %d bytes, id %q", len(d), m.Header.Get(nats.MsgIdHdr))
	}
	if _, err := New(names, Reason("worker"), "", "jl.in.x", 1, nil, nil); err == nil {
		t.Error("an unknown reason was accepted")
	}
	for _, r := range Reasons() {
		if got, err := ParseReason(string(r)); err != nil || got != r {
			t.Errorf("ParseReason(%q) = %q, %v", r, got, err)
		}
	}
}
