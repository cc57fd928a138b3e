package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/schedule"
)

// session is a session being run by its lease holder: the state as last
// written, its revision (the fencing token) and the transcript.
type session struct {
	r     *runner
	w     *Worker
	log   *slog.Logger
	st    State
	rev   uint64
	log_  []Entry
	calls map[string]bool // call ids used in the transcript
	// ctlRead is the state revision at which JL_CTL was last read.
	ctlRead uint64

	def   *policies.Definition
	model model.Model
}

// claim takes the session over: it writes the state (creating it for a
// new session) with this worker as owner and a new epoch, so a worker
// whose lease lapsed is fenced from its next write on, then reads the
// transcript.
func (r *runner) claim(ctx context.Context) (*session, error) {
	w := r.w
	s := &session{r: r, w: w, log: r.log, calls: map[string]bool{}}
	for attempt := 0; ; attempt++ {
		st, rev, err := w.store.load(ctx, r.ref)
		now := time.Now().UTC()
		switch {
		case errors.Is(err, ErrNotFound):
			st = newState(r.ref.Agent, r.ref.Session, now)
			st.Owner, st.Epoch = w.cfg.ID, 1
			rev, err = w.store.create(ctx, r.ref, st)
		case err == nil:
			st.Owner, st.Epoch, st.Updated = w.cfg.ID, st.Epoch+1, now
			rev, err = w.store.update(ctx, r.ref, st, rev)
		}
		if errors.Is(err, ErrFenced) && attempt < 3 {
			// A lapsed owner wrote between our lease and our claim.
			continue
		}
		if err != nil {
			return nil, err
		}
		s.st, s.rev = st, rev
		r.observe(st)
		break
	}
	entries, err := w.store.transcript(ctx, r.ref, s.st.NextEntry)
	if err != nil {
		return nil, err
	}
	s.log_ = entries
	for _, e := range entries {
		if e.CallID != "" {
			s.calls[e.CallID] = true
		}
	}
	s.log = s.log.With("turn", s.st.Turns)
	s.log.Debug("session claimed", "epoch", s.st.Epoch, "status", s.st.Status, "entries", len(entries))
	return s, nil
}

// loop runs steps until the session rests with no input left. ctx is the
// worker's (it ending stops the loop at the next step boundary); sctx is
// the steps'. Control messages are applied before anything else at every
// step boundary: JL_CTL is read after every state write (one direct get),
// and whenever the control subscription or a delivery says a message came.
func (s *session) loop(ctx, sctx context.Context) error {
	for {
		if err := context.Cause(sctx); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		var err error
		switch {
		case s.r.takeCtlHint(s.st.CtlSeq) || s.rev != s.ctlRead:
			err = s.controls(sctx)
		case s.supersededRun(sctx):
			err = s.endSuperseded(sctx)
		case s.st.Pending != nil:
			err = s.recover(sctx)
		case s.st.Status == StatusWorking:
			err = s.next(sctx)
		case s.st.Tick != nil && s.st.Tick.Result == "" && !s.st.Status.Waiting():
			err = s.recordTickResult(sctx)
		default:
			s.trace(sctx, TracePoint{Phase: PhaseAck, Step: s.st.Steps})
			s.r.ack(s.st)
			in, ierr := s.r.nextInput(sctx, s.st.InSeq)
			if ierr != nil {
				return ierr
			}
			if in == nil {
				if s.r.ctlHint.Load() || s.r.wantsCancel(s.st.CtlSeq) != 0 {
					continue
				}
				return nil
			}
			err = s.input(sctx, in)
		}
		if err != nil {
			if errors.Is(err, errAborted) {
				// The control or tick that stopped the step settles it at
				// the next boundary.
				continue
			}
			if c := context.Cause(sctx); c != nil && errors.Is(err, context.Canceled) {
				return c
			}
			return err
		}
	}
}

// commit settles entries with the next state and, on success, makes them
// the session's; status changes are announced.
func (s *session) commit(ctx context.Context, entries []Entry, next State) error {
	next.Updated = time.Now().UTC()
	if s.st.Status == StatusWorking && next.Status.Resting() {
		next.RunEnded = next.Updated
	}
	next.Owner = s.w.cfg.ID
	rev, err := s.w.store.settle(ctx, s.r.ref, entries, next, s.rev)
	if err != nil {
		return err
	}
	prev := s.st.Status
	s.st, s.rev = next, rev
	s.r.observe(next)
	s.log_ = append(s.log_, entries...)
	for _, e := range entries {
		if e.CallID != "" {
			s.calls[e.CallID] = true
		}
	}
	if prev != next.Status {
		s.w.announce(ctx, s.r.ref, prev, next)
	}
	return nil
}

// entry returns a new entry with the next id of next, advancing it.
func (s *session) entry(next *State, kind Kind) Entry {
	e := Entry{ID: next.NextEntry, Kind: kind, Turn: next.Turns, Time: time.Now().UTC()}
	next.NextEntry++
	return e
}

func (s *session) trace(ctx context.Context, p TracePoint) {
	if s.w.cfg.Trace == nil {
		return
	}
	p.Agent, p.Session = s.r.ref.Agent, s.r.ref.Session
	s.w.cfg.Trace(ctx, p)
}

// input records one event: it starts a run, joins the transcript of a
// waiting session, or goes to the dead letter stream.
func (s *session) input(ctx context.Context, in *input) error {
	next := s.st.clone()
	next.InSeq = in.seq
	ev, err := events.FromMsg(&nats.Msg{Subject: in.subject, Header: in.header, Data: in.data})
	if err != nil {
		if err := s.w.deadLetter(ctx, in.subject, in.header, in.data, in.seq, "not a CloudEvent: "+err.Error()); err != nil {
			return err
		}
		return s.commit(ctx, nil, next)
	}
	tick := schedule.IsTick(&nats.Msg{Header: in.header})
	if s.st.Status.Final() {
		reason := fmt.Sprintf("session is %s", s.st.Status)
		if err := s.w.deadLetter(ctx, in.subject, in.header, in.data, in.seq, reason); err != nil {
			return err
		}
		if tick {
			// The schedule learns that its ticks no longer run: its
			// breaker trips after max_failures of them.
			if t, err := schedule.ParseTick(&nats.Msg{Subject: in.subject, Header: in.header, Data: in.data}); err == nil {
				s.w.recordTick(ctx, s.r.ref.Agent, t.Spec.Schedule, t.ID, t.Slot, schedule.ResultFailed, errors.New(reason))
			}
		}
		return s.commit(ctx, nil, next)
	}
	if tick {
		tev, handled, err := s.tickInput(ctx, in, &next)
		if err != nil {
			return err
		}
		if handled {
			return s.commit(ctx, nil, next)
		}
		ev = tev
	}
	e := s.entry(&next, KindEvent)
	e.Time = in.time.UTC()
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	e.Name = ev.Type()
	e.Event = &EventRef{ID: ev.ID(), Source: ev.Source(), Type: ev.Type(), Seq: in.seq}
	e.Text = eventText(ev.Type(), ev.DataContentType(), ev.Source(), ev.Subject(), ev.Data())
	// The admitting trigger's prompt template, rendered at ingest, leads
	// the turn's message; the event follows it.
	if p, perr := admission.Prompt(ev); perr != nil {
		s.log.Warn("unreadable trigger prompt; the event goes without it", "seq", in.seq, "err", perr)
	} else if p != "" {
		e.Text = p + "\n\n" + e.Text
	}
	if ev.Type() == events.TypeRequest {
		e.Kind = KindUser
	}
	if s.st.Status.Waiting() {
		// It joins the context the session resumes with.
		return s.commit(ctx, []Entry{e}, next)
	}
	if err := s.resolve(ctx, &next); err != nil {
		if errors.Is(err, errNoDefinition) {
			if derr := s.w.deadLetter(ctx, in.subject, in.header, in.data, in.seq, err.Error()); derr != nil {
				return derr
			}
			if tick && next.Tick != nil {
				s.w.recordTick(ctx, s.r.ref.Agent, next.Tick.Schedule, next.Tick.ID, next.Tick.Slot, schedule.ResultFailed, err)
				next.Tick = s.st.clone().Tick
			}
			next.NextEntry--
			return s.commit(ctx, nil, next)
		}
		return err
	}
	if hops := extInt(ev.Extensions()[events.ExtHops]); next.Limits.MaxHops > 0 && hops > next.Limits.MaxHops {
		reason := fmt.Sprintf("max_hops %d: event has %d delegation hops", next.Limits.MaxHops, hops)
		return s.stopBudget(ctx, next, []Entry{e}, "max_hops", reason)
	}
	if !tick {
		// The run is not a tick's: the last tick's timeout and result
		// belong to the run it started.
		next.Tick = nil
	}
	// Budgets are per run.
	next.RunTurns, next.RunUsage = 0, model.Usage{}
	next.RunStarted = time.Now().UTC()
	next.setStatus(StatusWorking, "", next.RunStarted)
	s.log.Info("run started", "seq", in.seq, "type", ev.Type())
	return s.commit(ctx, []Entry{e}, next)
}

var errNoDefinition = errors.New("agent has no definition")

// resolve loads the definition the session runs on and its model.
func (s *session) resolve(ctx context.Context, next *State) error {
	w := s.w
	agent := s.r.ref.Agent
	var def policies.Definition
	var err error
	vd, versioned := w.cfg.Definitions.(VersionedDefinitions)
	if next.DefinitionVersion != 0 && versioned {
		def, err = vd.GetVersion(ctx, agent, next.DefinitionVersion)
		if err == nil && def.ApplyToRunning {
			def, err = w.cfg.Definitions.Get(ctx, agent)
		}
	} else {
		def, err = w.cfg.Definitions.Get(ctx, agent)
	}
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return fmt.Errorf("%w: %s: %w", errNoDefinition, agent, err)
		}
		return fmt.Errorf("worker: definition of %s: %w", agent, err)
	}
	m, err := w.modelFor(agent, def.Version, func() (model.Model, error) { return w.cfg.Models(def.Model) })
	if err != nil {
		return fmt.Errorf("%w: %s version %d: model: %w", errNoDefinition, agent, def.Version, err)
	}
	s.def, s.model = &def, m
	next.DefinitionVersion = def.Version
	next.Limits = def.Budget
	return nil
}

// ensure loads the definition for a session taken over mid-run.
func (s *session) ensure(ctx context.Context) error {
	if s.def != nil {
		return nil
	}
	next := s.st.clone()
	return s.resolve(ctx, &next)
}

// next takes the next step of a working session: the next tool call of
// the last answer, else a model call.
func (s *session) next(ctx context.Context) error {
	if err := s.ensure(ctx); err != nil {
		return err
	}
	if s.st.tickExpired(time.Now()) {
		return s.tickTimeout(ctx)
	}
	if len(s.st.Calls) > 0 {
		return s.toolStep(ctx, s.st.Calls[0], nil)
	}
	if len(s.st.Steers) > 0 {
		return s.flushSteers(ctx)
	}
	return s.modelStep(ctx, nil)
}

// flushSteers moves the queued steer texts into the transcript, where the
// next model call sees them.
func (s *session) flushSteers(ctx context.Context) error {
	next := s.st.clone()
	var entries []Entry
	for _, st := range next.Steers {
		e := s.entry(&next, KindControl)
		e.Name, e.Text = "steer", st.Text
		e.Event = &EventRef{Type: "steer", Seq: st.Seq}
		entries = append(entries, e)
	}
	next.Steers = nil
	return s.commit(ctx, entries, next)
}

// recover resumes a step whose intent was written and whose settlement
// was not, by DESIGN §8's table.
func (s *session) recover(ctx context.Context) error {
	if err := s.ensure(ctx); err != nil {
		return err
	}
	p := *s.st.Pending
	s.log.Warn("recovering step with an intent and no settlement", "step", p.Step, "kind", p.Kind, "tool", p.Tool, "call", p.CallID, "attempt", p.Attempt, "previous_owner", p.Owner)
	switch p.Kind {
	case StepModel:
		return s.modelStep(ctx, &p)
	case StepTool:
		for _, c := range s.st.Calls {
			if c.ID == p.CallID {
				return s.toolStep(ctx, c, &p)
			}
		}
		// The call is not outstanding (cannot happen: settlement removes
		// both at once). Drop the intent rather than loop.
		next := s.st.clone()
		next.Pending = nil
		return s.commit(ctx, nil, next)
	}
	return fmt.Errorf("worker: session %s: pending step of unknown kind %q", s.r.ref, p.Kind)
}

// budget returns the limit of the current run reached before a step of
// kind, and why.
func budget(st State, kind StepKind, now time.Time) (limit, reason string) {
	l := st.Limits
	switch {
	case kind == StepModel && l.MaxTurns > 0 && st.RunTurns >= l.MaxTurns:
		return "max_turns", fmt.Sprintf("max_turns %d reached in this run", l.MaxTurns)
	case l.MaxTokens > 0 && st.RunUsage.Tokens() >= l.MaxTokens:
		return "max_tokens", fmt.Sprintf("max_tokens %d reached in this run (%d used)", l.MaxTokens, st.RunUsage.Tokens())
	case l.MaxCostUSD > 0 && st.RunUsage.CostUSD >= l.MaxCostUSD:
		return "max_cost_usd", fmt.Sprintf("max_cost_usd %.4f reached in this run (%.4f spent)", l.MaxCostUSD, st.RunUsage.CostUSD)
	case l.Deadline > 0 && !st.RunStarted.IsZero() && now.Sub(st.RunStarted) >= l.Deadline.D():
		return "deadline", fmt.Sprintf("deadline %s passed (run started %s)", l.Deadline.D(), st.RunStarted.Format(time.RFC3339))
	}
	return "", ""
}

// stopBudget ends the run as budget_exceeded: a system entry with the
// reason, and error results for the calls that will not run. The session
// is not final: its next event starts a run with a fresh budget.
func (s *session) stopBudget(ctx context.Context, next State, entries []Entry, limit, reason string) error {
	e := s.entry(&next, KindSystem)
	e.Text = "budget exceeded: " + reason
	entries = append(entries, e)
	entries = append(entries, s.closeOpen(&next, "budget exceeded ("+reason+")")...)
	next.setStatus(StatusBudgetExceeded, reason, time.Now().UTC())
	s.w.m.budgetStops.WithLabelValues(limit).Inc()
	s.log.Warn("budget exceeded", "limit", limit, "reason", reason)
	return s.commit(ctx, entries, next)
}

// closeOpen ends the step in flight and answers every outstanding call of
// next with an error result, so every call in the transcript has exactly
// one result: the call of a tool step whose intent is written (it may
// have run, wholly or in part) with "<why>; may or may not have run", so
// the model does not take it for undone; the others with "not run: <why>".
func (s *session) closeOpen(next *State, why string) []Entry {
	inflight := ""
	if p := next.Pending; p != nil {
		if p.Kind == StepTool {
			inflight = p.CallID
		}
		next.Steps = p.Step
		next.Pending = nil
	}
	var out []Entry
	for _, c := range next.Calls {
		e := s.entry(next, KindToolResult)
		e.Name, e.CallID, e.IsError = c.Name, c.ID, true
		e.Result = "not run: " + why
		if c.ID == inflight {
			e.Result = why + mayHaveRun
		}
		out = append(out, e)
	}
	next.Calls = nil
	return out
}

// mayHaveRun ends the result of a call stopped or lost while it ran.
const mayHaveRun = "; may or may not have run"

// stepContext is the context of a step's effect: bounded by the run's
// deadline, and aborted by a cancel or a newer tick (see aborted).
func (s *session) stepContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ectx, done := s.r.effectContext(ctx)
	dctx, cancel := s.deadlineContext(ectx)
	return dctx, func() { cancel(); done() }
}

// deadlineContext bounds ctx by the run's deadline and its tick's timeout.
func (s *session) deadlineContext(ctx context.Context) (context.Context, context.CancelFunc) {
	var deadline time.Time
	if d := s.st.Limits.Deadline.D(); d > 0 && !s.st.RunStarted.IsZero() {
		deadline = s.st.RunStarted.Add(d)
	}
	if t := s.st.Tick; t != nil && t.Result == "" && !t.Deadline.IsZero() && (deadline.IsZero() || t.Deadline.Before(deadline)) {
		deadline = t.Deadline
	}
	if !deadline.IsZero() {
		return context.WithDeadline(ctx, deadline)
	}
	return context.WithCancel(ctx)
}

// writeIntent commits the intent of a new step.
func (s *session) writeIntent(ctx context.Context, next State) error {
	next.Updated = time.Now().UTC()
	rev, err := s.w.store.update(ctx, s.r.ref, next, s.rev)
	if err != nil {
		return err
	}
	s.st, s.rev = next, rev
	s.r.observe(next)
	return nil
}

// modelStep makes one model call: intent, call, settlement. With rec it
// makes again the call of an earlier worker's intent.
func (s *session) modelStep(ctx context.Context, rec *Intent) error {
	now := time.Now().UTC()
	if limit, reason := budget(s.st, StepModel, now); limit != "" && (rec == nil || limit != "max_turns") {
		next := s.st.clone()
		if rec != nil {
			next.UnknownUsage++
		}
		return s.stopBudget(ctx, next, nil, limit, reason)
	}
	var in Intent
	if rec == nil {
		next := s.st.clone()
		next.Turns++
		next.RunTurns++
		in = Intent{Kind: StepModel, Step: next.Steps + 1, Turn: next.Turns, Entry: next.NextEntry, Owner: s.w.cfg.ID, Started: now}
		next.Pending = &in
		s.trace(ctx, TracePoint{Phase: PhaseIntent, Kind: StepModel, Step: in.Step})
		if err := s.writeIntent(ctx, next); err != nil {
			return err
		}
	} else {
		in = *rec
		if in.Attempt >= s.w.cfg.MaxRecoveries {
			return s.failStep(ctx, fmt.Sprintf("model call interrupted %d times; not made again", in.Attempt+1))
		}
		s.w.m.recoveries.WithLabelValues(string(StepModel), "remade").Inc()
		next := s.st.clone()
		next.Pending.Attempt++
		next.Pending.Owner = s.w.cfg.ID
		next.UnknownUsage++
		if err := s.writeIntent(ctx, next); err != nil {
			return err
		}
		in = *next.Pending
	}
	s.trace(ctx, TracePoint{Phase: PhaseEffect, Kind: StepModel, Step: in.Step, Recovery: rec != nil})
	log := s.log.With("turn", in.Turn, "step", in.Step)

	req := buildRequest(s.def, s.w.cfg.Tools, s.log_)
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
	s.trace(ctx, TracePoint{Phase: PhaseSettle, Kind: StepModel, Step: in.Step, Recovery: rec != nil})
	s.w.m.stepSeconds.WithLabelValues(string(StepModel)).Observe(time.Since(in.Started).Seconds())
	if deadline && s.st.tickExpired(time.Now()) {
		if _, reason := budget(s.st, StepModel, time.Now()); reason == "" {
			next := s.st.clone()
			next.UnknownUsage++
			s.st = next
			return s.tickTimeout(ctx)
		}
	}
	if deadline {
		_, reason := budget(s.st, StepModel, time.Now())
		if reason == "" {
			reason = "deadline passed during a model call"
		}
		next := s.st.clone()
		next.UnknownUsage++
		return s.stopBudget(ctx, next, nil, "deadline", reason)
	}
	if err == nil && len(resp.ToolCalls) > MaxToolCalls {
		err = fmt.Errorf("response has %d tool calls, max %d", len(resp.ToolCalls), MaxToolCalls)
	}
	if err != nil {
		log.Warn("model call failed", "err", err)
		s.w.m.steps.WithLabelValues(string(StepModel), "error").Inc()
		return s.failStep(ctx, "model call failed: "+err.Error())
	}

	next := s.st.clone()
	next.Pending = nil
	next.Steps = in.Step
	next.Usage = next.Usage.Add(resp.Usage)
	next.RunUsage = next.RunUsage.Add(resp.Usage)
	if rec != nil {
		next.UnknownUsage = s.st.UnknownUsage
	}
	var entries []Entry
	if rec != nil {
		e := s.entry(&next, KindSystem)
		e.Turn = in.Turn
		e.Text = fmt.Sprintf("model call of step %d was interrupted and made again; the interrupted call may have been billed, its usage is unknown", in.Step)
		entries = append(entries, e)
	}
	a := s.entry(&next, KindAssistant)
	a.Turn = in.Turn
	a.Text = cut(resp.Text, MaxEntryBytes)
	u := resp.Usage
	a.Usage, a.Model = &u, resp.Model
	entries = append(entries, a)
	next.Calls = nil
	ids := s.callIDs(resp.ToolCalls, next.NextEntry)
	for i, c := range resp.ToolCalls {
		e := s.entry(&next, KindToolCall)
		e.Turn = in.Turn
		id := ids[i]
		args := c.Args
		if len(args) == 0 || !json.Valid(args) {
			args = json.RawMessage(`{}`)
		}
		e.Name, e.CallID, e.Args = c.Name, id, args
		entries = append(entries, e)
		next.Calls = append(next.Calls, CallRef{ID: id, Name: c.Name, Entry: e.ID})
	}
	if len(next.Calls) == 0 {
		next.setStatus(StatusDone, "", time.Now().UTC())
	}
	if err := s.commit(ctx, entries, next); err != nil {
		return err
	}
	s.w.m.steps.WithLabelValues(string(StepModel), "ok").Inc()
	log.Info("model step settled", "tool_calls", len(next.Calls), "input_tokens", resp.Usage.InputTokens, "output_tokens", resp.Usage.OutputTokens, "status", next.Status)
	s.trace(ctx, TracePoint{Phase: PhaseSettled, Kind: StepModel, Step: in.Step, Recovery: rec != nil})
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

// failStep ends the run as failed with reason, clearing any intent and
// answering the outstanding calls.
func (s *session) failStep(ctx context.Context, reason string) error {
	return s.failStepWith(ctx, reason, nil)
}

// failStepWith is failStep with a last change to the next state.
func (s *session) failStepWith(ctx context.Context, reason string, change func(*State)) error {
	next := s.st.clone()
	if change != nil {
		change(&next)
	}
	return s.failRun(ctx, next, nil, reason, reason)
}

// failRun ends the run as failed with reason after entries, answering the
// outstanding calls (see closeOpen) with why.
func (s *session) failRun(ctx context.Context, next State, entries []Entry, reason, why string) error {
	e := s.entry(&next, KindSystem)
	e.Text = reason
	entries = append(entries, e)
	entries = append(entries, s.closeOpen(&next, why)...)
	next.setStatus(StatusFailed, reason, time.Now().UTC())
	return s.commit(ctx, entries, next)
}

// interruptedText is the result of a call recovery will not run again.
const interruptedText = "interrupted" + mayHaveRun

// toolStep runs one tool call: intent, call, settlement. With rec it
// resumes an earlier worker's intent: the call runs again only if its
// stored and current declarations both say replay-safe; otherwise it gets
// a synthetic error result under the reserved id.
func (s *session) toolStep(ctx context.Context, call CallRef, rec *Intent) error {
	now := time.Now().UTC()
	tool, spec, found := s.lookup(call.Name)
	if rec == nil {
		if limit, reason := budget(s.st, StepTool, now); limit != "" {
			return s.stopBudget(ctx, s.st.clone(), nil, limit, reason)
		}
		if !found {
			return s.settleResult(ctx, call, s.st.Steps+1, fmt.Sprintf("unknown tool %q: this agent may call %s", call.Name, strings.Join(s.def.Tools, ", ")), true, "")
		}
		if gate, need, note := s.gate(ctx, call, spec.ReplaySafe); need {
			return s.blockForApproval(ctx, call, gate, note)
		}
	}
	var in Intent
	if rec == nil {
		next := s.st.clone()
		in = Intent{Kind: StepTool, Step: next.Steps + 1, Turn: next.Turns, Entry: next.NextEntry,
			CallID: call.ID, Tool: call.Name, Args: s.args(call), ReplaySafe: spec.ReplaySafe, Owner: s.w.cfg.ID, Started: now}
		next.Pending = &in
		// An approval lets one run through, this one.
		next.Approved = ""
		s.trace(ctx, TracePoint{Phase: PhaseIntent, Kind: StepTool, Step: in.Step, Tool: call.Name, CallID: call.ID})
		if err := s.writeIntent(ctx, next); err != nil {
			return err
		}
	} else {
		in = *rec
		if !(in.ReplaySafe && found && spec.ReplaySafe) {
			s.w.m.recoveries.WithLabelValues(string(StepTool), "synthetic").Inc()
			s.log.Warn("tool call interrupted and not replay-safe: settling a synthetic error result", "tool", call.Name, "call", call.ID)
			return s.settleResult(ctx, call, in.Step, interruptedText, true, "")
		}
		if in.Attempt >= s.w.cfg.MaxRecoveries {
			return s.settleResult(ctx, call, in.Step, fmt.Sprintf("%s; interrupted %d times, not run again", interruptedText, in.Attempt+1), true, "")
		}
		if limit, reason := budget(s.st, StepTool, now); limit != "" {
			next := s.st.clone()
			entries := []Entry{}
			e := s.entry(&next, KindToolResult)
			e.Name, e.CallID, e.Result, e.IsError = call.Name, call.ID, interruptedText+"; not run again: budget exceeded", true
			entries = append(entries, e)
			next.Calls = next.Calls[1:]
			return s.stopBudget(ctx, next, entries, limit, reason)
		}
		s.w.m.recoveries.WithLabelValues(string(StepTool), "rerun").Inc()
		next := s.st.clone()
		next.Pending.Attempt++
		next.Pending.Owner = s.w.cfg.ID
		if err := s.writeIntent(ctx, next); err != nil {
			return err
		}
		in = *next.Pending
	}
	s.trace(ctx, TracePoint{Phase: PhaseEffect, Kind: StepTool, Step: in.Step, Tool: call.Name, CallID: call.ID, Recovery: rec != nil})

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
		res = runTool(tctx, tool, call, in.Args, s.r.ref.Agent, s.r.ref.Session, dir)
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
	s.trace(ctx, TracePoint{Phase: PhaseSettle, Kind: StepTool, Step: in.Step, Tool: call.Name, CallID: call.ID, Recovery: rec != nil})
	s.w.m.stepSeconds.WithLabelValues(string(StepTool)).Observe(time.Since(in.Started).Seconds())
	if timedOut && res.isErr {
		res.text = fmt.Sprintf("tool %s timed out after %s: %s", call.Name, timeout, res.text)
	}
	if deadline {
		// The run's deadline or its tick's timeout cut the call. A call
		// that returned its result anyway keeps it; one that was stopped
		// may have done part of its work.
		_, reason := budget(s.st, StepTool, time.Now())
		tickOut := reason == "" && s.st.tickExpired(time.Now())
		what := "the run's deadline"
		if tickOut {
			what = "the tick timeout"
		}
		next := s.st.clone()
		e := s.entry(&next, KindToolResult)
		e.Name, e.CallID, e.Result, e.IsError, e.Blob = call.Name, call.ID, cut(res.text, MaxEntryBytes), res.isErr, res.blob
		if res.isErr || res.block {
			e.Result = cut(fmt.Sprintf("cancelled by %s%s (%s)", what, mayHaveRun, res.text), MaxEntryBytes)
			e.IsError, e.Blob = true, ""
		}
		next.Calls = next.Calls[1:]
		next.Steps = in.Step
		next.Pending = nil
		if tickOut {
			reason := fmt.Sprintf("%s: the run of tick %s outlived its schedule's timeout", tickTimeoutText, next.Tick.ID)
			s.log.Warn("tick timeout", "schedule", next.Tick.Schedule, "tick", next.Tick.ID)
			next.Tick.TimedOut = true
			return s.failRun(ctx, next, []Entry{e}, reason, reason)
		}
		if reason == "" {
			reason = "deadline passed during a tool call"
		}
		return s.stopBudget(ctx, next, []Entry{e}, "deadline", reason)
	}
	if res.block {
		return s.block(ctx, call, in.Step, res.text)
	}
	return s.settleResult(ctx, call, in.Step, res.text, res.isErr, res.blob)
}

// settleResult settles a call's result under its reserved id.
func (s *session) settleResult(ctx context.Context, call CallRef, step uint64, text string, isErr bool, blob string) error {
	next := s.st.clone()
	e := s.entry(&next, KindToolResult)
	e.Name, e.CallID, e.Result, e.IsError, e.Blob = call.Name, call.ID, cut(text, MaxEntryBytes), isErr, blob
	next.Calls = next.Calls[1:]
	next.Pending = nil
	next.Steps = step
	if err := s.commit(ctx, []Entry{e}, next); err != nil {
		return err
	}
	outcome := "ok"
	if isErr {
		outcome = "error"
	}
	if text == interruptedText {
		outcome = "synthetic"
	}
	s.w.m.steps.WithLabelValues(string(StepTool), outcome).Inc()
	s.log.Info("tool step settled", "turn", next.Turns, "step", step, "tool", call.Name, "call", call.ID, "is_error", isErr)
	s.trace(ctx, TracePoint{Phase: PhaseSettled, Kind: StepTool, Step: step, Tool: call.Name, CallID: call.ID})
	return nil
}

// block parks the session until a human answers call: no result yet, the
// call stays outstanding, the status is blocked with the question.
func (s *session) block(ctx context.Context, call CallRef, step uint64, question string) error {
	next := s.st.clone()
	e := s.entry(&next, KindSystem)
	e.Text = "waiting for a human: " + question
	next.Pending = nil
	next.Steps = step
	next.setStatus(StatusBlocked, "", time.Now().UTC())
	next.WaitingFor = cut(question, 4096)
	next.BlockedCall = call.ID
	s.log.Info("session blocked", "call", call.ID, "tool", call.Name)
	return s.commit(ctx, []Entry{e}, next)
}

// lookup finds a tool the definition allows.
func (s *session) lookup(name string) (tool toolsTool, spec toolsSpec, ok bool) {
	allowed := false
	for _, n := range s.def.Tools {
		if n == name {
			allowed = true
			break
		}
	}
	if !allowed {
		return nil, toolsSpec{}, false
	}
	t, ok := s.w.cfg.Tools.Get(name)
	if !ok {
		return nil, toolsSpec{}, false
	}
	return t, t.Spec(), true
}

// args returns the arguments of a call from its tool_call entry.
func (s *session) args(call CallRef) json.RawMessage {
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

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const note = "\n[cut: %d bytes more]"
	keep := n - 64
	for keep > 0 && !utf8Start(s[keep]) {
		keep--
	}
	return s[:keep] + fmt.Sprintf(note, len(s)-keep)
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

func extInt(v any) int {
	switch x := v.(type) {
	case int32:
		return int(x)
	case int:
		return x
	case string:
		var n int
		fmt.Sscan(x, &n)
		return n
	}
	return 0
}
