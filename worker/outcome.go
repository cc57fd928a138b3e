package worker

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetloop/jetloop/record"
)

// Outcomes of a finished run, as runs_total and the rollout guard count
// them.
const (
	runOK             = "ok"
	runToolError      = "tool_error"
	runFailed         = "failed"
	runBudgetExceeded = "budget_exceeded"
)

// recordTimeout bounds counting a run for the rollout guard.
const recordTimeout = 5 * time.Second

// counter is vec's series of the session's agent and version, and rest
// (see Metrics.counter).
func (s *session) counter(vec *prometheus.CounterVec, rest ...string) prometheus.Counter {
	return s.w.m.counter(vec, s.r.ref.Agent, s.st.DefinitionVersion, rest...)
}

// runOutcome classifies a run that ended in st: a run fails when it ends
// failed or budget_exceeded or when one of its tool calls returned an
// error. ok is false for a run that did not end (blocked, paused: it goes
// on later) or that a person ended (cancelled), which say nothing of the
// version.
func runOutcome(st record.State) (outcome string, ok bool) {
	switch st.Status {
	case record.StatusDone, record.StatusIdle:
		if st.RunToolErrors > 0 {
			return runToolError, true
		}
		return runOK, true
	case record.StatusFailed:
		return runFailed, true
	case record.StatusBudgetExceeded:
		return runBudgetExceeded, true
	}
	return "", false
}

// runEnded counts a run that ended in st, in runs_total and, through
// VersionedDefinitions, for the rollout guard, which may roll the canary
// back. The session's state is written already; a count that fails is
// logged and lost (the guard's counts are statistics, counted at most
// once).
func (s *session) runEnded(ctx context.Context, st record.State) {
	outcome, ok := runOutcome(st)
	if !ok {
		return
	}
	agent := s.r.ref.Agent
	s.w.m.counter(s.w.m.runs, agent, st.DefinitionVersion, outcome).Inc()
	vd, versioned := s.w.cfg.Definitions.(VersionedDefinitions)
	if !versioned || st.DefinitionVersion == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	rr, err := vd.RecordRun(rctx, agent, st.DefinitionVersion, outcome != runOK)
	if err != nil {
		s.log.Warn("run not counted for the rollout guard", "version", st.DefinitionVersion, "outcome", outcome, "err", err)
		return
	}
	if rr.RolledBack != nil {
		rec := rr.RolledBack.Record
		s.log.Warn("rollout rolled back by its guard", "canary", rec.Ended.Canary, "stable", rec.Ended.Stable,
			"serving", rec.Version, "why", rr.Reason)
	}
}
