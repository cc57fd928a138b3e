package worker

import (
	"context"
	"fmt"

	"github.com/jetloop/jetloop/record"
)

// recover resumes a step whose intent was written and whose settlement
// was not: it asks storage whether the settlement's entries are there
// under the ids the intent reserved, and acts by DESIGN §8's table
// (record.Recovery).
func (s *session) recover(ctx context.Context) error {
	if err := s.ensure(ctx); err != nil {
		return err
	}
	p := *s.st.Pending
	var call record.CallRef
	if p.Kind == record.StepTool {
		c, ok := outstanding(s.st, p.CallID)
		if !ok {
			// The call is not outstanding (cannot happen: settlement
			// removes both at once). Drop the intent rather than loop;
			// its step number is not given again.
			next := s.st.Clone()
			next.Pending = nil
			next.Steps = p.Step
			return s.commit(ctx, nil, next)
		}
		call = c
	}
	stored, err := s.w.store.Stored(ctx, s.r.ref, p)
	if err != nil {
		return err
	}
	tool, spec, found := toolsTool(nil), toolsSpec{}, false
	switch p.Kind {
	case record.StepTool:
		tool, spec, found = s.lookup(call.Name)
	case record.StepReply:
		if s.w.cfg.Reply != nil {
			tool, found = s.w.cfg.Reply, true
		}
	}
	act := record.Recovery(record.Pending{Kind: p.Kind, Stored: p.Declared(), Current: replayOf(tool, found), Found: stored != nil})
	s.log.Warn("recovering step with an intent and no settlement", "step", p.Step, "kind", p.Kind, "tool", p.Tool, "call", p.CallID, "attempt", p.Attempt, "previous_owner", p.Owner, "action", act)
	if act != record.Probe {
		// A probe counts its outcome (probe_found, probe_not_found,
		// probe_failed, probe_later).
		s.w.m.recoveries.WithLabelValues(string(p.Kind), string(act)).Inc()
	}
	if p.Kind == record.StepTool && act != record.Adopt {
		// The call's processes may outlive a worker that died with their
		// reaper, and this worker may have swept before that one died:
		// sweep again, so that the call is not settled, probed or run
		// again while it still runs here.
		if err := s.w.sweep(ctx); err != nil {
			return err
		}
	}
	if p.Kind == record.StepModel && p.Compaction != nil {
		// A compaction is a model call whose answer is a summary.
		switch act {
		case record.Adopt:
			return s.adoptSummary(ctx, p, stored[0])
		case record.Remake:
			return s.remakeCompaction(ctx, p)
		}
	}
	if p.Kind == record.StepReply {
		switch act {
		case record.Adopt:
			return s.adoptReply(ctx, p, stored[0])
		case record.Probe:
			return s.replyStep(ctx, p, true)
		}
		return s.settleReply(ctx, p, what(p)+" post interrupted"+mayHaveRun)
	}
	switch act {
	case record.Adopt:
		if p.Kind == record.StepModel {
			return s.adoptModel(ctx, p, stored)
		}
		return s.adoptTool(ctx, p, stored[0])
	case record.Remake:
		return s.remakeModel(ctx, p)
	case record.Rerun:
		return s.rerunTool(ctx, call, p, tool, spec)
	case record.Probe:
		return s.probeTool(ctx, call, p, tool, spec)
	case record.Synthetic:
		s.log.Warn("tool call interrupted and not replay-safe: settling a synthetic error result", "tool", call.Name, "call", call.ID)
		return s.settleResult(ctx, call, p, interruptedText, true, "")
	}
	return fmt.Errorf("worker: session %s: pending step of kind %q: no recovery (%s)", s.r.ref, p.Kind, act)
}

// adoptStored settles an interrupted step whose settlement is stored
// whole (record.Adopt), before anything else happens at the boundary (a
// control applied first would write over the reserved ids). It reports
// whether it did; without a stored settlement the step is left to
// recover, after the controls.
func (s *session) adoptStored(ctx context.Context) (bool, error) {
	p := *s.st.Pending
	s.checked = p
	stored, err := s.w.store.Stored(ctx, s.r.ref, p)
	if err != nil || stored == nil {
		return false, err
	}
	if err := s.ensure(ctx); err != nil {
		return false, err
	}
	if p.Kind == record.StepTool {
		if _, ok := outstanding(s.st, p.CallID); !ok {
			return false, nil
		}
	}
	return true, s.recover(ctx)
}
