package policies

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/streams"
)

// AuditKind is the kind token of the store's records in JL_AUDIT:
// jl.audit.definition.<agent>.
const AuditKind = "definition"

// Event is one change of an agent's definitions as JL_AUDIT records it: a
// version applied or restored, a rollout started, changed or ended (with
// the guard's figures when it rolled back by itself).
type Event struct {
	Time  time.Time `json:"time"`
	Agent string    `json:"agent"`
	// Change is apply, rollback or rollout.
	Change   string `json:"change"`
	Version  uint64 `json:"version"`
	Revision uint64 `json:"revision"`
	Hash     string `json:"hash"`
	Source   string `json:"source,omitempty"`
	By       string `json:"by,omitempty"`
	// Created is set when the change stored a new version.
	Created  bool        `json:"created,omitempty"`
	Restores uint64      `json:"restores,omitempty"`
	Rollout  *Rollout    `json:"rollout,omitempty"`
	Ended    *RolloutEnd `json:"rollout_ended,omitempty"`
	// Summary says what happened in one line.
	Summary string `json:"summary"`
	// Seq is the record's JL_AUDIT sequence, set when read.
	Seq uint64 `json:"-"`
}

// eventOf is the audit record of an applied change at time now.
func eventOf(a Applied, now time.Time) Event {
	r := a.Record
	by := r.AppliedBy
	if r.Change == ChangeRollout {
		by = r.ChangedBy
	}
	return Event{Time: now, Agent: a.Agent, Change: r.Change, Version: r.Version, Revision: r.Revision, Hash: r.Hash,
		Source: r.Source, By: by, Created: a.Created, Restores: r.Restores, Rollout: r.Rollout, Ended: r.Ended, Summary: Describe(r, a.Created)}
}

// Describe says in one line what the entry rec did.
func Describe(rec Record, created bool) string {
	var parts []string
	switch {
	case rec.Change == ChangeRollback || rec.Restores != 0 && created:
		parts = append(parts, fmt.Sprintf("version %d restores the content of version %d", rec.Version, rec.Restores))
	case created:
		p := fmt.Sprintf("version %d applied", rec.Version)
		if rec.Source != "" {
			p += " from " + rec.Source
		}
		parts = append(parts, p)
	}
	if e := rec.Ended; e != nil {
		p := fmt.Sprintf("rollout of canary v%d beside stable v%d %s", e.Canary, e.Stable, strings.ReplaceAll(e.Outcome, "_", " "))
		if e.Reason != "" {
			p += ": " + e.Reason
		}
		parts = append(parts, p)
	}
	if r := rec.Rollout; r != nil {
		p := "rollout: " + r.String()
		if r.Guard != nil {
			p += " (guard: " + r.Guard.String() + ")"
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		parts = append(parts, fmt.Sprintf("version %d", rec.Version))
	}
	return strings.Join(parts, "; ")
}

// audit records a change in JL_AUDIT. The change is made already: a
// failure is logged, not returned, and the next change of the agent, or
// the next reader of the records (CatchUpAudit), records it.
func (s *Store) audit(ctx context.Context, a Applied) {
	if err := s.publishAudit(ctx, eventOf(a, s.now().UTC())); err != nil {
		s.log.Warn("definition change not recorded in the audit stream", "agent", a.Agent, "version", a.Record.Version, "revision", a.Record.Revision, "err", err)
	}
}

// publishAudit publishes ev with a message id of its agent and revision,
// so that the record a writer publishes and the one a catch-up publishes
// of the same change are stored once (within the stream's duplicate
// window; past it the catch-up finds the writer's record and publishes
// none).
func (s *Store) publishAudit(ctx context.Context, ev Event) error {
	subject, err := s.names.Audit(AuditKind, ev.Agent)
	if err != nil {
		return err
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode audit record of %s revision %d: %w", ev.Agent, ev.Revision, err)
	}
	id := subject + "." + strconv.FormatUint(ev.Revision, 10)
	if _, err := s.js.Publish(ctx, subject, b, jetstream.WithMsgID(id)); err != nil {
		return fmt.Errorf("publish audit record of %s revision %d on %s: %w", ev.Agent, ev.Revision, subject, err)
	}
	return nil
}

// auditStream is JL_AUDIT, opened on first use.
func (s *Store) auditStream(ctx context.Context) (jetstream.Stream, error) {
	s.mu.Lock()
	st := s.audits
	s.mu.Unlock()
	if st != nil {
		return st, nil
	}
	st, err := s.js.Stream(ctx, s.names.StreamAudit())
	if err != nil {
		return nil, fmt.Errorf("policies: open stream %s: %w", s.names.StreamAudit(), err)
	}
	s.mu.Lock()
	s.audits = st
	s.mu.Unlock()
	return st, nil
}

// CatchUpAudit records in JL_AUDIT the newest change of agent (of every
// agent, for ""), when the process that stored it stopped before
// recording it, so that the records list every change. A change older
// than the stream's oldest record is not recorded again: its record may
// have aged out. Every change of an agent catches up first too, so at
// most the newest change of each agent can be missing.
func (s *Store) CatchUpAudit(ctx context.Context, agent string) error {
	agents := []string{agent}
	if agent == "" {
		recs, err := s.Records(ctx)
		if err != nil {
			return err
		}
		agents = agents[:0]
		for _, r := range recs {
			agents = append(agents, r.Definition.Name)
		}
	}
	for _, a := range agents {
		st, err := s.state(ctx, a)
		if err != nil {
			return fmt.Errorf("policies: audit of %q: %w", a, err)
		}
		if err := s.catchUp(ctx, st); err != nil {
			return fmt.Errorf("policies: audit of %q: %w", a, err)
		}
	}
	return nil
}

// catchUp records the newest entry of st in JL_AUDIT unless the stream
// holds its record (or one of a later entry) already.
func (s *Store) catchUp(ctx context.Context, st agentState) error {
	if len(st.h.recs) == 0 {
		return nil
	}
	newest := st.h.recs[len(st.h.recs)-1]
	if newest.Revision != st.rev || newest.Version == 0 {
		return nil // deleted since, or stored before changes were recorded
	}
	subject, err := s.names.Audit(AuditKind, st.agent)
	if err != nil {
		return err
	}
	stream, err := s.auditStream(ctx)
	if err != nil {
		return err
	}
	m, err := stream.GetLastMsgForSubject(ctx, subject)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return fmt.Errorf("read the last record on %s: %w", subject, err)
	default:
		var ev Event
		if json.Unmarshal(m.Data, &ev) == nil && ev.Revision >= newest.Revision {
			return nil
		}
	}
	at := newest.AppliedAt
	if newest.Change == ChangeRollout {
		at = newest.ChangedAt
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("read %s: %w", s.names.StreamAudit(), err)
	}
	if f := info.State.FirstTime; info.State.Msgs > 0 && at.Before(f) {
		return nil
	}
	// A new version is an apply or a rollback; a rollout change repeats
	// the version it serves.
	a := Applied{Agent: st.agent, Record: newest, Created: newest.Change != ChangeRollout, Changed: true}
	if err := s.publishAudit(ctx, eventOf(a, at)); err != nil {
		return err
	}
	s.log.Info("definition change recorded late in the audit stream", "agent", st.agent, "version", newest.Version, "revision", newest.Revision)
	return nil
}

// Events reads the definition changes recorded in JL_AUDIT since since,
// of one agent or (agent "") of every one: at most n, the newest, oldest
// first.
func Events(ctx context.Context, js jetstream.JetStream, names streams.Names, agent string, since time.Time, n int) ([]Event, error) {
	var filter string
	if agent != "" {
		s, err := names.Audit(AuditKind, agent)
		if err != nil {
			return nil, err
		}
		filter = s
	} else {
		// "_" is no agent name: what precedes it is the kind's prefix.
		s, err := names.Audit(AuditKind, "_")
		if err != nil {
			return nil, err
		}
		filter = strings.TrimSuffix(s, "_") + ">"
	}
	cons, err := js.OrderedConsumer(ctx, names.StreamAudit(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &since,
	})
	if err != nil {
		return nil, fmt.Errorf("policies: read %s: %w", names.StreamAudit(), err)
	}
	defer streams.DropConsumer(ctx, js, names.StreamAudit(), cons)
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("policies: read %s: %w", names.StreamAudit(), err)
	}
	pending := info.NumPending
	var out []Event
	for pending > 0 {
		batch, err := cons.Fetch(int(min(pending, 256)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("policies: read %s: %w", names.StreamAudit(), err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			pending = md.NumPending
			var ev Event
			if json.Unmarshal(m.Data(), &ev) != nil {
				continue
			}
			ev.Seq = md.Sequence.Stream
			out = append(out, ev)
			if len(out) > n {
				out = out[1:]
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, fmt.Errorf("policies: read %s: %w", names.StreamAudit(), err)
		}
		if got == 0 {
			break
		}
	}
	return out, nil
}
