package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
)

// gate returns the approval gate of the definition that call must pass
// before it runs. A call an approve let through passes. Gates fail
// closed: a rule that cannot be evaluated (or compiled) stops the call
// too, with the error as the note.
func (s *session) gate(ctx context.Context, call record.CallRef, replaySafe bool) (gate string, need bool, note error) {
	if len(s.def.Approvals) == 0 || s.st.Approved == call.ID {
		return "", false, nil
	}
	c, err := s.w.compiled(s.r.ref.Agent, *s.def)
	if err != nil {
		return "approvals", true, err
	}
	var args map[string]any
	if err := json.Unmarshal(s.args(call), &args); err != nil {
		args = map[string]any{}
	}
	gate, need, err = c.NeedsApproval(ctx,
		policies.ToolCall{Name: call.Name, Args: args, ReplaySafe: replaySafe},
		policies.SessionInfo{Agent: s.r.ref.Agent, Name: s.r.ref.Session, Turn: s.st.Turns,
			Tokens: s.st.Usage.Tokens(), CostUSD: s.st.Usage.CostUSD})
	if err != nil {
		return gate, true, err
	}
	return gate, need, nil
}

// blockForApproval parks the session before call runs: no intent, the
// call stays outstanding, status blocked waiting for the call's id. An
// approve runs it, a deny answers it with a denial.
func (s *session) blockForApproval(ctx context.Context, call record.CallRef, gate string, evalErr error) error {
	next := s.st.Clone()
	e := s.entry(&next, record.KindSystem)
	e.Name, e.CallID = call.Name, call.ID
	e.Args = s.args(call)
	e.Text = fmt.Sprintf("approval needed (gate %s): %s call %s waits for approve or deny", gate, call.Name, call.ID)
	if evalErr != nil {
		e.Text = fmt.Sprintf("approval needed: the approval rules could not be evaluated (%v), so %s call %s waits for approve or deny", evalErr, call.Name, call.ID)
	}
	next.SetStatus(record.StatusBlocked, "", time.Now().UTC())
	next.WaitingFor, next.BlockedCall, next.Approval = call.ID, call.ID, gate
	if err := s.armWait(ctx, &next, call.ID, gate); err != nil {
		return err
	}
	// A run from a chat thread shows the call there, with Approve and
	// Deny buttons.
	text, blocks := approvalBlocks(s.r.ref.Agent, s.r.ref.Session, call, e.Args, gate)
	post := s.withPost(&next, postApproval, text, blocks)
	s.w.m.approvals.Inc()
	s.log.Info("tool call waits for approval", "tool", call.Name, "call", call.ID, "gate", gate, "err", evalErr)
	if err := s.commit(ctx, []record.Entry{e}, next); err != nil {
		return err
	}
	if post != nil {
		s.merged(post.Step)
	}
	return nil
}

// compiled returns the compiled rules of an agent's definition version,
// compiled once.
func (w *Worker) compiled(agent string, def policies.Definition) (*policies.Compiled, error) {
	key := fmt.Sprintf("%s@%d", agent, def.Version)
	w.modelsMu.Lock()
	defer w.modelsMu.Unlock()
	if c, ok := w.rules[key]; ok {
		return c, nil
	}
	c, err := policies.Compile(def)
	if err != nil {
		return nil, fmt.Errorf("compile the rules of %s version %d: %w", agent, def.Version, err)
	}
	if len(w.rules) > 1024 {
		clear(w.rules)
	}
	w.rules[key] = c
	return c, nil
}
