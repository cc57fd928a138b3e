package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/ledger"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools"
)

// One ledger across a delegation tree: every run that delegates, or was
// delegated to, has an account in jl_ledger (package ledger) with its
// ceiling (its turn, token and cost limits) and the usage of each session
// below it. A session of a tree reports its run's usage after every model
// step to its own account and to its ancestors' (report), and before
// every step checks them all (treeBudget): the whole tree stops when any
// ceiling above a session is reached, whichever workers run it. A child's
// own limits are carved out of what its parent had left when it started
// (carve), so it can never ask for more.

// runID names the session's current run in the ledger.
func (s *session) runID() string { return strconv.Itoa(s.st.Runs) }

// delegatedRun reports whether the current run is the one a delegate
// call started, which its carved budget binds and which answers it.
func (s *session) delegatedRun() bool {
	return s.st.Delegation != nil && s.st.Delegation.Run == s.st.Runs
}

// ledgerCeiling is the ledger's view of a run's limits.
func ledgerCeiling(b policies.Budget) ledger.Ceiling {
	return ledger.Ceiling{MaxTurns: b.MaxTurns, MaxTokens: b.MaxTokens, MaxCostUSD: b.MaxCostUSD}
}

// ownPart is what st's run consumed, as a part of an account.
func (s *session) ownPart(st record.State) ledger.Part {
	return ledger.Part{Step: st.Steps, Usage: ledger.Usage{Turns: st.RunTurns, InputTokens: st.RunUsage.InputTokens,
		OutputTokens: st.RunUsage.OutputTokens, CostUSD: st.RunUsage.CostUSD}}
}

// deadlineAt is the run's deadline as a time: its own (from its start)
// or its delegation's, whichever is sooner; zero when it has none.
func (s *session) deadlineAt() time.Time {
	return runDeadline(s.st)
}

func runDeadline(st record.State) time.Time {
	var at time.Time
	if d := st.Limits.Deadline.D(); d > 0 && !st.RunStarted.IsZero() {
		at = st.RunStarted.Add(d)
	}
	if dl := st.Delegation; dl != nil && dl.Run == st.Runs && !dl.DeadlineAt.IsZero() && (at.IsZero() || dl.DeadlineAt.Before(at)) {
		at = dl.DeadlineAt
	}
	return at
}

// maxHops is the deepest level the run's delegations may reach: its own
// max_hops (DefaultMaxHops when it sets none), and no deeper than its
// tree's.
func (s *session) maxHops() int {
	own := s.st.Limits.MaxHops
	if own <= 0 {
		own = policies.DefaultMaxHops
	}
	if dl := s.st.Delegation; dl != nil && s.delegatedRun() && dl.MaxHops < own {
		return dl.MaxHops
	}
	return own
}

// carve is the budget of a child: what it asks for, or what the run has
// left (its limits less what its tree used), and never more than that.
func carve(limits policies.Budget, used ledger.Usage, ask tools.DelegatedBudget, deadline, now time.Time) (events.Budget, string) {
	var b events.Budget
	var why []string
	if l := limits.MaxTurns; l > 0 {
		left := l - used.Turns
		switch {
		case left <= 0:
			why = append(why, fmt.Sprintf("no turns are left of this run's max_turns %d", l))
		case ask.MaxTurns > left:
			why = append(why, fmt.Sprintf("budget.max_turns %d is more than the %d turns this run has left", ask.MaxTurns, left))
		case ask.MaxTurns > 0:
			b.MaxTurns = ask.MaxTurns
		default:
			b.MaxTurns = left
		}
	} else {
		b.MaxTurns = ask.MaxTurns
	}
	if l := limits.MaxTokens; l > 0 {
		left := l - used.Tokens()
		switch {
		case left <= 0:
			why = append(why, fmt.Sprintf("no tokens are left of this run's max_tokens %d", l))
		case ask.MaxTokens > left:
			why = append(why, fmt.Sprintf("budget.max_tokens %d is more than the %d tokens this run has left", ask.MaxTokens, left))
		case ask.MaxTokens > 0:
			b.MaxTokens = ask.MaxTokens
		default:
			b.MaxTokens = left
		}
	} else {
		b.MaxTokens = ask.MaxTokens
	}
	if l := limits.MaxCostUSD; l > 0 {
		left := l - used.CostUSD
		switch {
		case left <= 0:
			why = append(why, fmt.Sprintf("nothing is left of this run's max_cost_usd %.4f", l))
		case ask.MaxCostUSD > left:
			why = append(why, fmt.Sprintf("budget.max_cost_usd %.4f is more than the %.4f this run has left", ask.MaxCostUSD, left))
		case ask.MaxCostUSD > 0:
			b.MaxCostUSD = ask.MaxCostUSD
		default:
			b.MaxCostUSD = left
		}
	} else {
		b.MaxCostUSD = ask.MaxCostUSD
	}
	b.DeadlineAt = deadline
	switch {
	case !deadline.IsZero() && !now.Before(deadline):
		why = append(why, "this run's deadline has passed")
	case ask.Deadline > 0 && !deadline.IsZero() && now.Add(ask.Deadline).After(deadline):
		why = append(why, fmt.Sprintf("budget.deadline %s is later than this run's deadline, %s from now", ask.Deadline, deadline.Sub(now).Round(time.Second)))
	case ask.Deadline > 0:
		b.DeadlineAt = now.Add(ask.Deadline)
	}
	if len(why) > 0 {
		return events.Budget{}, strings.Join(why, "; ")
	}
	return b, ""
}

// carved is limits bound by a delegation's budget: each limit the lower
// of the two (a zero is no limit).
func carved(limits policies.Budget, b events.Budget) policies.Budget {
	lower := func(a, b int64) int64 {
		switch {
		case a == 0:
			return b
		case b == 0 || a < b:
			return a
		}
		return b
	}
	limits.MaxTurns = int(lower(int64(limits.MaxTurns), int64(b.MaxTurns)))
	limits.MaxTokens = lower(limits.MaxTokens, b.MaxTokens)
	if b.MaxCostUSD > 0 && (limits.MaxCostUSD == 0 || b.MaxCostUSD < limits.MaxCostUSD) {
		limits.MaxCostUSD = b.MaxCostUSD
	}
	return limits
}

// report tells the run's account and its ancestors' what the run has
// consumed so far. A report that fails is logged: the next one carries
// the same totals (they are cumulative).
func (s *session) report(ctx context.Context) {
	if s.st.Ledger == "" {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	part := s.ownPart(s.st)
	me := s.r.ref.String()
	for _, a := range s.accounts() {
		if _, err := s.w.ledger.Report(rctx, a.ref, a.run, me, part); err != nil {
			if errors.Is(err, ledger.ErrOtherRun) || errors.Is(err, ledger.ErrNotFound) {
				continue // that run has ended
			}
			s.w.m.ledgerReports.WithLabelValues("failed").Inc()
			s.log.Warn("usage not reported to the delegation ledger; the next report carries it", "account", a.ref.String(), "err", err)
			continue
		}
		s.w.m.ledgerReports.WithLabelValues("ok").Inc()
	}
}

// account names one run's account.
type account struct {
	ref streams.SessionRef
	run string
}

// accounts are the accounts the run reports to: its own, then its
// ancestors' from the parent up.
func (s *session) accounts() []account {
	out := []account{{ref: s.r.ref, run: s.st.Ledger}}
	dl := s.st.Delegation
	if dl == nil || !s.delegatedRun() {
		return out
	}
	for i := len(dl.Path) - 1; i >= 0; i-- {
		h := dl.Path[i]
		agent, session, _ := strings.Cut(h.Session, "/")
		ref, err := streams.NewSessionRef(agent, session)
		if err != nil {
			continue
		}
		out = append(out, account{ref: ref, run: h.Run})
	}
	return out
}

// treeBudget returns the limit reached by the run's tree before a step of
// kind: the ceiling of its own account (what it and its descendants used)
// or of an ancestor's. Accounts of runs that have ended are passed over.
func (s *session) treeBudget(ctx context.Context, kind record.StepKind) (limit, reason string, err error) {
	if s.st.Ledger == "" {
		return "", "", nil
	}
	for i, a := range s.accounts() {
		acct, err := s.w.ledger.Get(ctx, a.ref)
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			continue
		case err != nil:
			return "", "", err
		case acct.Run != a.run:
			continue
		}
		limit, why := acct.Ceiling.Reached(acct.Total(), kind == record.StepModel)
		if limit == "" {
			continue
		}
		if i == 0 {
			return limit, fmt.Sprintf("%s of this run and the sessions it delegated to: %s", limit, why), nil
		}
		return limit, fmt.Sprintf("%s of %s, which this session's delegation tree is part of: %s", limit, a.ref, why), nil
	}
	return "", "", nil
}

// limitReached is the budget check before a step: the run's own limits,
// then its tree's. remade marks a model call made again in recovery,
// whose turn is counted already.
func (s *session) limitReached(ctx context.Context, kind record.StepKind, now time.Time, remade bool) (limit, reason string, err error) {
	if limit, reason := budget(s.st, kind, now); limit != "" && !(remade && limit == "max_turns") {
		return limit, reason, nil
	}
	limit, reason, err = s.treeBudget(ctx, kind)
	if err != nil {
		return "", "", fmt.Errorf("worker: read the delegation ledger of %s: %w", s.r.ref, err)
	}
	if remade && limit == "max_turns" {
		return "", "", nil
	}
	return limit, reason, nil
}
