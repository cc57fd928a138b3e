package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/dlq"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/projection"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/schedule"
	"github.com/jetloop/jetloop/window"
)

// input records one event: it starts a run, joins the transcript of a
// waiting session, or goes to the dead letter stream.
func (s *session) input(ctx context.Context, in *input) error {
	next := s.st.Clone()
	next.InSeq = in.seq
	if q := next.Queued; next.Status == record.StatusQueued && q != nil && !q.Run {
		// The event it was queued for is read again: what it does now
		// decides the status (queue writes the session queued again).
		next.SetStatus(q.Was, "", time.Now().UTC())
	}
	ev, err := events.FromMsg(&nats.Msg{Subject: in.subject, Header: in.header, Data: in.data})
	if err != nil {
		if err := s.w.deadLetter(ctx, in.subject, in.header, in.data, in.seq, dlq.NotCloudEvent, "not a CloudEvent: "+err.Error()); err != nil {
			return err
		}
		return s.commit(ctx, nil, next)
	}
	switch ev.Type() {
	case TypeWaitTimeout:
		return s.timedOut(ctx, in, ev, next)
	case TypeDelegationDeadline:
		return s.deadlinePassed(ctx, in, ev, next)
	case events.TypeDelegateResult:
		// Also for a session that ended: a child cancelled with its run
		// answers late, with what it consumed.
		return s.childAnswered(ctx, in, ev, next)
	}
	tick := schedule.IsTick(&nats.Msg{Header: in.header})
	if s.st.Status.Final() {
		reason := fmt.Sprintf("session is %s", s.st.Status)
		if err := s.w.deadLetter(ctx, in.subject, in.header, in.data, in.seq, dlq.SessionCancelled, reason); err != nil {
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
	if ev.Type() == events.TypeDelegate {
		if handled, err := s.delegation(ctx, in, ev, &next); handled || err != nil {
			return err
		}
	}
	if call, ok := s.threadAnswer(ev); ok {
		e := s.eventEntry(&next, in, ev)
		// A reply in the chat thread where ask_human asked is the answer.
		_ = s.ensure(ctx)
		e.Text = s.eventText(ctx, ev, in.seq, e.Event.Count)
		r := s.entry(&next, record.KindToolResult)
		r.Name, r.CallID, r.Result = call.Name, call.ID, cut(strings.TrimSpace(projection.DataText(ev.DataContentType(), ev.Data())), record.MaxEntryBytes)
		next.Calls = removeCall(next.Calls, call.ID)
		next.Steps++
		now := time.Now().UTC()
		if !next.RunStarted.IsZero() && next.Since.Before(now) {
			// The wait is not the run's: the deadline counts without it.
			next.RunStarted = next.RunStarted.Add(now.Sub(next.Since))
		}
		next.SetStatus(record.StatusWorking, "", now)
		s.log.Info("chat thread reply answers the question", "call", call.ID, "seq", in.seq)
		return s.commit(ctx, []record.Entry{e, r}, next)
	}
	if busy, err := s.busyInput(ctx, in, ev); busy || err != nil {
		return err
	}
	e := s.eventEntry(&next, in, ev)
	if s.st.Status.Waiting() {
		// It joins the context the session resumes with, as the
		// definition it runs on renders it (or by default, when that is
		// gone).
		_ = s.ensure(ctx)
		e.Text = s.eventText(ctx, ev, in.seq, e.Event.Count)
		return s.commit(ctx, []record.Entry{e}, next)
	}
	entries := []record.Entry{e}
	moved, err := s.resolveRun(ctx, &next)
	if err != nil {
		if errors.Is(err, errNoModel) {
			// The definition is there but this worker cannot build its
			// model (an API key variable it lacks): the run fails, and
			// its status says why, where a user looks; the event goes to
			// the dead letters (not the transcript), to be redriven once
			// the worker has its key.
			reason := fmt.Sprintf("%v (on worker %s)", err, s.w.cfg.ID)
			if derr := s.w.deadLetter(ctx, in.subject, in.header, in.data, in.seq, dlq.NoDefinition, reason); derr != nil {
				return derr
			}
			next.NextEntry--
			entries = nil
			if tick && next.Tick != nil {
				next.Tick.Result = schedule.ResultFailed
				s.w.recordTick(ctx, s.r.ref.Agent, next.Tick.Schedule, next.Tick.ID, next.Tick.Slot, schedule.ResultFailed, errors.New(reason))
			}
			s.log.Error("run cannot start: no model", "err", err)
			return s.failRun(ctx, next, entries, reason, reason)
		}
		if errors.Is(err, errNoDefinition) {
			if dl := next.Delegation; dl != nil && dl.Seq == in.seq {
				// The delegating call must not wait for a run that will
				// not start.
				if aerr := s.publishAnswer(ctx, dl.Parent, dl.CallID, events.DelegationResult{
					CallID: dl.CallID, Child: s.r.ref.String(), Status: string(record.StatusFailed), Reason: err.Error(),
					Text: "delegated session did not start: " + err.Error(), IsError: true,
				}); aerr != nil {
					return aerr
				}
				dl.Answered = true
			}
			if derr := s.w.deadLetter(ctx, in.subject, in.header, in.data, in.seq, dlq.NoDefinition, err.Error()); derr != nil {
				return derr
			}
			if tick && next.Tick != nil {
				s.w.recordTick(ctx, s.r.ref.Agent, next.Tick.Schedule, next.Tick.ID, next.Tick.Slot, schedule.ResultFailed, err)
				next.Tick = s.st.Clone().Tick
			}
			next.NextEntry--
			return s.commit(ctx, nil, next)
		}
		return err
	}
	// The definition the run resolved renders the event.
	entries[0].Text = s.eventText(ctx, ev, in.seq, e.Event.Count)
	task := events.TaskDigest(entries[0].Text)
	if moved != "" {
		m := s.entry(&next, record.KindSystem)
		m.Text = "definition: " + moved
		entries = append(entries, m)
		s.log.Info("session moves to another definition version", "version", next.DefinitionVersion, "why", moved)
	}
	if hops := extInt(ev.Extensions()[events.ExtHops]); next.Limits.MaxHops > 0 && hops > next.Limits.MaxHops {
		reason := fmt.Sprintf("max_hops %d: event has %d delegation hops", next.Limits.MaxHops, hops)
		return s.stopBudget(ctx, next, entries, "max_hops", reason)
	}
	next.SpendKey = s.spendKey(ctx, s.def, ev)
	if limit, reason, err := s.ceiling(ctx, next); err != nil {
		return err
	} else if limit != "" {
		return s.refuseRun(ctx, next, entries, ev, limit, reason)
	}
	next.Slot = s.runSlot(ctx, s.def, ev)
	if next.Slot != nil {
		g, err := s.takeSlot(ctx, *next.Slot, in.seq)
		if err != nil {
			return err
		}
		if !g.granted {
			return s.queue(ctx, *next.Slot, in.seq, false, g.ahead)
		}
	}
	if !tick {
		// The run is not a tick's: the last tick's timeout and result
		// belong to the run it started.
		next.Tick = nil
	}
	// Tools that answer where the event came from default to its thread.
	next.Thread = events.ThreadOf(ev)
	// Budgets are per run.
	next.RunTurns, next.RunUsage, next.RunToolErrors = 0, model.Usage{}, 0
	next.RunDelegated, next.Ledger, next.RunTask = record.Tree{}, "", task
	next.Runs++
	next.RunStarted = time.Now().UTC()
	if dl := next.Delegation; dl != nil && dl.Seq == in.seq {
		if err := s.startDelegatedRun(ctx, ev, &next, &entries[0]); err != nil {
			return err
		}
	}
	next.SetStatus(record.StatusWorking, "", next.RunStarted)
	// An input that came before the run began may act on it.
	s.r.steerHint.Store(true)
	s.startRun(ctx, ev, in.seq, &next)
	s.log.Info("run started", "seq", in.seq, "type", ev.Type(), "version", next.DefinitionVersion)
	merged := s.mergeNext(ctx, &next, entries)
	if err := s.commit(ctx, entries, next); err != nil {
		return err
	}
	s.merged(merged)
	return nil
}

// eventEntry is the transcript entry of input in, whose event is ev,
// without its text: the definition that runs renders it (eventText).
func (s *session) eventEntry(next *record.State, in *input, ev event.Event) record.Entry {
	e := s.entry(next, record.KindEvent)
	e.Time = in.time.UTC()
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	e.Name = ev.Type()
	e.Event = &record.EventRef{ID: ev.ID(), Source: ev.Source(), Type: ev.Type(), Seq: in.seq}
	if n := extInt(ev.Extensions()[admission.ExtCount]); n > 1 {
		// A debounced burst fired: the data is its latest event's.
		e.Event.Count = n
	}
	if ev.Type() == events.TypeRequest {
		e.Kind = record.KindUser
	}
	return e
}

var (
	errNoDefinition = errors.New("agent has no definition")
	// errNoModel: the definition names a model this worker cannot build.
	errNoModel = errors.New("no model")
)

// resolveRun loads the definition a run that starts now uses, and its
// model, and records the version in next: with VersionedDefinitions the
// session keeps the version it has or moves by the rules of versions and
// rollouts (moved says why it moved), else the latest.
func (s *session) resolveRun(ctx context.Context, next *record.State) (moved string, err error) {
	agent := s.r.ref.Agent
	vd, ok := s.w.cfg.Definitions.(VersionedDefinitions)
	if !ok {
		def, err := s.w.cfg.Definitions.Get(ctx, agent)
		if err != nil {
			return "", definitionError(agent, err)
		}
		return "", s.use(def, policies.Pinned{Version: def.Version, Revision: def.Revision}, next)
	}
	res, err := vd.Resolve(ctx, agent, s.r.ref.Session, pinned(*next))
	if err != nil {
		return "", definitionError(agent, err)
	}
	return res.Moved, s.use(res.Compiled.Definition, res.Pinned, next)
}

// ensure loads the definition for a session taken over mid-run: exactly
// the version its run started on.
func (s *session) ensure(ctx context.Context) error {
	if s.def != nil {
		return nil
	}
	agent := s.r.ref.Agent
	next := s.st.Clone()
	vd, ok := s.w.cfg.Definitions.(VersionedDefinitions)
	if !ok {
		def, err := s.w.cfg.Definitions.Get(ctx, agent)
		if err != nil {
			return definitionError(agent, err)
		}
		return s.use(def, policies.Pinned{Version: def.Version, Revision: def.Revision}, &next)
	}
	res, err := vd.Pinned(ctx, agent, s.r.ref.Session, pinned(next))
	if err != nil {
		return definitionError(agent, err)
	}
	if res.Moved != "" {
		s.log.Warn("run continues on another definition version", "version", res.Pinned.Version, "why", res.Moved)
	}
	return s.use(res.Compiled.Definition, res.Pinned, &next)
}

// use makes def (pinned as p) the session's definition and builds its
// model.
func (s *session) use(def policies.Definition, p policies.Pinned, next *record.State) error {
	agent := s.r.ref.Agent
	m, err := s.w.modelFor(agent, def.Version, func() (model.Model, error) { return s.w.cfg.Models(def.Model) })
	if err != nil {
		return fmt.Errorf("%w: %s version %d: model: %w", errNoModel, agent, def.Version, err)
	}
	s.def, s.model = &def, m
	next.DefinitionVersion, next.DefinitionRevision, next.Rollout = p.Version, p.Revision, p.Rollout
	next.Limits = def.Budget
	next.Ceilings = policies.Limits{}
	if def.Limits != nil {
		next.Ceilings = *def.Limits
	}
	return nil
}

// pinned is what st records of its definition.
func pinned(st record.State) policies.Pinned {
	return policies.Pinned{Version: st.DefinitionVersion, Revision: st.DefinitionRevision, Rollout: st.Rollout}
}

func definitionError(agent string, err error) error {
	if errors.Is(err, ErrNotFound) || errors.Is(err, policies.ErrNotFound) {
		return fmt.Errorf("%w: %s: %w", errNoDefinition, agent, err)
	}
	return fmt.Errorf("worker: definition of %s: %w", agent, err)
}

// next takes the next step of a working session: the next tool call of
// the last answer, else a model call, compacting the context first when
// the call's input would pass the policy's compact_at_tokens.
func (s *session) next(ctx context.Context) error {
	if err := s.ensure(ctx); err != nil {
		return err
	}
	if s.st.TickExpired(time.Now()) {
		return s.tickTimeout(ctx)
	}
	if len(s.st.Calls) > 0 {
		return s.toolStep(ctx, s.st.Calls[0])
	}
	if awaited(s.st) > 0 {
		return s.wait(ctx)
	}
	if len(s.st.Steers) > 0 {
		return s.flushSteers(ctx)
	}
	if s.r.steerHint.Load() {
		if joined, err := s.steerInput(ctx); joined || err != nil {
			return err
		}
	}
	if limit, _ := budget(s.st, record.StepModel, time.Now()); limit == "" && s.compacts() {
		in, c, err := s.window(ctx, s.st.Turns+1)
		if err != nil {
			return err
		}
		if plan, ok := window.Due(in, c); ok {
			return s.compactStep(ctx, plan)
		}
	}
	return s.modelStep(ctx)
}

// flushSteers moves the queued steer texts into the transcript, where the
// next model call sees them.
func (s *session) flushSteers(ctx context.Context) error {
	next := s.st.Clone()
	var entries []record.Entry
	for _, st := range next.Steers {
		e := s.entry(&next, record.KindControl)
		e.Name, e.Text = "steer", st.Text
		e.Event = &record.EventRef{Type: "steer", Seq: st.Seq}
		entries = append(entries, e)
	}
	next.Steers = nil
	merged := s.mergeNext(ctx, &next, entries)
	if err := s.commit(ctx, entries, next); err != nil {
		return err
	}
	s.merged(merged)
	return nil
}

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

// threadAnswer returns the ask_human call a request answers: one from
// the chat thread of the run, while the session is blocked on a question
// (not on an approval) asked there.
func (s *session) threadAnswer(ev event.Event) (record.CallRef, bool) {
	st := s.st
	if ev.Type() != events.TypeRequest || st.Status != record.StatusBlocked || st.Approval != "" || st.Thread == nil || st.Thread.SlackChannel == "" {
		return record.CallRef{}, false
	}
	th := events.ThreadOf(ev)
	if th == nil || th.SlackChannel != st.Thread.SlackChannel || th.SlackTS != st.Thread.SlackTS {
		return record.CallRef{}, false
	}
	return outstanding(st, st.BlockedCall)
}
