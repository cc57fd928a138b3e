package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/window"
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
	// delegate is a delegate call's delegation, for the worker to start.
	delegate *tools.Delegation
}

// runTool calls tool once. A runtime error and a panic become an error
// result for the model: a bad call must not take the worker down.
func runTool(ctx context.Context, tool tools.Tool, c tools.Call, name string) (out toolOutcome) {
	defer func() {
		if p := recover(); p != nil {
			out = toolOutcome{text: fmt.Sprintf("tool %s panicked: %v", name, p), isErr: true}
		}
	}()
	res, err := tool.Call(ctx, c)
	if err != nil && res.Content != "" {
		// The call ended badly but has an answer for the model (a
		// registry's result for a cancelled call, say).
		return toolOutcome{text: res.Content, isErr: true, blob: res.Blob}
	}
	if err != nil {
		switch {
		case errors.Is(err, tools.ErrInvalidArgs):
			return toolOutcome{text: fmt.Sprintf("invalid arguments for %s: %v", name, err), isErr: true}
		case ctx.Err() != nil:
			return toolOutcome{text: fmt.Sprintf("tool %s stopped: %v", name, ctx.Err()), isErr: true}
		}
		return toolOutcome{text: fmt.Sprintf("tool %s failed: %v", name, err), isErr: true}
	}
	return toolOutcome{text: res.Content, isErr: res.IsError, blob: res.Blob, block: res.Block, delegate: res.Delegate}
}

// toolIntent puts the intent of call in next.
func (s *session) toolIntent(next *record.State, call record.CallRef, args json.RawMessage, replay record.Replay, now time.Time) record.Intent {
	in := record.Intent{Kind: record.StepTool, Step: next.Steps + 1, Turn: next.Turns, Entry: next.NextEntry,
		CallID: call.ID, Tool: call.Name, Args: args, Replay: replay, Owner: s.w.cfg.ID, Started: now}
	next.Pending = &in
	// An approval lets one run through, this one.
	next.Approved = ""
	return in
}

// replayOf is the replay declaration of a tool now ("" for none).
func replayOf(tool toolsTool, found bool) record.Replay {
	if !found {
		return ""
	}
	return record.Replay(tools.ClassOf(tool))
}

// toolStep runs one tool call: the checks before it (budget, the tool,
// approval gates), its intent, the call, the settlement.
func (s *session) toolStep(ctx context.Context, call record.CallRef) error {
	now := time.Now().UTC()
	tool, spec, found := s.lookup(call.Name)
	if limit, reason, err := s.limitReached(ctx, record.StepTool, now, false); err != nil {
		return err
	} else if limit != "" {
		return s.stopBudget(ctx, s.st.Clone(), nil, limit, reason)
	}
	if !found {
		return s.settleResult(ctx, call, record.Intent{Step: s.st.Steps + 1}, fmt.Sprintf("unknown tool %q: this agent may call %s", call.Name, strings.Join(s.def.ToolNames(), ", ")), true, "")
	}
	if gate, need, note := s.gate(ctx, call, spec.ReplaySafe); need {
		return s.blockForApproval(ctx, call, gate, note)
	}
	next := s.st.Clone()
	in := s.toolIntent(&next, call, s.args(call), replayOf(tool, found), now)
	s.trace(ctx, TracePoint{Phase: PhaseIntent, Kind: record.StepTool, Step: in.Step, Tool: call.Name, CallID: call.ID})
	if err := s.writeIntent(ctx, next); err != nil {
		return err
	}
	return s.callTool(ctx, call, in, tool, spec, false)
}

// rerunTool executes again the call of an intent recovery found without a
// settlement (record.Rerun, or record.Probe when the probe found no
// effect), within the recovery attempts and the budget.
func (s *session) rerunTool(ctx context.Context, call record.CallRef, p record.Intent, tool toolsTool, spec toolsSpec) error {
	if p.Attempt >= s.w.cfg.MaxRecoveries {
		return s.settleResult(ctx, call, p, fmt.Sprintf("%s; interrupted %d times, not run again", interruptedText, p.Attempt+1), true, "")
	}
	if limit, reason, err := s.limitReached(ctx, record.StepTool, time.Now(), false); err != nil {
		return err
	} else if limit != "" {
		// A delegate call whose event is stored may have started its
		// child, with the budget carved then: its replay publishes that
		// event, and is no new spending to refuse.
		if made, err := s.delegationStored(ctx, p); err != nil {
			return err
		} else if made {
			s.log.Info("budget reached, but the interrupted delegate call's event is stored: publishing it again", "call", call.ID, "limit", limit)
			return s.replayTool(ctx, call, tool, spec)
		}
		next := s.st.Clone()
		e := s.entry(&next, record.KindToolResult)
		e.Name, e.CallID, e.Result, e.IsError = call.Name, call.ID, interruptedText+"; not run again: budget exceeded", true
		next.Calls = next.Calls[1:]
		return s.stopBudget(ctx, next, []record.Entry{e}, limit, reason)
	}
	return s.replayTool(ctx, call, tool, spec)
}

// replayTool makes the interrupted call of the pending intent again, as
// a new attempt of it.
func (s *session) replayTool(ctx context.Context, call record.CallRef, tool toolsTool, spec toolsSpec) error {
	next := s.st.Clone()
	next.Pending.Attempt++
	next.Pending.Owner = s.w.cfg.ID
	next.Pending.Entry = next.NextEntry
	if err := s.writeIntent(ctx, next); err != nil {
		return err
	}
	return s.callTool(ctx, call, *s.st.Pending, tool, spec, true)
}

// delegationStored reports whether p is the intent of a delegate call
// whose delegate event is stored: the delegation was, or may have been,
// made.
func (s *session) delegationStored(ctx context.Context, p record.Intent) (bool, error) {
	if p.Kind != record.StepTool || p.Tool != "delegate" {
		return false, nil
	}
	stored, err := s.w.store.Delegation(ctx, s.r.ref, p.Step)
	return stored != nil, err
}

// probeTool asks the tool of an interrupted call whether the call's
// effect happened (record.Probe): found, the call is settled with the
// result the tool reads back (the comment's id and URL, say); not found,
// it is made once. A probe that cannot answer counts as an attempt and
// fails the session's turn for a later retry, so a lookup that keeps
// failing ends, after MaxRecoveries, as "may or may not have run".
func (s *session) probeTool(ctx context.Context, call record.CallRef, p record.Intent, tool toolsTool, spec toolsSpec) error {
	prober, ok := tool.(tools.Prober)
	if !ok {
		return s.settleResult(ctx, call, p, interruptedText, true, "")
	}
	if p.Attempt >= s.w.cfg.MaxRecoveries {
		return s.settleResult(ctx, call, p, fmt.Sprintf("%s; interrupted %d times, not run again", interruptedText, p.Attempt+1), true, "")
	}
	dir, err := s.workDir()
	if err != nil {
		return fmt.Errorf("worker: probe %s call %s: no work folder: %w", call.Name, call.ID, err)
	}
	timeout := spec.Timeout
	if timeout <= 0 {
		timeout = s.w.cfg.ToolTimeout
	}
	sctx, scancel := s.stepContext(ctx)
	pctx, cancel := context.WithTimeout(sctx, timeout)
	res, found, perr := probe(pctx, prober, s.toolCall(p, dir))
	cancel()
	scancel()
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	switch {
	case errors.Is(perr, tools.ErrProbeLater):
		// A rate limit holds the lookup back: asked again later, it can
		// answer, so it costs no attempt.
		s.w.m.recoveries.WithLabelValues(string(record.StepTool), "probe_later").Inc()
		s.log.Warn("probe of an interrupted call waits for a rate limit; trying again later", "tool", call.Name, "call", call.ID, "err", perr)
		return fmt.Errorf("worker: probe %s call %s of %s: %w", call.Name, call.ID, s.r.ref, perr)
	case perr != nil:
		s.w.m.recoveries.WithLabelValues(string(record.StepTool), "probe_failed").Inc()
		s.log.Warn("probe of an interrupted call failed; trying again later", "tool", call.Name, "call", call.ID, "attempt", p.Attempt, "err", perr)
		next := s.st.Clone()
		next.Pending.Attempt++
		next.Pending.Owner = s.w.cfg.ID
		if err := s.writeIntent(ctx, next); err != nil {
			return err
		}
		return fmt.Errorf("worker: probe %s call %s of %s: %w", call.Name, call.ID, s.r.ref, perr)
	case found:
		s.w.m.recoveries.WithLabelValues(string(record.StepTool), "probe_found").Inc()
		s.log.Info("interrupted call had taken effect: settling the result its probe found", "tool", call.Name, "call", call.ID)
		return s.settleResult(ctx, call, p, res.Content, res.IsError, res.Blob)
	}
	s.w.m.recoveries.WithLabelValues(string(record.StepTool), "probe_not_found").Inc()
	s.log.Info("interrupted call had not taken effect: making it once", "tool", call.Name, "call", call.ID)
	return s.rerunTool(ctx, call, p, tool, spec)
}

// toolCall is what the tool of a step is called (or probed) with.
func (s *session) toolCall(in record.Intent, dir string) tools.Call {
	c := tools.Call{ID: in.CallID, Args: in.Args, Agent: s.r.ref.Agent, Session: s.r.ref.Session, WorkDir: dir,
		Started: in.Started, Thread: s.st.Thread, MayRead: s.forkedFrom(s.st.Parent)}
	if s.def != nil && s.def.GitHub != nil {
		c.GitHub = *s.def.GitHub
	}
	return c
}

// maxForkDepth bounds the fork chain MayRead walks.
const maxForkDepth = 32

// forkedFrom is a Call's MayRead: whether session is one this session
// was forked from, directly or through forks of forks, whose transcript
// (and so whose handles) it began as a copy of. A delegated session is
// no fork: it reads only what it was given.
func (s *session) forkedFrom(parent string) func(ctx context.Context, session string) bool {
	if parent == "" {
		return nil
	}
	agent := s.r.ref.Agent
	return func(ctx context.Context, session string) bool {
		for p, depth := parent, 0; p != "" && depth < maxForkDepth; depth++ {
			if p == session {
				return true
			}
			ref, err := streams.NewSessionRef(agent, p)
			if err != nil {
				return false
			}
			st, _, err := s.w.store.Load(ctx, ref)
			if err != nil {
				return false
			}
			p = st.Parent
		}
		return false
	}
}

// probe calls a tool's probe; a panic is an error.
func probe(ctx context.Context, p tools.Prober, c tools.Call) (res tools.Result, found bool, err error) {
	defer func() {
		if v := recover(); v != nil {
			res, found, err = tools.Result{}, false, fmt.Errorf("probe panicked: %v", v)
		}
	}()
	return p.Probe(ctx, c)
}

// callTool makes the call of intent in, which is durable, and settles
// its result.
func (s *session) callTool(ctx context.Context, call record.CallRef, in record.Intent, tool toolsTool, spec toolsSpec, recovery bool) (err error) {
	s.fresh = 0
	ctx, span := s.toolSpan(ctx, call, in, recovery)
	defer func() { endStep(span, err) }()
	s.trace(ctx, TracePoint{Phase: PhaseEffect, Kind: record.StepTool, Step: in.Step, Tool: call.Name, CallID: call.ID, Recovery: recovery})

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
		res = runTool(tctx, tool, s.toolCall(in, dir), call.Name)
		if spec.State != tools.Stateless {
			// It may have removed its folder: the next call makes it again.
			s.dirMade = false
		}
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
	if res.delegate != nil && !res.isErr && !deadline {
		// The effect of a delegate call is the worker's: its child's start.
		return s.delegate(ctx, call, in, *res.delegate, recovery)
	}
	s.trace(ctx, TracePoint{Phase: PhaseSettle, Kind: record.StepTool, Step: in.Step, Tool: call.Name, CallID: call.ID, Recovery: recovery})
	s.observeStep(string(record.StepTool), time.Since(in.Started).Seconds())
	if res.isErr {
		span.SetStatus(codes.Error, "the tool answered an error")
		span.SetAttributes(semconv.ErrorTypeKey.String("tool_error"))
	}
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
	return s.settleResult(ctx, call, in, res.text, res.isErr, res.blob)
}

// settleResult settles the result of call, the step of intent in, under
// the id the intent reserved, tagged with the step and its attempt.
func (s *session) settleResult(ctx context.Context, call record.CallRef, in record.Intent, text string, isErr bool, blob string) error {
	next := s.st.Clone()
	e := s.entry(&next, record.KindToolResult)
	e.Name, e.CallID, e.Result, e.IsError, e.Blob = call.Name, call.ID, cut(text, record.MaxEntryBytes), isErr, blob
	e.Step, e.Attempt, e.Entries = in.Step, in.Attempt, 1
	settleTool(&next, in, e)
	if isErr {
		next.RunToolErrors++
	}
	merged := s.mergeNext(ctx, &next, []record.Entry{e})
	if err := s.commit(ctx, []record.Entry{e}, next); err != nil {
		return err
	}
	s.merged(merged)
	outcome := "ok"
	if isErr {
		outcome = "error"
	}
	if text == interruptedText {
		outcome = "synthetic"
	}
	s.countStep(string(record.StepTool), outcome)
	s.log.Info("tool step settled", "turn", next.Turns, "step", in.Step, "tool", call.Name, "call", call.ID, "is_error", isErr)
	s.trace(ctx, TracePoint{Phase: PhaseSettled, Kind: record.StepTool, Step: in.Step, Tool: call.Name, CallID: call.ID})
	return nil
}

// settleTool makes next the state the settlement of tool intent in with
// result e writes: the call answered, the intent cleared.
func settleTool(next *record.State, in record.Intent, e record.Entry) {
	next.Calls = removeCall(next.Calls, e.CallID)
	next.Pending = nil
	next.Steps = in.Step
	next.NextEntry = e.ID + 1
}

// adoptTool settles tool intent p with the result a settlement stored
// before its state was written (record.Adopt): the call is not made
// again, its result is not lost.
func (s *session) adoptTool(ctx context.Context, p record.Intent, e record.Entry) error {
	next := s.st.Clone()
	settleTool(&next, p, e)
	merged := s.mergeNext(ctx, &next, []record.Entry{e})
	if err := s.commit(ctx, []record.Entry{e}, next); err != nil {
		return err
	}
	s.merged(merged)
	s.countStep(string(record.StepTool), "adopted")
	s.log.Info("tool step settled with the result stored before the interruption", "step", p.Step, "tool", e.Name, "call", e.CallID, "is_error", e.IsError)
	s.trace(ctx, TracePoint{Phase: PhaseSettled, Kind: record.StepTool, Step: p.Step, Tool: e.Name, CallID: e.CallID, Recovery: true})
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
	if err := s.armWait(ctx, &next, call.ID, ""); err != nil {
		return err
	}
	// A run from a chat thread asks there; the thread's next reply is the
	// answer.
	post := s.withPost(&next, postQuestion, question, nil)
	s.log.Info("session blocked", "call", call.ID, "tool", call.Name)
	if err := s.commit(ctx, []record.Entry{e}, next); err != nil {
		return err
	}
	if post != nil {
		s.merged(post.Step)
	}
	return nil
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

// toolOf finds a tool def allows by name: its tools, and the ones its
// context policy brings (window.EffectiveTools).
func (w *Worker) toolOf(def *policies.Definition, name string) (tools.Tool, bool) {
	if _, _, isMCP := def.MCPTool(name); isMCP {
		t, ok := w.mcpTools(def)[name]
		return t, ok
	}
	for _, n := range window.EffectiveTools(def) {
		if n == name {
			return w.cfg.Tools.Get(name)
		}
	}
	return nil, false
}

// args returns the arguments of a call from its tool_call entry.
func (s *session) args(call record.CallRef) json.RawMessage {
	for i := len(s.live) - 1; i >= 0; i-- {
		if s.live[i].ID == call.Entry {
			return s.live[i].Args
		}
	}
	return json.RawMessage(`{}`)
}

// workDir creates and returns the session's work folder: once, and again
// after a call of a tool that is not stateless (one that may have removed
// it); a stateless tool's call leaves it as it was.
func (s *session) workDir() (string, error) {
	if s.dirMade {
		return s.dir, nil
	}
	dir, err := makeWorkFolder(s.w.cfg.WorkDir, s.r.ref)
	if err != nil {
		return "", err
	}
	s.dir, s.dirMade = dir, true
	return dir, nil
}
