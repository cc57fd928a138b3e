package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/tracing"
)

// writeIntent commits the intent of a new step, by itself: the step's
// first write. (A step whose intent rides on the settlement before it
// skips it: see mergeNext.)
func (s *session) writeIntent(ctx context.Context, next record.State) error {
	next.Updated = time.Now().UTC()
	rev, err := s.w.store.Update(ctx, s.r.ref, next, s.rev)
	if err != nil {
		return err
	}
	s.st, s.rev = next, rev
	s.fresh = 0
	s.r.observe(next)
	return nil
}

// modelIntent puts the intent of a model call in next: the turn it
// opens, and the entry id its answer will start at.
func (s *session) modelIntent(next *record.State, now time.Time) record.Intent {
	next.Turns++
	next.RunTurns++
	in := record.Intent{Kind: record.StepModel, Step: next.Steps + 1, Turn: next.Turns, Entry: next.NextEntry, Owner: s.w.cfg.ID, Started: now}
	next.Pending = &in
	return in
}

// modelStep makes one model call: intent, call, settlement.
func (s *session) modelStep(ctx context.Context) error {
	now := time.Now().UTC()
	if limit, reason, err := s.limitReached(ctx, record.StepModel, now, false); err != nil {
		return err
	} else if limit != "" {
		return s.stopBudget(ctx, s.st.Clone(), nil, limit, reason)
	}
	if limit, reason, err := s.ceiling(ctx, s.st); err != nil {
		return err
	} else if limit != "" {
		return s.stopBudget(ctx, s.st.Clone(), nil, limit, reason)
	}
	next := s.st.Clone()
	in := s.modelIntent(&next, now)
	s.trace(ctx, TracePoint{Phase: PhaseIntent, Kind: record.StepModel, Step: in.Step})
	if err := s.writeIntent(ctx, next); err != nil {
		return err
	}
	return s.callModel(ctx, in, false)
}

// remakeModel makes again the model call of an intent recovery found
// without a settlement (record.Remake). The interrupted call may have
// been billed: a system entry says so, under the id the intent reserved,
// in the same write that reserves the next id for the call made again
// and counts the unknown usage.
func (s *session) remakeModel(ctx context.Context, p record.Intent) error {
	now := time.Now().UTC()
	// The turn is counted already: max_turns does not stop its remaking.
	if limit, reason, err := s.limitReached(ctx, record.StepModel, now, true); err != nil {
		return err
	} else if limit != "" {
		next := s.st.Clone()
		next.UnknownUsage++
		return s.stopBudget(ctx, next, nil, limit, reason)
	}
	if p.Attempt >= s.w.cfg.MaxRecoveries {
		return s.failStep(ctx, fmt.Sprintf("model call interrupted %d times; not made again", p.Attempt+1))
	}
	next := s.st.Clone()
	e := s.entry(&next, record.KindSystem)
	e.Turn = p.Turn
	e.Text = fmt.Sprintf("model call of step %d was interrupted and made again; the interrupted call may have been billed, its usage is unknown", p.Step)
	next.Pending.Attempt++
	next.Pending.Owner = s.w.cfg.ID
	next.Pending.Entry = next.NextEntry
	next.UnknownUsage++
	if err := s.commit(ctx, []record.Entry{e}, next); err != nil {
		return err
	}
	return s.callModel(ctx, *s.st.Pending, true)
}

// callModel makes the model call of intent in, which is durable, and
// settles its answer.
func (s *session) callModel(ctx context.Context, in record.Intent, recovery bool) (err error) {
	s.fresh = 0
	ctx, span := s.modelSpan(ctx, in, recovery)
	defer func() { endStep(span, err) }()
	s.trace(ctx, TracePoint{Phase: PhaseEffect, Kind: record.StepModel, Step: in.Step, Recovery: recovery})

	_, win, err := s.window(ctx, in.Turn)
	if err != nil {
		return err
	}
	req := win.Request
	req.RunTurn = s.st.RunTurns
	s.w.m.contextTokens.Observe(float64(win.Tokens))
	s.w.m.maskedResults.Add(float64(win.Masked))
	mctx, cancel := s.stepContext(ctx)
	resp, err := s.model.Complete(model.WithAgent(mctx, s.r.ref.Agent), req)
	if err == nil {
		// Billed, whatever follows.
		s.addSpend(ctx, in.Step, in.Attempt, resp.Usage.CostUSD)
		span.SetAttributes(tracing.GenAIRespModel.String(resp.Model), tracing.GenAIInputTokens.Int64(resp.Usage.InputTokens),
			tracing.GenAIOutputTokens.Int64(resp.Usage.OutputTokens), tracing.AttrCostUSD.Float64(resp.Usage.CostUSD),
			attribute.Int("jetloop.tool_calls", len(resp.ToolCalls)))
	}
	abort := aborted(mctx)
	deadline := mctx.Err() != nil && ctx.Err() == nil && abort == nil
	cancel()
	if ctx.Err() != nil {
		// Lease lost or shutting down: the intent stays for recovery.
		return context.Cause(ctx)
	}
	if abort != nil {
		s.log.Info("model call aborted", "turn", in.Turn, "step", in.Step, "why", abort)
		return abort
	}
	s.trace(ctx, TracePoint{Phase: PhaseSettle, Kind: record.StepModel, Step: in.Step, Recovery: recovery})
	s.observeStep(string(record.StepModel), time.Since(in.Started).Seconds())
	if deadline && s.st.TickExpired(time.Now()) {
		if _, reason := budget(s.st, record.StepModel, time.Now()); reason == "" {
			next := s.st.Clone()
			next.UnknownUsage++
			s.st = next
			return s.tickTimeout(ctx)
		}
	}
	if deadline {
		_, reason := budget(s.st, record.StepModel, time.Now())
		if reason == "" {
			reason = "deadline passed during a model call"
		}
		next := s.st.Clone()
		next.UnknownUsage++
		return s.stopBudget(ctx, next, nil, "deadline", reason)
	}
	if err == nil && len(resp.ToolCalls) > record.MaxToolCalls {
		err = fmt.Errorf("response has %d tool calls, max %d", len(resp.ToolCalls), record.MaxToolCalls)
	}
	if err != nil {
		s.log.Warn("model call failed", "turn", in.Turn, "step", in.Step, "err", err)
		s.countStep(string(record.StepModel), "error")
		return s.failStep(ctx, "model call failed: "+err.Error())
	}

	// The settlement: the answer under the id the intent reserved, its
	// tool calls after it, each tagged with the step and the attempt so
	// that recovery adopts the settlement only whole.
	next := s.st.Clone()
	a := s.entry(&next, record.KindAssistant)
	a.Turn = in.Turn
	a.Text = cut(resp.Text, record.MaxEntryBytes)
	u := resp.Usage
	a.Usage, a.Model = &u, resp.Model
	a.Step, a.Attempt, a.Entries = in.Step, in.Attempt, 1+len(resp.ToolCalls)
	entries := []record.Entry{a}
	ids := s.callIDs(resp.ToolCalls, next.NextEntry)
	for i, c := range resp.ToolCalls {
		e := s.entry(&next, record.KindToolCall)
		e.Turn = in.Turn
		args := c.Args
		if len(args) == 0 || !json.Valid(args) {
			args = json.RawMessage(`{}`)
		}
		e.Name, e.CallID, e.Args = c.Name, ids[i], args
		e.Step, e.Attempt = in.Step, in.Attempt
		entries = append(entries, e)
	}
	settleModel(&next, in, entries)
	s.calibrate(&next, win, resp.Usage)
	merged := s.mergeNext(ctx, &next, entries)
	if r := s.withReply(&next, a.Text); r != nil {
		merged = r.Step
	}
	if err := s.commit(ctx, entries, next); err != nil {
		return err
	}
	s.merged(merged)
	// The tree above learns what this step cost.
	s.report(ctx)
	s.countStep(string(record.StepModel), "ok")
	s.log.Info("model step settled", "turn", in.Turn, "step", in.Step, "tool_calls", len(next.Calls), "input_tokens", resp.Usage.InputTokens, "output_tokens", resp.Usage.OutputTokens, "estimated_tokens", win.Tokens, "masked", win.Masked, "status", next.Status)
	s.trace(ctx, TracePoint{Phase: PhaseSettled, Kind: record.StepModel, Step: in.Step, Recovery: recovery})
	return nil
}

// settleModel makes next the state that the settlement of model intent in
// with entries (its answer, then its tool calls) writes: the intent
// cleared, the usage counted, the answer's calls outstanding, and the
// run done when it has none.
func settleModel(next *record.State, in record.Intent, entries []record.Entry) {
	next.Pending = nil
	next.Steps = in.Step
	next.NextEntry = entries[len(entries)-1].ID + 1
	if u := entries[0].Usage; u != nil {
		next.Usage = next.Usage.Add(*u)
		next.RunUsage = next.RunUsage.Add(*u)
	}
	next.Calls = nil
	for _, e := range entries[1:] {
		if e.Kind == record.KindToolCall {
			next.Calls = append(next.Calls, record.CallRef{ID: e.CallID, Name: e.Name, Entry: e.ID})
		}
	}
	if len(next.Calls) == 0 {
		next.SetStatus(record.StatusDone, "", time.Now().UTC())
	}
}

// adoptModel settles model intent p with the answer a settlement stored
// whole before its state was written (record.Adopt): the answer is not
// paid for twice.
func (s *session) adoptModel(ctx context.Context, p record.Intent, stored []record.Entry) error {
	next := s.st.Clone()
	settleModel(&next, p, stored)
	merged := s.mergeNext(ctx, &next, stored)
	if r := s.withReply(&next, stored[0].Text); r != nil {
		merged = r.Step
	}
	// Its entries are there already: their creates find them.
	if err := s.commit(ctx, stored, next); err != nil {
		return err
	}
	s.merged(merged)
	if u := stored[0].Usage; u != nil {
		// Added when the answer came, unless the worker died first.
		s.addSpend(ctx, p.Step, stored[0].Attempt, u.CostUSD)
	}
	s.report(ctx)
	s.countStep(string(record.StepModel), "adopted")
	s.log.Info("model step settled with the answer stored before the interruption", "step", p.Step, "tool_calls", len(next.Calls), "status", next.Status)
	s.trace(ctx, TracePoint{Phase: PhaseSettled, Kind: record.StepModel, Step: p.Step, Recovery: true})
	return nil
}

// callIDs returns the ids of an answer's tool calls, whose entries will
// be numbered from first: the model's id where it is usable and unique (in
// the transcript and in the answer: the first call that uses it keeps
// it), else call_<entry> made unique against every id of the transcript
// and of the answer.
func (s *session) callIDs(calls []model.ToolCall, first uint64) []string {
	taken := make(map[string]bool, len(calls))
	keep := make([]bool, len(calls))
	for i, c := range calls {
		if c.ID != "" && len(c.ID) <= 128 && !s.calls[c.ID] && !taken[c.ID] {
			taken[c.ID], keep[i] = true, true
		}
	}
	ids := make([]string, len(calls))
	for i, c := range calls {
		if keep[i] {
			ids[i] = c.ID
			continue
		}
		id := fmt.Sprintf("call_%d", first+uint64(i))
		for n := 1; s.calls[id] || taken[id]; n++ {
			id = fmt.Sprintf("call_%d_%d", first+uint64(i), n)
		}
		taken[id] = true
		ids[i] = id
	}
	return ids
}
