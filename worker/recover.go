package worker

import (
	"context"
	"fmt"

	"github.com/jetloop/jetloop/record"
)

// recover resumes a step whose intent was written and whose settlement
// was not, by DESIGN §8's table.
func (s *session) recover(ctx context.Context) error {
	if err := s.ensure(ctx); err != nil {
		return err
	}
	p := *s.st.Pending
	s.log.Warn("recovering step with an intent and no settlement", "step", p.Step, "kind", p.Kind, "tool", p.Tool, "call", p.CallID, "attempt", p.Attempt, "previous_owner", p.Owner)
	switch p.Kind {
	case record.StepModel:
		return s.modelStep(ctx, &p)
	case record.StepTool:
		for _, c := range s.st.Calls {
			if c.ID == p.CallID {
				return s.toolStep(ctx, c, &p)
			}
		}
		// The call is not outstanding (cannot happen: settlement removes
		// both at once). Drop the intent rather than loop.
		next := s.st.Clone()
		next.Pending = nil
		return s.commit(ctx, nil, next)
	}
	return fmt.Errorf("worker: session %s: pending step of unknown kind %q", s.r.ref, p.Kind)
}
