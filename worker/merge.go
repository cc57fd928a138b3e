package worker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/tools"
)

// A step is two writes, not three, where that is safe: the settlement of
// one step (or the input that starts a run, or the steers flushed before
// a model call) carries the intent of the next step in the same state
// write, when the next step is decided already. Recovery of a merged
// intent cannot tell whether its effect began, so an intent is merged
// only where that does not widen the uncertain interval of a replay-unsafe
// effect (DESIGN §8): the next step is
//
//   - a model call (recovery remakes it; a call that had not begun is
//     counted as possibly billed, which it was not), or
//   - a tool call whose tool declares itself replay-safe now, behind no
//     approval gate (recovery runs it again).
//
// A replay-unsafe tool's intent is never merged: it is written by itself
// just before the call, so a crash before the call began is as unlikely
// as can be to be settled "interrupted; may or may not have run". A probe
// tool's is not either: recovery would ask a remote system about a call
// that may never have begun. Nor is the intent of a step behind a budget
// that has run out, a tick's expired timeout, or an approval gate: those
// are decided at the step, as before. A merged intent's time-bound limits
// (the deadline, the tick's timeout) are checked again when its effect
// begins (begin): time passes between the settlement and the step.
//
// A merged intent whose effect has not begun is fresh: this worker knows
// it has not begun. Whatever happens at the boundary before it begins (a
// control applied, the run superseded, the worker stopping) takes it back
// in its own write (withdraw), so that nothing is recorded as
// interrupted that never began.

// mergeNext puts in next, about to be written by a settlement whose new
// entries are entries, the intent of the step after it when it may ride
// on that write (see above). It returns the step merged, 0 for none.
func (s *session) mergeNext(ctx context.Context, next *record.State, entries []record.Entry) uint64 {
	if next.Status != record.StatusWorking || next.Pending != nil || s.def == nil || s.model == nil {
		return 0
	}
	if next.Ledger != "" {
		// A run of a delegation tree checks the tree's shared ledger
		// before each step, and waits for its children: each step writes
		// its own intent.
		return 0
	}
	now := time.Now().UTC()
	if next.TickExpired(now) {
		return 0
	}
	if len(next.Calls) > 0 {
		call := next.Calls[0]
		tool, _, found := s.lookup(call.Name)
		if !found || tools.ClassOf(tool) != tools.ClassSafe || len(s.def.Approvals) > 0 {
			return 0
		}
		if limit, _ := budget(*next, record.StepTool, now); limit != "" {
			return 0
		}
		in := s.toolIntent(next, call, s.argsIn(call, entries), record.ReplaySafe, now)
		s.trace(ctx, TracePoint{Phase: PhaseIntent, Kind: record.StepTool, Step: in.Step, Tool: call.Name, CallID: call.ID})
		return in.Step
	}
	if len(next.Steers) > 0 || next.Ceilings != (policies.Limits{}) || s.steerWaiting(ctx, next.InSeq) {
		// Steers join first; spend limits are read before the call.
		return 0
	}
	if limit, _ := budget(*next, record.StepModel, now); limit != "" {
		return 0
	}
	if s.compactionDue(ctx, *next, entries) {
		// The compaction comes first, as a step of its own.
		return 0
	}
	in := s.modelIntent(next, now)
	s.trace(ctx, TracePoint{Phase: PhaseIntent, Kind: record.StepModel, Step: in.Step})
	return in.Step
}

// merged records that the write just made carries the fresh intent of
// step (0: none).
func (s *session) merged(step uint64) { s.fresh = step }

// isFresh reports whether the pending intent is fresh: merged by this
// session, its effect not begun.
func (s *session) isFresh() bool {
	return s.fresh != 0 && s.st.Pending != nil && s.st.Pending.Step == s.fresh
}

// looked reports whether the pending intent's reserved ids were looked
// up at a boundary already.
func (s *session) looked() bool {
	p := s.st.Pending
	return p != nil && s.checked.Step == p.Step && s.checked.Attempt == p.Attempt && s.checked.Entry == p.Entry
}

// withdraw takes a fresh intent out of next, as if it had never been
// written: its step number is given again.
func (s *session) withdraw(next *record.State) {
	if p := next.Pending; p != nil && p.Kind == record.StepReply {
		// The answer is settled; only its post is pending. Taken back, the
		// run would call the model again: it stays, and recovery's probe
		// posts it once.
		return
	}
	if p := next.Pending; p != nil && p.Step == s.fresh {
		if p.Kind == record.StepModel {
			next.Turns--
			next.RunTurns--
		}
		next.Pending = nil
	}
}

// begin makes the effect of the fresh intent. The budget is checked
// before every step: time has passed since the intent was merged, and a
// deadline or a tick's timeout may have come; then the intent is taken
// back and the step decided as one whose intent is written by itself
// (next stops the run before the effect).
func (s *session) begin(ctx context.Context) error {
	p := *s.st.Pending
	if p.Kind != record.StepReply {
		back := s.st.Clone()
		s.withdraw(&back)
		now := time.Now().UTC()
		if limit, _ := budget(back, p.Kind, now); limit != "" || back.TickExpired(now) {
			return s.commit(ctx, nil, back)
		}
	}
	switch p.Kind {
	case record.StepModel:
		return s.callModel(ctx, p, false)
	case record.StepReply:
		return s.replyStep(ctx, p, false)
	}
	call, ok := outstanding(s.st, p.CallID)
	tool, spec, found := s.lookup(p.Tool)
	if !ok || !found {
		// Cannot happen: the intent was merged for an outstanding call
		// of a tool found. Take it back and decide again.
		next := s.st.Clone()
		s.withdraw(&next)
		return s.commit(ctx, nil, next)
	}
	return s.callTool(ctx, call, p, tool, spec, false)
}

// argsIn returns the arguments of call from its tool_call entry, among
// entries about to be written or the transcript.
func (s *session) argsIn(call record.CallRef, entries []record.Entry) json.RawMessage {
	for _, e := range entries {
		if e.ID == call.Entry {
			return e.Args
		}
	}
	return s.args(call)
}
