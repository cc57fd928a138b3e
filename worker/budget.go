package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/jetloop/jetloop/record"
)

// budget returns the limit of the current run reached before a step of
// kind, and why.
func budget(st record.State, kind record.StepKind, now time.Time) (limit, reason string) {
	l := st.Limits
	switch {
	case kind == record.StepModel && l.MaxTurns > 0 && st.RunTurns >= l.MaxTurns:
		return "max_turns", fmt.Sprintf("max_turns %d reached in this run", l.MaxTurns)
	case l.MaxTokens > 0 && st.RunUsage.Tokens() >= l.MaxTokens:
		return "max_tokens", fmt.Sprintf("max_tokens %d reached in this run (%d used)", l.MaxTokens, st.RunUsage.Tokens())
	case l.MaxCostUSD > 0 && st.RunUsage.CostUSD >= l.MaxCostUSD:
		return "max_cost_usd", fmt.Sprintf("max_cost_usd %.4f reached in this run (%.4f spent)", l.MaxCostUSD, st.RunUsage.CostUSD)
	case l.Deadline > 0 && !st.RunStarted.IsZero() && now.Sub(st.RunStarted) >= l.Deadline.D():
		return "deadline", fmt.Sprintf("deadline %s passed (run started %s)", l.Deadline.D(), st.RunStarted.Format(time.RFC3339))
	}
	if at := runDeadline(st); !at.IsZero() && !now.Before(at) {
		return "deadline", fmt.Sprintf("the deadline of the delegating run passed (%s)", at.Format(time.RFC3339))
	}
	return "", ""
}

// stopBudget ends the run as budget_exceeded: a system entry with the
// reason, and error results for the calls that will not run. The session
// is not final: its next event starts a run with a fresh budget.
func (s *session) stopBudget(ctx context.Context, next record.State, entries []record.Entry, limit, reason string) error {
	e := s.entry(&next, record.KindSystem)
	e.Text = "budget exceeded: " + reason
	entries = append(entries, e)
	entries = append(entries, s.closeOpen(&next, "budget exceeded ("+reason+")")...)
	next.SetStatus(record.StatusBudgetExceeded, reason, time.Now().UTC())
	s.w.m.counter(s.w.m.budgetStops, s.r.ref.Agent, next.DefinitionVersion, limit).Inc()
	s.log.Warn("budget exceeded", "limit", limit, "reason", reason)
	return s.commit(ctx, entries, next)
}

// stepContext is the context of a step's effect: bounded by the run's
// deadline, and aborted by a cancel or a newer tick (see aborted).
// Without a deadline it is the effect's context alone: a context of its
// own would only cost its allocation and its parent's bookkeeping.
func (s *session) stepContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ectx, done := s.r.effectContext(ctx)
	deadline := s.deadline()
	if deadline.IsZero() {
		return ectx, done
	}
	dctx, cancel := context.WithDeadline(ectx, deadline)
	return dctx, func() { cancel(); done() }
}

// deadline is the earlier of the run's deadline and its tick's timeout;
// zero for neither.
func (s *session) deadline() time.Time {
	deadline := runDeadline(s.st)
	if t := s.st.Tick; t != nil && t.Result == "" && !t.Deadline.IsZero() && (deadline.IsZero() || t.Deadline.Before(deadline)) {
		deadline = t.Deadline
	}
	return deadline
}
