package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/tools"
)

type (
	toolsTool = tools.Tool
	toolsSpec = tools.Spec
)

// toolOutcome is what a call produced, as the model will see it.
type toolOutcome struct {
	text  string
	isErr bool
	blob  string
	block bool
}

// runTool calls tool once. A runtime error and a panic become an error
// result for the model: a bad call must not take the worker down.
func runTool(ctx context.Context, tool tools.Tool, call record.CallRef, tc tools.Call) (out toolOutcome) {
	defer func() {
		if p := recover(); p != nil {
			out = toolOutcome{text: fmt.Sprintf("tool %s panicked: %v", call.Name, p), isErr: true}
		}
	}()
	res, err := tool.Call(ctx, tc)
	if err != nil && res.Content != "" {
		// The call ended badly but has an answer for the model (a
		// registry's result for a cancelled call, say).
		return toolOutcome{text: res.Content, isErr: true, blob: res.Blob}
	}
	if err != nil {
		switch {
		case errors.Is(err, tools.ErrInvalidArgs):
			return toolOutcome{text: fmt.Sprintf("invalid arguments for %s: %v", call.Name, err), isErr: true}
		case ctx.Err() != nil:
			return toolOutcome{text: fmt.Sprintf("tool %s stopped: %v", call.Name, ctx.Err()), isErr: true}
		}
		return toolOutcome{text: fmt.Sprintf("tool %s failed: %v", call.Name, err), isErr: true}
	}
	return toolOutcome{text: res.Content, isErr: res.IsError, blob: res.Blob, block: res.Block}
}

// toolCall is what the tool of a step is called with.
func (s *session) toolCall(in record.Intent, dir string) tools.Call {
	c := tools.Call{ID: in.CallID, Args: in.Args, Agent: s.r.ref.Agent, Session: s.r.ref.Session, WorkDir: dir,
		Started: in.Started, Thread: s.st.Thread}
	if s.def != nil && s.def.GitHub != nil {
		c.GitHub = *s.def.GitHub
	}
	return c
}

// toolStep runs one tool call: intent, call, settlement. With rec it
// resumes an earlier worker's intent by the stored and the current
// declaration of the tool: both replay-safe, the call runs again; both
// probe, the tool is asked whether the effect happened (see probe); else
// it gets a synthetic error result under the reserved id.
func (s *session) toolStep(ctx context.Context, call record.CallRef, rec *record.Intent) error {
	now := time.Now().UTC()
	tool, spec, found := s.lookup(call.Name)
	if rec == nil {
		if limit, reason := budget(s.st, record.StepTool, now); limit != "" {
			return s.stopBudget(ctx, s.st.Clone(), nil, limit, reason)
		}
		if !found {
			return s.settleResult(ctx, call, s.st.Steps+1, fmt.Sprintf("unknown tool %q: this agent may call %s", call.Name, strings.Join(s.def.ToolNames(), ", ")), true, "")
		}
		if gate, need, note := s.gate(ctx, call, spec.ReplaySafe); need {
			return s.blockForApproval(ctx, call, gate, note)
		}
	}
	var in record.Intent
	if rec == nil {
		next := s.st.Clone()
		in = record.Intent{Kind: record.StepTool, Step: next.Steps + 1, Turn: next.Turns, Entry: next.NextEntry,
			CallID: call.ID, Tool: call.Name, Args: s.args(call), ReplaySafe: spec.ReplaySafe, Replay: string(tools.ClassOf(tool)),
			Owner: s.w.cfg.ID, Started: now}
		next.Pending = &in
		// An approval lets one run through, this one.
		next.Approved = ""
		s.trace(ctx, TracePoint{Phase: PhaseIntent, Kind: record.StepTool, Step: in.Step, Tool: call.Name, CallID: call.ID})
		if err := s.writeIntent(ctx, next); err != nil {
			return err
		}
	} else {
		in = *rec
		stored, current := in.ReplayClass(), tools.ClassUnsafe
		if found {
			current = tools.ClassOf(tool)
		}
		switch {
		case stored == string(tools.ClassProbe) && current == tools.ClassProbe:
		case stored == string(tools.ClassSafe) && current == tools.ClassSafe:
		default:
			s.w.m.recoveries.WithLabelValues(string(record.StepTool), "synthetic").Inc()
			s.log.Warn("tool call interrupted and not replay-safe: settling a synthetic error result", "tool", call.Name, "call", call.ID, "stored", stored, "current", current)
			return s.settleResult(ctx, call, in.Step, interruptedText, true, "")
		}
		if in.Attempt >= s.w.cfg.MaxRecoveries {
			return s.settleResult(ctx, call, in.Step, fmt.Sprintf("%s; interrupted %d times, not run again", interruptedText, in.Attempt+1), true, "")
		}
		if current == tools.ClassProbe {
			done, err := s.probe(ctx, call, tool.(tools.Prober), in)
			if done || err != nil {
				return err
			}
		}
		if limit, reason := budget(s.st, record.StepTool, now); limit != "" {
			next := s.st.Clone()
			entries := []record.Entry{}
			e := s.entry(&next, record.KindToolResult)
			e.Name, e.CallID, e.Result, e.IsError = call.Name, call.ID, interruptedText+"; not run again: budget exceeded", true
			entries = append(entries, e)
			next.Calls = next.Calls[1:]
			return s.stopBudget(ctx, next, entries, limit, reason)
		}
		s.w.m.recoveries.WithLabelValues(string(record.StepTool), "rerun").Inc()
		next := s.st.Clone()
		next.Pending.Attempt++
		next.Pending.Owner = s.w.cfg.ID
		if err := s.writeIntent(ctx, next); err != nil {
			return err
		}
		in = *next.Pending
	}
	s.trace(ctx, TracePoint{Phase: PhaseEffect, Kind: record.StepTool, Step: in.Step, Tool: call.Name, CallID: call.ID, Recovery: rec != nil})

	timeout := spec.Timeout
	if timeout <= 0 {
		timeout = s.w.cfg.ToolTimeout
	}
	sctx, cancel := s.stepContext(ctx)
	tctx, tcancel := context.WithTimeout(sctx, timeout)
	dir, derr := s.workDir()
	var res toolOutcome
	if derr != nil {
		res = toolOutcome{text: "no work folder: " + derr.Error(), isErr: true}
	} else {
		res = runTool(tctx, tool, call, s.toolCall(in, dir))
	}
	abort := aborted(sctx)
	deadline := sctx.Err() != nil && ctx.Err() == nil && abort == nil
	timedOut := tctx.Err() != nil && sctx.Err() == nil
	tcancel()
	cancel()
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if abort != nil {
		s.log.Info("tool call aborted", "tool", call.Name, "call", call.ID, "step", in.Step, "why", abort)
		return abort
	}
	s.trace(ctx, TracePoint{Phase: PhaseSettle, Kind: record.StepTool, Step: in.Step, Tool: call.Name, CallID: call.ID, Recovery: rec != nil})
	s.w.m.stepSeconds.WithLabelValues(s.labels(string(record.StepTool))...).Observe(time.Since(in.Started).Seconds())
	if timedOut && res.isErr {
		res.text = fmt.Sprintf("tool %s timed out after %s: %s", call.Name, timeout, res.text)
	}
	if deadline {
		// The run's deadline or its tick's timeout cut the call. A call
		// that returned its result anyway keeps it; one that was stopped
		// may have done part of its work.
		_, reason := budget(s.st, record.StepTool, time.Now())
		tickOut := reason == "" && s.st.TickExpired(time.Now())
		what := "the run's deadline"
		if tickOut {
			what = "the tick timeout"
		}
		next := s.st.Clone()
		e := s.entry(&next, record.KindToolResult)
		e.Name, e.CallID, e.Result, e.IsError, e.Blob = call.Name, call.ID, cut(res.text, record.MaxEntryBytes), res.isErr, res.blob
		if res.isErr || res.block {
			e.Result = cut(fmt.Sprintf("cancelled by %s%s (%s)", what, mayHaveRun, res.text), record.MaxEntryBytes)
			e.IsError, e.Blob = true, ""
		}
		next.Calls = next.Calls[1:]
		next.Steps = in.Step
		next.Pending = nil
		if tickOut {
			reason := fmt.Sprintf("%s: the run of tick %s outlived its schedule's timeout", tickTimeoutText, next.Tick.ID)
			s.log.Warn("tick timeout", "schedule", next.Tick.Schedule, "tick", next.Tick.ID)
			next.Tick.TimedOut = true
			return s.failRun(ctx, next, []record.Entry{e}, reason, reason)
		}
		if reason == "" {
			reason = "deadline passed during a tool call"
		}
		return s.stopBudget(ctx, next, []record.Entry{e}, "deadline", reason)
	}
	if res.block {
		return s.block(ctx, call, in.Step, res.text)
	}
	return s.settleResult(ctx, call, in.Step, res.text, res.isErr, res.blob)
}

// probe asks a probing tool whether the effect of an interrupted call
// happened: found, the call is settled with the result the tool reads
// back (the comment's id and URL, say) and done is true; not found, the
// caller makes the call once. A probe that cannot answer counts as an
// attempt and fails the run's turn for a later retry, so a lookup that
// keeps failing ends, after MaxRecoveries, as "may or may not have run".
func (s *session) probe(ctx context.Context, call record.CallRef, p tools.Prober, in record.Intent) (done bool, err error) {
	dir, derr := s.workDir()
	if derr != nil {
		return false, derr
	}
	pctx, cancel := s.stepContext(ctx)
	res, found, perr := p.Probe(pctx, s.toolCall(in, dir))
	cancel()
	if ctx.Err() != nil {
		return false, context.Cause(ctx)
	}
	switch {
	case perr != nil:
		s.w.m.recoveries.WithLabelValues(string(record.StepTool), "probe_failed").Inc()
		s.log.Warn("probe of an interrupted call failed; trying again later", "tool", call.Name, "call", call.ID, "attempt", in.Attempt, "err", perr)
		next := s.st.Clone()
		next.Pending.Attempt++
		next.Pending.Owner = s.w.cfg.ID
		if err := s.writeIntent(ctx, next); err != nil {
			return false, err
		}
		return false, fmt.Errorf("worker: probe %s call %s: %w", call.Name, call.ID, perr)
	case found:
		s.w.m.recoveries.WithLabelValues(string(record.StepTool), "probe_found").Inc()
		s.log.Info("interrupted call had taken effect: settling the result its probe found", "tool", call.Name, "call", call.ID)
		return true, s.settleResult(ctx, call, in.Step, res.Content, res.IsError, res.Blob)
	}
	s.w.m.recoveries.WithLabelValues(string(record.StepTool), "probe_not_found").Inc()
	s.log.Info("interrupted call had not taken effect: making it once", "tool", call.Name, "call", call.ID)
	return false, nil
}

// settleResult settles a call's result under its reserved id.
func (s *session) settleResult(ctx context.Context, call record.CallRef, step uint64, text string, isErr bool, blob string) error {
	next := s.st.Clone()
	e := s.entry(&next, record.KindToolResult)
	e.Name, e.CallID, e.Result, e.IsError, e.Blob = call.Name, call.ID, cut(text, record.MaxEntryBytes), isErr, blob
	next.Calls = next.Calls[1:]
	next.Pending = nil
	next.Steps = step
	if isErr {
		next.RunToolErrors++
	}
	if err := s.commit(ctx, []record.Entry{e}, next); err != nil {
		return err
	}
	outcome := "ok"
	if isErr {
		outcome = "error"
	}
	if text == interruptedText {
		outcome = "synthetic"
	}
	s.w.m.steps.WithLabelValues(s.labels(string(record.StepTool), outcome)...).Inc()
	s.log.Info("tool step settled", "turn", next.Turns, "step", step, "tool", call.Name, "call", call.ID, "is_error", isErr)
	s.trace(ctx, TracePoint{Phase: PhaseSettled, Kind: record.StepTool, Step: step, Tool: call.Name, CallID: call.ID})
	return nil
}

// block parks the session until a human answers call: no result yet, the
// call stays outstanding, the status is blocked with the question.
func (s *session) block(ctx context.Context, call record.CallRef, step uint64, question string) error {
	next := s.st.Clone()
	e := s.entry(&next, record.KindSystem)
	e.Text = "waiting for a human: " + question
	next.Pending = nil
	next.Steps = step
	next.SetStatus(record.StatusBlocked, "", time.Now().UTC())
	next.WaitingFor = cut(question, 4096)
	next.BlockedCall = call.ID
	s.log.Info("session blocked", "call", call.ID, "tool", call.Name)
	return s.commit(ctx, []record.Entry{e}, next)
}

// lookup finds a tool the definition allows: one of its tools, or an MCP
// tool one of its mcp_servers admits ("server.tool").
func (s *session) lookup(name string) (tool toolsTool, spec toolsSpec, ok bool) {
	t, ok := s.w.toolOf(s.def, name)
	if !ok {
		return nil, toolsSpec{}, false
	}
	return t, t.Spec(), true
}

// toolOf finds a tool def allows by name.
func (w *Worker) toolOf(def *policies.Definition, name string) (tools.Tool, bool) {
	if _, _, isMCP := def.MCPTool(name); isMCP {
		t, ok := w.mcpTools(def)[name]
		return t, ok
	}
	for _, n := range def.Tools {
		if n == name {
			return w.cfg.Tools.Get(name)
		}
	}
	return nil, false
}

// args returns the arguments of a call from its tool_call entry.
func (s *session) args(call record.CallRef) json.RawMessage {
	for i := len(s.log_) - 1; i >= 0; i-- {
		if s.log_[i].ID == call.Entry {
			return s.log_[i].Args
		}
	}
	return json.RawMessage(`{}`)
}

// workDir creates and returns the session's work folder.
func (s *session) workDir() (string, error) {
	at, st, _ := strings.Cut(s.r.ref.Key(), ".")
	dir := filepath.Join(s.w.cfg.WorkDir, at, st)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", err
	}
	return dir, nil
}
