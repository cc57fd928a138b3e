package worker

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
)

// StatusChange is the body of a jl.status.<agent>.<session> message and of
// the JL_AUDIT record of the same change.
type StatusChange struct {
	Agent      string        `json:"agent"`
	Session    string        `json:"session"`
	Status     record.Status `json:"status"`
	Previous   record.Status `json:"previous,omitempty"`
	Since      time.Time     `json:"since"`
	Reason     string        `json:"reason,omitempty"`
	WaitingFor string        `json:"waiting_for,omitempty"`
	Turns      int           `json:"turns"`
	Worker     string        `json:"worker"`
}

// announce publishes a status change that has been written: a core
// message for live watchers and a durable audit record. Both follow the
// KV write, which is the truth; a failure is logged, never retried into a
// second record.
func (w *Worker) announce(ctx context.Context, ref streams.SessionRef, prev record.Status, st record.State) {
	w.m.statuses.WithLabelValues(string(st.Status)).Inc()
	b, err := json.Marshal(StatusChange{
		Agent: ref.Agent, Session: ref.Session, Status: st.Status, Previous: prev,
		Since: st.Since, Reason: st.Reason, WaitingFor: st.WaitingFor, Turns: st.Turns, Worker: w.cfg.ID,
	})
	if err != nil {
		return
	}
	log := w.log.With("agent", ref.Agent, "session", ref.Session)
	log.Info("status", "status", st.Status, "previous", prev, "reason", st.Reason)
	if err := w.nc.Publish(w.names.Status(ref), b); err != nil {
		log.Warn("publish status", "err", err)
	}
	subj, err := w.names.Audit("status", ref.Agent)
	if err != nil {
		return
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := w.js.Publish(actx, subj, b); err != nil {
		log.Warn("audit status change", "err", err)
	}
}

// markIndex marks a session in the status index before the state write
// that changes its status. A failure is logged: the change goes on, and
// only a crash before its index write would leave the entry behind.
func (w *Worker) markIndex(ctx context.Context, ref streams.SessionRef) {
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := w.index.Mark(ictx, ref); err != nil {
		w.log.Warn("status index", "agent", ref.Agent, "session", ref.Session, "err", err)
	}
}

// indexRepairEvery is how often a worker heals the index entries of the
// sessions a crash (or a failed index write) left marked.
const indexRepairEvery = time.Minute

// repairIndex heals the index entries of the marked sessions of the
// agents this worker serves that no worker holds: their status changed in
// a process that died (or whose index write failed) before the index
// said so. A held session is left to its owner, whose next status change
// clears the mark, or to whoever takes it over, who heals it.
func (w *Worker) repairIndex(ctx context.Context) {
	refs, err := w.index.Marked(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("status index repair", "err", err)
		}
		return
	}
	healed := 0
	for _, ref := range refs {
		if ctx.Err() != nil {
			return
		}
		if !w.serves(ref.Agent) {
			continue
		}
		if _, err := w.leases.kv.Get(ctx, w.names.LeaseKey(ref)); !errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		st, _, err := w.store.Load(ctx, ref)
		switch {
		case errors.Is(err, record.ErrNotFound):
			err = w.index.Remove(ctx, ref)
		case err == nil:
			err = w.index.Heal(ctx, st)
		}
		if err != nil {
			w.log.Warn("status index repair", "agent", ref.Agent, "session", ref.Session, "err", err)
			continue
		}
		healed++
	}
	if healed > 0 {
		w.log.Info("status index entries healed", "sessions", healed)
	}
}

// indexStatus records a status change in the status index. A failure is
// logged: the mark markIndex left has the entry healed (repairIndex).
func (w *Worker) indexStatus(ctx context.Context, prev record.Status, next record.State) {
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := w.index.Set(ictx, prev, next); err != nil {
		w.log.Warn("status index", "agent", next.Agent, "session", next.Session, "status", next.Status, "err", err)
	}
}
