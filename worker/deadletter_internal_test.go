package worker

import (
	"testing"

	"github.com/nats-io/nats.go"
)

func TestDeadLetterHeader(t *testing.T) {
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
			name: "message id kept for dedupe",
			in:   nats.Header{"Nats-Msg-Id": {"delivery-1"}},
			keep: map[string]string{"Nats-Msg-Id": "delivery-1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := deadLetterHeader(tc.in)
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
