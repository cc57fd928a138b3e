package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/dlq"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/schedule"
)

// input records one event: it starts a run, joins the transcript of a
// waiting session, or goes to the dead letter stream.
func (s *session) input(ctx context.Context, in *input) error {
	next := s.st.Clone()
	next.InSeq = in.seq
	ev, err := events.FromMsg(&nats.Msg{Subject: in.subject, Header: in.header, Data: in.data})
	if err != nil {
		if err := s.w.deadLetter(ctx, in.subject, in.header, in.data, in.seq, dlq.NotCloudEvent, "not a CloudEvent: "+err.Error()); err != nil {
			return err
		}
		return s.commit(ctx, nil, next)
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
	e := s.entry(&next, record.KindEvent)
	e.Time = in.time.UTC()
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	e.Name = ev.Type()
	e.Event = &record.EventRef{ID: ev.ID(), Source: ev.Source(), Type: ev.Type(), Seq: in.seq}
	e.Text = eventText(ev.Type(), ev.DataContentType(), ev.Source(), ev.Subject(), ev.Data())
	if n := extInt(ev.Extensions()[admission.ExtCount]); n > 1 {
		// A debounced burst fired: the data is its latest event's.
		e.Event.Count = n
		e.Text = fmt.Sprintf("The latest of a burst of %d events:\n%s", n, e.Text)
	}
	// The admitting trigger's prompt template, rendered at ingest, leads
	// the turn's message; the event follows it.
	if p, perr := admission.Prompt(ev); perr != nil {
		s.log.Warn("unreadable trigger prompt; the event goes without it", "seq", in.seq, "err", perr)
	} else if p != "" {
		e.Text = p + "\n\n" + e.Text
	}
	if ev.Type() == events.TypeRequest {
		e.Kind = record.KindUser
	}
	if s.st.Status.Waiting() {
		// It joins the context the session resumes with.
		return s.commit(ctx, []record.Entry{e}, next)
	}
	if err := s.resolve(ctx, &next); err != nil {
		if errors.Is(err, errNoDefinition) {
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
	if hops := extInt(ev.Extensions()[events.ExtHops]); next.Limits.MaxHops > 0 && hops > next.Limits.MaxHops {
		reason := fmt.Sprintf("max_hops %d: event has %d delegation hops", next.Limits.MaxHops, hops)
		return s.stopBudget(ctx, next, []record.Entry{e}, "max_hops", reason)
	}
	if !tick {
		// The run is not a tick's: the last tick's timeout and result
		// belong to the run it started.
		next.Tick = nil
	}
	// Budgets are per run.
	next.RunTurns, next.RunUsage = 0, model.Usage{}
	next.RunStarted = time.Now().UTC()
	next.SetStatus(record.StatusWorking, "", next.RunStarted)
	s.log.Info("run started", "seq", in.seq, "type", ev.Type())
	return s.commit(ctx, []record.Entry{e}, next)
}

var errNoDefinition = errors.New("agent has no definition")

// resolve loads the definition the session runs on and its model.
func (s *session) resolve(ctx context.Context, next *record.State) error {
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
	next := s.st.Clone()
	return s.resolve(ctx, &next)
}

// next takes the next step of a working session: the next tool call of
// the last answer, else a model call.
func (s *session) next(ctx context.Context) error {
	if err := s.ensure(ctx); err != nil {
		return err
	}
	if s.st.TickExpired(time.Now()) {
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
	next := s.st.Clone()
	var entries []record.Entry
	for _, st := range next.Steers {
		e := s.entry(&next, record.KindControl)
		e.Name, e.Text = "steer", st.Text
		e.Event = &record.EventRef{Type: "steer", Seq: st.Seq}
		entries = append(entries, e)
	}
	next.Steers = nil
	return s.commit(ctx, entries, next)
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
