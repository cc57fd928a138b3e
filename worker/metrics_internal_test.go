package worker

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetloop/jetloop/record"
)

// The version label keeps each agent's newest versionWindow versions and
// folds older ones into "older", removing their series, so it stays
// bounded however often an agent is applied.
func TestVersionLabelIsBounded(t *testing.T) {
	m := NewMetrics()
	for v := uint64(1); v <= 20; v++ {
		m.runs.WithLabelValues(m.labels("a", v, runOK)...).Inc()
		m.runs.WithLabelValues(m.labels("b", 1, runOK)...).Inc()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.runs)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 {
		t.Fatalf("gather: %v %v", mfs, err)
	}
	series := map[string]float64{}
	for _, s := range mfs[0].GetMetric() {
		key := ""
		for _, l := range s.GetLabel() {
			key += l.GetName() + "=" + l.GetValue() + " "
		}
		series[key] = s.GetCounter().GetValue()
	}
	if len(series) != versionWindow+1 || series["agent=b outcome=ok version=1 "] != 20 || series["agent=a outcome=ok version=20 "] != 1 {
		t.Fatalf("series %v, want versions 13 to 20 of agent a and version 1 of agent b", series)
	}
	if got := m.version("a", 12); got != "older" {
		t.Fatalf("version 12 of 20 labelled %q", got)
	}
	if got := m.version("a", 13); got != "13" {
		t.Fatalf("version 13 of 20 labelled %q", got)
	}
}

func TestRunOutcome(t *testing.T) {
	tests := []struct {
		status  record.Status
		toolErr int
		want    string
		counted bool
	}{
		{record.StatusDone, 0, runOK, true},
		{record.StatusDone, 2, runToolError, true},
		{record.StatusFailed, 0, runFailed, true},
		{record.StatusBudgetExceeded, 0, runBudgetExceeded, true},
		{record.StatusCancelled, 0, "", false},
		{record.StatusBlocked, 0, "", false},
		{record.StatusPaused, 1, "", false},
	}
	for _, tt := range tests {
		var st record.State
		st.Status, st.RunToolErrors = tt.status, tt.toolErr
		if got, ok := runOutcome(st); got != tt.want || ok != tt.counted {
			t.Errorf("%s with %d tool errors: %q %v, want %q %v", tt.status, tt.toolErr, got, ok, tt.want, tt.counted)
		}
	}
}
