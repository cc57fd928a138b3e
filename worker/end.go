package worker

import (
	"context"
	"slices"
	"time"

	"github.com/jetloop/jetloop/record"
)

// closeOpen ends the step in flight and answers every outstanding call of
// next with an error result, so every call in the transcript has exactly
// one result: the call of a tool step whose intent is written and whose
// effect began (it may have run, wholly or in part) with "<why>; may or
// may not have run", so the model does not take it for undone; the others
// with "not run: <why>".
func (s *session) closeOpen(next *record.State, why string) []record.Entry {
	// A fresh intent's effect has not begun: it is taken back, its call
	// not run.
	s.withdraw(next)
	inflight := ""
	if p := next.Pending; p != nil {
		if p.Kind == record.StepTool {
			inflight = p.CallID
			// A delegate call in flight may have started its child.
			if c, ok := s.inflightChild(p); ok && !slices.ContainsFunc(next.Children, func(x record.Child) bool { return x.CallID == c.CallID }) {
				c.Cancel = why
				next.Children = append(next.Children, c)
			}
		}
		next.Steps = p.Step
		next.Pending = nil
	}
	var out []record.Entry
	for _, c := range next.Calls {
		e := s.entry(next, record.KindToolResult)
		e.Name, e.CallID, e.IsError = c.Name, c.ID, true
		e.Result = "not run: " + why
		if c.ID == inflight {
			e.Result = why + mayHaveRun
		}
		out = append(out, e)
	}
	next.Calls = nil
	return append(out, s.closeChildren(next, why)...)
}

// mayHaveRun ends the result of a call stopped or lost while it ran.
const mayHaveRun = "; may or may not have run"

// failStep ends the run as failed with reason, clearing any intent and
// answering the outstanding calls.
func (s *session) failStep(ctx context.Context, reason string) error {
	return s.failStepWith(ctx, reason, nil)
}

// failStepWith is failStep with a last change to the next state.
func (s *session) failStepWith(ctx context.Context, reason string, change func(*record.State)) error {
	next := s.st.Clone()
	if change != nil {
		change(&next)
	}
	return s.failRun(ctx, next, nil, reason, reason)
}

// failRun ends the run as failed with reason after entries, answering the
// outstanding calls (see closeOpen) with why.
func (s *session) failRun(ctx context.Context, next record.State, entries []record.Entry, reason, why string) error {
	e := s.entry(&next, record.KindSystem)
	e.Text = reason
	entries = append(entries, e)
	entries = append(entries, s.closeOpen(&next, why)...)
	next.SetStatus(record.StatusFailed, reason, time.Now().UTC())
	return s.commit(ctx, entries, next)
}

// interruptedText is the result of a call recovery will not run again.
const interruptedText = "interrupted" + mayHaveRun
