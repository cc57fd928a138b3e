package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/record"
)

// A worker that restarts with the identity it had (a stable --id, as
// `jetloop dev`'s workers have) takes its sessions back at once instead of
// waiting out their leases. Every run of the process is an incarnation
// with an id of its own, written into each lease it holds and into its
// start record (jl_leases key _start.<worker>), and every incarnation
// answers on jl.worker.<worker>.<incarnation> while it lives. A lease held
// under this worker's id by another incarnation whose subject has no
// responders (its connection is gone: the process died) is its dead
// predecessor's: the new incarnation deletes it, conditional on its
// revision, and runs the session, which recovers the step in flight. Its
// predecessor's tool processes were stopped by the sweep before. A lease
// of another worker, or of an incarnation that still answers (two
// processes started with one id), waits for its TTL as before.

// livenessWait bounds the question whether an incarnation still lives: a
// dead one's subject has no responders, which the server says at once.
const livenessWait = time.Second

// startRecord is a worker's start record.
type startRecord struct {
	Incarnation string    `json:"incarnation"`
	Previous    string    `json:"previous,omitempty"`
	Started     time.Time `json:"started"`
}

// startIncarnation begins this process's incarnation: it answers on its
// liveness subject from now on and writes the start record.
func (w *Worker) startIncarnation(ctx context.Context) error {
	w.incarnation = uuid.NewString()
	w.leases.incarnation = w.incarnation
	subject, err := w.names.Incarnation(w.cfg.ID, w.incarnation)
	if err != nil {
		return fmt.Errorf("worker %s: %w", w.cfg.ID, err)
	}
	if w.alive, err = w.nc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond([]byte("alive")) }); err != nil {
		return fmt.Errorf("worker %s: answer on %s: %w", w.cfg.ID, subject, err)
	}
	if err := w.nc.FlushTimeout(10 * time.Second); err != nil {
		return fmt.Errorf("worker %s: answer on %s: %w", w.cfg.ID, subject, err)
	}
	key, err := w.names.StartKey(w.cfg.ID)
	if err != nil {
		return fmt.Errorf("worker %s: %w", w.cfg.ID, err)
	}
	rec := startRecord{Incarnation: w.incarnation, Started: time.Now().UTC()}
	if e, err := w.leases.kv.Get(ctx, key); err == nil {
		var prev startRecord
		if json.Unmarshal(e.Value(), &prev) == nil {
			rec.Previous = prev.Incarnation
		}
	}
	b, _ := json.Marshal(rec)
	if _, err := w.leases.kv.Put(ctx, key, b); err != nil {
		return fmt.Errorf("worker %s: write start record %s: %w", w.cfg.ID, key, err)
	}
	w.log.Info("worker incarnation started", "incarnation", w.incarnation, "previous", rec.Previous)
	return nil
}

// gone reports whether incarnation inc of this worker no longer lives:
// nobody answers on its subject.
func (w *Worker) gone(ctx context.Context, inc string) bool {
	subject, err := w.names.Incarnation(w.cfg.ID, inc)
	if err != nil {
		return false
	}
	rctx, cancel := context.WithTimeout(ctx, livenessWait)
	defer cancel()
	_, err = w.nc.RequestWithContext(rctx, subject, nil)
	return errors.Is(err, nats.ErrNoResponders)
}

// predecessor reports whether a lease value is held by a dead earlier
// incarnation of this worker.
func (w *Worker) predecessor(ctx context.Context, v leaseValue) bool {
	if v.Owner != w.cfg.ID || v.Incarnation == "" || v.Incarnation == w.incarnation {
		return false
	}
	if !w.gone(ctx, v.Incarnation) {
		w.log.Error("another process runs with this worker's id; give each its own --id", "incarnation", v.Incarnation)
		return false
	}
	return true
}

// reclaim takes back, at start, the sessions whose leases a dead earlier
// incarnation of this worker holds, and runs each at once: their
// deliveries stay with the dead process until the consumers' ack wait,
// but a session is read from its streams, not from its deliveries.
func (w *Worker) reclaim(ctx context.Context) error {
	lister, err := w.leases.kv.ListKeys(ctx)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil
		}
		return fmt.Errorf("worker %s: list leases: %w", w.cfg.ID, err)
	}
	var keys []string
	for k := range lister.Keys() {
		if !strings.HasPrefix(k, "_") {
			keys = append(keys, k)
		}
	}
	// One question an incarnation, not one a lease: an incarnation that
	// keeps its connection but does not answer (a stopped process) costs
	// livenessWait each time, and the worker consumes nothing until this
	// is done.
	dead := map[string]bool{}
	n := 0
	for _, key := range keys {
		e, err := w.leases.kv.Get(ctx, key)
		if err != nil {
			continue
		}
		var v leaseValue
		if json.Unmarshal(e.Value(), &v) != nil {
			continue
		}
		gone, asked := dead[v.Incarnation]
		if !asked {
			gone = w.predecessor(ctx, v)
			if v.Owner == w.cfg.ID {
				dead[v.Incarnation] = gone
			}
		}
		if !gone {
			continue
		}
		ref, err := w.names.ParseSessionKey(key)
		if err != nil || !w.serves(ref.Agent) {
			continue
		}
		if err := w.leases.kv.Delete(ctx, key, jetstream.LastRevision(e.Revision())); err != nil {
			if !record.IsConflict(err) {
				w.log.Warn("reclaim lease", "key", key, "err", err)
			}
			continue
		}
		w.log.Warn("taking back a session from this worker's dead incarnation", "agent", ref.Agent, "session", ref.Session, "incarnation", v.Incarnation)
		w.m.reclaims.Inc()
		w.startRunner(ctx, ref)
		n++
	}
	if n > 0 {
		w.log.Info("sessions taken back after a restart", "sessions", n)
	}
	return nil
}

// serves reports whether this worker runs agent's sessions.
func (w *Worker) serves(agent string) bool {
	if len(w.cfg.Agents) == 0 {
		return true
	}
	for _, a := range w.cfg.Agents {
		if a == agent {
			return true
		}
	}
	return false
}
