package worker

import (
	"context"
	"encoding/json"
	"time"

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

// indexStatus records a status change in the status index. A failure is
// logged: the next worker to take the session heals the entry.
func (w *Worker) indexStatus(ctx context.Context, prev record.Status, next record.State) {
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := w.index.Set(ictx, prev, next); err != nil {
		w.log.Warn("status index", "agent", next.Agent, "session", next.Session, "status", next.Status, "err", err)
	}
}
