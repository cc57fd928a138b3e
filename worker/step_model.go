package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/record"
)

// writeIntent commits the intent of a new step.
func (s *session) writeIntent(ctx context.Context, next record.State) error {
	next.Updated = time.Now().UTC()
	rev, err := s.w.store.Update(ctx, s.r.ref, next, s.rev)
	if err != nil {
		return err
	}
	s.st, s.rev = next, rev
	s.r.observe(next)
	return nil
}

// modelStep makes one model call: intent, call, settlement. With rec it
// makes again the call of an earlier worker's intent.
func (s *session) modelStep(ctx context.Context, rec *record.Intent) error {
	now := time.Now().UTC()
	if limit, reason := budget(s.st, record.StepModel, now); limit != "" && (rec == nil || limit != "max_turns") {
		next := s.st.Clone()
		if rec != nil {
			next.UnknownUsage++
		}
		return s.stopBudget(ctx, next, nil, limit, reason)
	}
	var in record.Intent
	if rec == nil {
		next := s.st.Clone()
		next.Turns++
		next.RunTurns++
		in = record.Intent{Kind: record.StepModel, Step: next.Steps + 1, Turn: next.Turns, Entry: next.NextEntry, Owner: s.w.cfg.ID, Started: now}
		next.Pending = &in
		s.trace(ctx, TracePoint{Phase: PhaseIntent, Kind: record.StepModel, Step: in.Step})
		if err := s.writeIntent(ctx, next); err != nil {
			return err
		}
	} else {
		in = *rec
		if in.Attempt >= s.w.cfg.MaxRecoveries {
			return s.failStep(ctx, fmt.Sprintf("model call interrupted %d times; not made again", in.Attempt+1))
		}
		s.w.m.recoveries.WithLabelValues(string(record.StepModel), "remade").Inc()
		next := s.st.Clone()
		next.Pending.Attempt++
		next.Pending.Owner = s.w.cfg.ID
		next.UnknownUsage++
		if err := s.writeIntent(ctx, next); err != nil {
			return err
		}
		in = *next.Pending
	}
	s.trace(ctx, TracePoint{Phase: PhaseEffect, Kind: record.StepModel, Step: in.Step, Recovery: rec != nil})
	log := s.log.With("turn", in.Turn, "step", in.Step)

	req := buildRequest(s.def, s.w.toolOf, s.log_)
	mctx, cancel := s.stepContext(ctx)
	resp, err := s.model.Complete(mctx, req)
	abort := aborted(mctx)
	deadline := mctx.Err() != nil && ctx.Err() == nil && abort == nil
	cancel()
	if ctx.Err() != nil {
		// Lease lost or shutting down: the intent stays for recovery.
		return context.Cause(ctx)
	}
	if abort != nil {
		log.Info("model call aborted", "why", abort)
		return abort
	}
	s.trace(ctx, TracePoint{Phase: PhaseSettle, Kind: record.StepModel, Step: in.Step, Recovery: rec != nil})
	s.w.m.stepSeconds.WithLabelValues(s.labels(string(record.StepModel))...).Observe(time.Since(in.Started).Seconds())
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
		log.Warn("model call failed", "err", err)
		s.w.m.steps.WithLabelValues(s.labels(string(record.StepModel), "error")...).Inc()
		return s.failStep(ctx, "model call failed: "+err.Error())
	}

	next := s.st.Clone()
	next.Pending = nil
	next.Steps = in.Step
	next.Usage = next.Usage.Add(resp.Usage)
	next.RunUsage = next.RunUsage.Add(resp.Usage)
	if rec != nil {
		next.UnknownUsage = s.st.UnknownUsage
	}
	var entries []record.Entry
	if rec != nil {
		e := s.entry(&next, record.KindSystem)
		e.Turn = in.Turn
		e.Text = fmt.Sprintf("model call of step %d was interrupted and made again; the interrupted call may have been billed, its usage is unknown", in.Step)
		entries = append(entries, e)
	}
	a := s.entry(&next, record.KindAssistant)
	a.Turn = in.Turn
	a.Text = cut(resp.Text, record.MaxEntryBytes)
	u := resp.Usage
	a.Usage, a.Model = &u, resp.Model
	entries = append(entries, a)
	next.Calls = nil
	ids := s.callIDs(resp.ToolCalls, next.NextEntry)
	for i, c := range resp.ToolCalls {
		e := s.entry(&next, record.KindToolCall)
		e.Turn = in.Turn
		id := ids[i]
		args := c.Args
		if len(args) == 0 || !json.Valid(args) {
			args = json.RawMessage(`{}`)
		}
		e.Name, e.CallID, e.Args = c.Name, id, args
		entries = append(entries, e)
		next.Calls = append(next.Calls, record.CallRef{ID: id, Name: c.Name, Entry: e.ID})
	}
	if len(next.Calls) == 0 {
		next.SetStatus(record.StatusDone, "", time.Now().UTC())
	}
	if err := s.commit(ctx, entries, next); err != nil {
		return err
	}
	s.w.m.steps.WithLabelValues(s.labels(string(record.StepModel), "ok")...).Inc()
	log.Info("model step settled", "tool_calls", len(next.Calls), "input_tokens", resp.Usage.InputTokens, "output_tokens", resp.Usage.OutputTokens, "status", next.Status)
	s.trace(ctx, TracePoint{Phase: PhaseSettled, Kind: record.StepModel, Step: in.Step, Recovery: rec != nil})
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
