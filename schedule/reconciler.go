package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
)

// Definitions lists the agent definitions and reports their changes; the
// policies store satisfies it.
type Definitions interface {
	List(ctx context.Context) ([]policies.Definition, error)
	Watch(ctx context.Context) (<-chan policies.Change, error)
}

// DefaultInterval is how often a reconciler checks every schedule message
// exists even when nothing changed.
const DefaultInterval = 30 * time.Second

// Config configures a Reconciler.
type Config struct {
	Names streams.Names
	// Interval between full passes; default DefaultInterval.
	Interval time.Duration
	Log      *slog.Logger
}

// Reconciler keeps the schedule messages in JL_IN in step with the
// definitions and the breakers.
type Reconciler struct {
	cfg    Config
	js     jetstream.JetStream
	defs   Definitions
	health *HealthStore
	// room is JL_IN's: a new schedule message is a write like any other.
	room *streams.Room
}

// NewReconciler returns a reconciler over js.
func NewReconciler(ctx context.Context, cfg Config, js jetstream.JetStream, defs Definitions) (*Reconciler, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	h, err := NewHealthStore(ctx, js, cfg.Names)
	if err != nil {
		return nil, err
	}
	return &Reconciler{cfg: cfg, js: js, defs: defs, health: h, room: streams.NewRoom(js, cfg.Names.StreamIn())}, nil
}

// Health is the reconciler's health store.
func (r *Reconciler) Health() *HealthStore { return r.health }

// Report says what one pass did.
type Report struct {
	Added, Replaced, Removed, Unchanged, Suspended []string
	// Errors are schedules that could not be installed; the rest were.
	Errors []error
}

func (rep Report) String() string {
	return fmt.Sprintf("added %d, replaced %d, removed %d, unchanged %d, suspended %d, errors %d",
		len(rep.Added), len(rep.Replaced), len(rep.Removed), len(rep.Unchanged), len(rep.Suspended), len(rep.Errors))
}

// Changed reports whether the pass wrote any schedule message.
func (rep Report) Changed() bool {
	return len(rep.Added)+len(rep.Replaced)+len(rep.Removed) > 0
}

// Reconcile makes one pass: every active schedule of every definition has
// exactly its schedule message, and no other schedule message exists. A
// schedule that does not resolve (a pattern the parser refuses) keeps
// the message it has, if any, and records why in its health.
func (r *Reconciler) Reconcile(ctx context.Context) (Report, error) {
	var rep Report
	defs, err := r.defs.List(ctx)
	if err != nil {
		return rep, fmt.Errorf("schedule: list definitions: %w", err)
	}
	stream, err := r.js.Stream(ctx, r.cfg.Names.StreamIn())
	if err != nil {
		return rep, fmt.Errorf("schedule: stream %s: %w", r.cfg.Names.StreamIn(), err)
	}
	existing, err := r.scheduleSubjects(ctx, stream)
	if err != nil {
		return rep, err
	}

	wanted := map[string]bool{}
	for _, d := range defs {
		specs, errs := Specs(d)
		for _, e := range errs {
			rep.Errors = append(rep.Errors, e)
		}
		for _, bad := range d.Schedules {
			if hasSpec(specs, bad.Name) {
				continue
			}
			r.recordInstallError(ctx, d.Name, bad.Name, errs)
			// A schedule that cannot be resolved keeps the message it
			// has: a bad version of a definition (stored by an older
			// release, or by hand) must not stop what runs.
			if subject, err := r.cfg.Names.Sched(d.Name, bad.Name); err == nil {
				wanted[subject] = true
			}
		}
		for _, spec := range specs {
			subject, err := r.cfg.Names.Sched(spec.Agent, spec.Schedule)
			if err != nil {
				rep.Errors = append(rep.Errors, err)
				continue
			}
			h, err := r.health.Update(ctx, spec.Agent, spec.Schedule, func(h *Health) error {
				h.Pattern, h.Expr, h.TimeZone, h.Mode, h.MaxFailures = spec.Pattern, spec.Expr, spec.TimeZone, spec.Mode, spec.MaxFailures
				h.InstallError = ""
				if h.State == "" {
					h.State = StateActive
				}
				return nil
			})
			if err != nil {
				rep.Errors = append(rep.Errors, err)
				continue
			}
			if h.State == StateSuspended {
				rep.Suspended = append(rep.Suspended, spec.Agent+"/"+spec.Schedule)
				continue // its message is removed below
			}
			wanted[subject] = true
			action, err := r.install(ctx, stream, spec)
			if err != nil {
				rep.Errors = append(rep.Errors, err)
				r.recordInstallError(ctx, spec.Agent, spec.Schedule, []error{err})
				continue
			}
			name := spec.Agent + "/" + spec.Schedule
			switch action {
			case "added":
				rep.Added = append(rep.Added, name)
			case "replaced":
				rep.Replaced = append(rep.Replaced, name)
			default:
				rep.Unchanged = append(rep.Unchanged, name)
			}
		}
	}

	for _, subject := range existing {
		if wanted[subject] {
			continue
		}
		if err := stream.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("schedule: remove %s: %w", subject, err))
			continue
		}
		rep.Removed = append(rep.Removed, subject)
	}
	return rep, nil
}

func hasSpec(specs []Spec, name string) bool {
	for _, s := range specs {
		if s.Schedule == name {
			return true
		}
	}
	return false
}

func (r *Reconciler) recordInstallError(ctx context.Context, agent, schedule string, errs []error) {
	var msgs []string
	for _, e := range errs {
		if strings.Contains(e.Error(), "schedule "+schedule) || len(errs) == 1 {
			msgs = append(msgs, e.Error())
		}
	}
	if len(msgs) == 0 || schedule == "" {
		return
	}
	_, err := r.health.Update(ctx, agent, schedule, func(h *Health) error {
		h.InstallError = strings.Join(msgs, "; ")
		if h.State == "" {
			h.State = StateActive
		}
		return nil
	})
	if err != nil {
		r.cfg.Log.Warn("record schedule install error", "agent", agent, "schedule", schedule, "err", err)
	}
}

// scheduleSubjects lists the subjects that hold schedule messages.
func (r *Reconciler) scheduleSubjects(ctx context.Context, stream jetstream.Stream) ([]string, error) {
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(r.cfg.Names.SchedAll()))
	if err != nil {
		return nil, fmt.Errorf("schedule: list schedule subjects: %w", err)
	}
	subjects := make([]string, 0, len(info.State.Subjects))
	for s := range info.State.Subjects {
		subjects = append(subjects, s)
	}
	sort.Strings(subjects)
	return subjects, nil
}

// install writes spec's schedule message unless the subject already holds
// one with the same spec. The write is conditional on the subject's last
// sequence, so of several reconcilers racing one wins and the others find
// its message.
func (r *Reconciler) install(ctx context.Context, stream jetstream.Stream, spec Spec) (string, error) {
	msg, err := spec.Message(r.cfg.Names)
	if err != nil {
		return "", err
	}
	for attempt := 0; attempt < 3; attempt++ {
		var lastSeq uint64
		action := "added"
		last, err := stream.GetLastMsgForSubject(ctx, msg.Subject)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return "", fmt.Errorf("schedule: read %s: %w", msg.Subject, err)
		default:
			if last.Header.Get(hdrSpec) == msg.Header.Get(hdrSpec) {
				return "unchanged", nil
			}
			lastSeq, action = last.Sequence, "replaced"
		}
		if lastSeq == 0 {
			// A new message: JL_IN must have room for it (a replacement
			// takes its predecessor's place). Refused, the schedule's
			// health records why, and the next pass tries again.
			if err := r.room.Check(ctx, 1, len(msg.Data)+1024); err != nil {
				return "", fmt.Errorf("schedule: install %s (%s): %w", msg.Subject, spec.Expr, err)
			}
		}
		_, err = r.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(lastSeq))
		if err == nil {
			r.cfg.Log.Info("schedule installed", "agent", spec.Agent, "schedule", spec.Schedule, "pattern", spec.Expr, "action", action)
			return action, nil
		}
		if !isConflict(err) {
			return "", fmt.Errorf("schedule: install %s (%s): %w", msg.Subject, spec.Expr, err)
		}
	}
	return "", fmt.Errorf("schedule: install %s: the subject kept changing under concurrent writers", msg.Subject)
}

// Run reconciles at start, whenever a definition or a breaker changes, and
// every Interval, until ctx ends.
func (r *Reconciler) Run(ctx context.Context) error {
	defCh, err := r.defs.Watch(ctx)
	if err != nil {
		return fmt.Errorf("schedule: watch definitions: %w", err)
	}
	hw, err := r.health.Watch(ctx)
	if err != nil {
		return err
	}
	defer hw.Stop()
	tick := time.NewTicker(r.cfg.Interval)
	defer tick.Stop()
	pass := func(why string) {
		rep, err := r.Reconcile(ctx)
		if err != nil {
			if ctx.Err() == nil {
				r.cfg.Log.Warn("schedule reconcile failed", "why", why, "err", err)
			}
			return
		}
		for _, e := range rep.Errors {
			r.cfg.Log.Warn("schedule not installed", "err", e)
		}
		if rep.Changed() {
			r.cfg.Log.Info("schedules reconciled", "why", why, "report", rep.String())
		}
	}
	pass("start")
	// Only a breaker opening or closing changes what is installed; tick
	// results alone do not.
	states := map[string]string{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-defCh:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return errors.New("schedule: definition watch closed")
			}
			drain(defCh)
			pass("definitions changed")
		case e, ok := <-hw.Updates():
			if !ok {
				return nil
			}
			if e == nil {
				continue
			}
			var h Health
			if e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &h) == nil {
				if prev, seen := states[e.Key()]; seen && prev == h.State {
					continue
				}
				states[e.Key()] = h.State
			}
			pass("schedule health changed")
		case <-tick.C:
			pass("interval")
		}
	}
}

// drain empties a channel of changes that arrived together.
func drain[T any](ch <-chan T) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}
