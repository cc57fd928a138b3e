package worker

import (
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
)

// The version label keeps each agent's newest versionWindow versions and
// folds older ones into "older", removing their series, so it stays
// bounded however often an agent is applied.
func TestVersionLabelIsBounded(t *testing.T) {
	m := NewMetrics()
	for v := uint64(1); v <= 20; v++ {
		m.counter(m.runs, "a", v, runOK).Inc()
		m.counter(m.runs, "b", 1, runOK).Inc()
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

// A session's step series are looked up once and kept, until a version's
// series are removed: a step after the removal counts in the series its
// version has then ("older" here), not in the one taken out.
func TestStepSeriesFollowRemovals(t *testing.T) {
	m := NewMetrics()
	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	ref, _ := streams.NewSessionRef("a", "s")
	s := &session{w: &Worker{m: m}, r: &runner{ref: ref}}
	s.st.DefinitionVersion = 1
	s.countStep("model", "ok")
	s.countStep("model", "ok")
	s.observeStep("model", 0.5)
	counts := func() map[string]float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			for _, s := range mf.GetMetric() {
				key := mf.GetName()
				for _, l := range s.GetLabel() {
					key += " " + l.GetName() + "=" + l.GetValue()
				}
				if c := s.GetCounter(); c != nil {
					out[key] = c.GetValue()
				}
				if h := s.GetHistogram(); h != nil {
					out[key] = float64(h.GetSampleCount())
				}
			}
		}
		return out
	}
	const v1 = "jetloop_worker_steps_total agent=a kind=model outcome=ok version=1"
	const older = "jetloop_worker_steps_total agent=a kind=model outcome=ok version=older"
	if got := counts(); got[v1] != 2 || got["jetloop_worker_step_seconds agent=a kind=model version=1"] != 1 {
		t.Fatalf("series %v, want 2 model steps and 1 duration at version 1", got)
	}
	// A newer version takes version 1 out of the window, and its series
	// out of the vectors.
	m.version("a", 1+versionWindow)
	s.countStep("model", "ok")
	if got := counts(); got[older] != 1 || got[v1] != 0 {
		t.Fatalf("series %v, want the step after the removal counted as older", got)
	}
}

// Sessions counting steps while their agent's versions move on leave no
// series of a removed version behind: each label is looked up under the
// lock its removal takes, so a lookup made from a label taken before a
// removal cannot bring the removed series back after it.
func TestStepSeriesNotBroughtBackByARemoval(t *testing.T) {
	m := NewMetrics()
	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	const sessions, steps, perVersion = 8, 20000, 5
	var wg sync.WaitGroup
	for g := range sessions {
		wg.Go(func() {
			ref, _ := streams.NewSessionRef("a", fmt.Sprintf("s%d", g))
			s := &session{w: &Worker{m: m}, r: &runner{ref: ref}}
			for i := range steps {
				// Each session a version ahead of the one before it, so
				// some apply a version while others count at an old one.
				s.st.DefinitionVersion = uint64(1 + i/perVersion + g)
				s.countStep("model", "ok")
				s.observeStep("model", 0.1)
				m.counter(m.runs, "a", s.st.DefinitionVersion, runOK).Inc()
			}
		})
	}
	wg.Wait()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	newest := 1 + (steps-1)/perVersion + sessions - 1
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() != "version" || l.GetValue() == "older" {
					continue
				}
				if v, _ := strconv.Atoi(l.GetValue()); v+versionWindow <= newest {
					t.Errorf("%s keeps a series of version %d, out of the window of the newest, %d", mf.GetName(), v, newest)
				}
			}
		}
	}
}
