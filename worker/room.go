package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jetloop/jetloop/streams"
)

// Writers of JL_IN the worker runs, as its refusals name them.
const (
	writerWaitTimer     = "wait-timer"          // the timeout of an approval or ask_human
	writerDeadlineTimer = "delegation-deadline" // a waiting run's deadline
	writerJitter        = "tick-jitter"         // a tick delayed by its schedule's jitter
	writerAnswer        = "delegate-answer"     // a delegated session's answer to its parent
	writerEphemeralTick = "ephemeral-tick"      // an ephemeral schedule's tick, routed to its own session
)

// inRoom checks JL_IN's room before the worker writes one message of
// about bytes bytes for ref. What settles work already admitted (settles:
// a timeout, a deadline, a jittered tick, an answer) may take JL_IN to
// three quarters of its limits, where new events stop at half
// (streams.Room.Reserve); what starts new work (an ephemeral tick's
// session) stops at half, and at its agent's share. A refusal is counted
// (jetloop_worker_room_refused_total), recorded in JL_AUDIT (kind room)
// and returned, wrapping streams.ErrFull: the caller fails its step,
// which is tried again, or dead-letters what it could not write.
func (w *Worker) inRoom(ctx context.Context, ref streams.SessionRef, writer string, settles bool, bytes int) error {
	bytes += 1024 // headers
	var err error
	if settles {
		err = w.room.Reserve().Check(ctx, 1, bytes)
	} else {
		var refused map[string]error
		refused, err = w.room.Take(ctx, streams.Write{Source: writer, Agents: map[string]int{ref.Agent: 1}, Bytes: bytes})
		if err == nil {
			err = refused[ref.Agent]
		}
	}
	if err == nil {
		return nil
	}
	w.m.roomRefused.WithLabelValues(writer).Inc()
	w.log.Warn("JL_IN has no room for a runtime write", "agent", ref.Agent, "session", ref.Session, "writer", writer, "err", err)
	if subj, aerr := w.names.Audit("room", ref.Agent); aerr == nil {
		b, _ := json.Marshal(map[string]any{"agent": ref.Agent, "session": ref.Session, "writer": writer, "decision": "no_room",
			"reason": err.Error(), "worker": w.cfg.ID, "time": time.Now().UTC()})
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, perr := w.js.Publish(actx, subj, b); perr != nil {
			w.log.Warn("audit a refused runtime write", "agent", ref.Agent, "session", ref.Session, "err", perr)
		}
	}
	return fmt.Errorf("worker: %s of %s: %w", writer, ref, err)
}
