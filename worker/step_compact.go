package worker

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/tracing"
	"github.com/jetloop/jetloop/window"
)

// A compaction is a model step like any other (intent, call,
// settlement, recovery) whose answer is a summary entry standing for the
// turns its plan covers. Its intent reserves the summary's id and names
// what it covers (record.Intent.Compaction), so recovery by DESIGN §8's
// table adopts a summary stored under the reserved id, or makes the same
// compaction again, from the same entries. The transcript keeps every
// entry; the state's window moves past the covered ones. A compaction is
// not a turn, but its tokens and cost count against the run's budget. Its
// intent is always written by itself, never merged into the settlement
// before it.

// compactStep compacts the context by plan before the next model call.
func (s *session) compactStep(ctx context.Context, plan record.Compaction) error {
	now := time.Now().UTC()
	if limit, reason := budget(s.st, record.StepModel, now); limit != "" {
		return s.stopBudget(ctx, s.st.Clone(), nil, limit, reason)
	}
	next := s.st.Clone()
	cp := plan
	in := record.Intent{Kind: record.StepModel, Step: next.Steps + 1, Turn: next.Turns, Entry: next.NextEntry,
		Owner: s.w.cfg.ID, Started: now, Compaction: &cp}
	next.Pending = &in
	s.trace(ctx, TracePoint{Phase: PhaseIntent, Kind: record.StepModel, Step: in.Step, Compact: true})
	if err := s.writeIntent(ctx, next); err != nil {
		return err
	}
	return s.callCompact(ctx, in, false)
}

// remakeCompaction makes again the compaction of an intent recovery found
// without a settlement (record.Remake): a system entry under the reserved
// id says the interrupted call may have been billed, in the write that
// reserves the next id for the summary.
func (s *session) remakeCompaction(ctx context.Context, p record.Intent) error {
	if limit, reason := budget(s.st, record.StepModel, time.Now()); limit != "" && limit != "max_turns" {
		next := s.st.Clone()
		next.UnknownUsage++
		return s.stopBudget(ctx, next, nil, limit, reason)
	}
	if p.Attempt >= s.w.cfg.MaxRecoveries {
		return s.failStep(ctx, fmt.Sprintf("compaction interrupted %d times; not made again", p.Attempt+1))
	}
	next := s.st.Clone()
	e := s.entry(&next, record.KindSystem)
	e.Turn = p.Turn
	e.Text = fmt.Sprintf("compaction of step %d was interrupted and made again; the interrupted call may have been billed, its usage is unknown", p.Step)
	next.Pending.Attempt++
	next.Pending.Owner = s.w.cfg.ID
	next.Pending.Entry = next.NextEntry
	next.UnknownUsage++
	if err := s.commit(ctx, []record.Entry{e}, next); err != nil {
		return err
	}
	return s.callCompact(ctx, *s.st.Pending, true)
}

// callCompact asks the model for the summary of intent in, which is
// durable, and settles it.
func (s *session) callCompact(ctx context.Context, in record.Intent, recovery bool) (err error) {
	ctx, span := s.modelSpan(ctx, in, recovery)
	span.SetAttributes(attribute.Bool("jetloop.compaction", true))
	defer func() { endStep(span, err) }()
	s.trace(ctx, TracePoint{Phase: PhaseEffect, Kind: record.StepModel, Step: in.Step, Recovery: recovery, Compact: true})
	log := s.log.With("turn", in.Turn, "step", in.Step)
	plan := *in.Compaction
	// The summarised context is for the call that follows.
	win, _, err := s.window(ctx, s.st.Turns+1)
	if err != nil {
		return err
	}
	req := window.CompactRequest(win, plan)
	mctx, cancel := s.stepContext(ctx)
	resp, err := s.model.Complete(model.WithAgent(mctx, s.r.ref.Agent), req)
	if err == nil {
		// Billed, whatever follows.
		s.addSpend(ctx, in.Step, in.Attempt, resp.Usage.CostUSD)
		span.SetAttributes(tracing.GenAIRespModel.String(resp.Model), tracing.GenAIInputTokens.Int64(resp.Usage.InputTokens),
			tracing.GenAIOutputTokens.Int64(resp.Usage.OutputTokens), tracing.AttrCostUSD.Float64(resp.Usage.CostUSD))
	}
	abort := aborted(mctx)
	deadline := mctx.Err() != nil && ctx.Err() == nil && abort == nil
	cancel()
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if abort != nil {
		log.Info("compaction aborted", "why", abort)
		return abort
	}
	s.trace(ctx, TracePoint{Phase: PhaseSettle, Kind: record.StepModel, Step: in.Step, Recovery: recovery, Compact: true})
	s.observeStep("compact", time.Since(in.Started).Seconds())
	if deadline {
		_, reason := budget(s.st, record.StepModel, time.Now())
		if reason == "" {
			reason = "deadline passed during a compaction"
		}
		next := s.st.Clone()
		next.UnknownUsage++
		return s.stopBudget(ctx, next, nil, "deadline", reason)
	}
	if err != nil {
		log.Warn("compaction failed", "err", err)
		s.countStep("compact", "error")
		return s.failStep(ctx, "compaction failed: "+err.Error())
	}
	next := s.st.Clone()
	sum := window.SummaryEntry(in.Entry, in.Turn, plan, resp)
	sum.Time = time.Now().UTC()
	sum.Step, sum.Attempt, sum.Entries = in.Step, in.Attempt, 1
	settleCompaction(&next, in, sum)
	if err := s.commit(ctx, []record.Entry{sum}, next); err != nil {
		return err
	}
	s.countStep("compact", "ok")
	s.w.m.compactions.Inc()
	log.Info("context compacted", "summary", sum.ID, "covers_from", plan.HeadEnd, "covers_to", plan.Keep-1,
		"input_tokens", resp.Usage.InputTokens, "output_tokens", resp.Usage.OutputTokens)
	s.trace(ctx, TracePoint{Phase: PhaseSettled, Kind: record.StepModel, Step: in.Step, Recovery: recovery, Compact: true})
	return nil
}

// settleCompaction makes next the state the settlement of compaction
// intent in with summary sum writes: the intent cleared, the usage
// counted, the window moved to the summary.
func settleCompaction(next *record.State, in record.Intent, sum record.Entry) {
	next.Pending = nil
	next.Steps = in.Step
	next.NextEntry = sum.ID + 1
	if sum.Usage != nil {
		next.Usage = next.Usage.Add(*sum.Usage)
		next.RunUsage = next.RunUsage.Add(*sum.Usage)
	}
	plan := *in.Compaction
	next.HeadEnd, next.Summary, next.From, next.Summarised = plan.HeadEnd, sum.ID, plan.Keep, plan.Answers
}

// adoptSummary settles a compaction whose summary a settlement stored
// under the reserved id before its state was written (record.Adopt): the
// summary is not paid for twice.
func (s *session) adoptSummary(ctx context.Context, p record.Intent, sum record.Entry) error {
	if sum.Kind != record.KindSummary {
		return fmt.Errorf("worker: session %s: entry %d reserved for a summary holds a %s", s.r.ref, sum.ID, sum.Kind)
	}
	next := s.st.Clone()
	settleCompaction(&next, p, sum)
	// The entry is there already: its create finds it.
	if err := s.commit(ctx, []record.Entry{sum}, next); err != nil {
		return err
	}
	if sum.Usage != nil {
		// Added when the summary came, unless the worker died first.
		s.addSpend(ctx, p.Step, sum.Attempt, sum.Usage.CostUSD)
	}
	s.countStep("compact", "adopted")
	s.log.Info("compaction settled with the summary stored before the interruption", "step", p.Step, "summary", sum.ID)
	s.trace(ctx, TracePoint{Phase: PhaseSettled, Kind: record.StepModel, Step: p.Step, Recovery: true, Compact: true})
	return nil
}

// compacts reports whether the session's context policy compacts at all:
// without compact_at_tokens no context is built to ask (window.Due).
func (s *session) compacts() bool {
	return s.def != nil && s.def.Context != nil && s.def.Context.CompactAtTokens > 0
}

// compactionDue reports whether the model call after a write of next
// with entries would compact first: merging its intent into that write
// would skip the compaction.
func (s *session) compactionDue(ctx context.Context, next record.State, entries []record.Entry) bool {
	if !s.compacts() {
		return false
	}
	saved, savedLive := s.st, s.live
	s.st, s.live = next, append(append([]record.Entry(nil), s.live...), entries...)
	// Built whole: the state and entries are not yet written, and the
	// session's Builder keeps what the next call's request goes on from.
	in, err := s.windowInput(ctx, next.Turns+1)
	s.st, s.live = saved, savedLive
	if err != nil {
		// Decided at the step, as without merging.
		return true
	}
	c := window.BuildRequest(in)
	_, due := window.Due(in, c)
	return due
}
