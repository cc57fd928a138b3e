package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/streams"
)

// maxTrimWalk bounds the events one trim steps over: a session that rests
// with more consumed events than that past its horizon (one that lived
// before the horizon did) loses the rest at its next rests.
const maxTrimWalk = 1024

// trimConsumed removes the session's consumed events in JL_IN beyond the
// newest cfg.EventHorizon of them, as the session rests under its lease:
// a long-lived session (one per repository, say) whose events keep coming
// must not fill JL_IN with events it has read. It removes nothing while
// an event after inSeq (not consumed) is on the subject: the count it
// read is then of consumed events alone, and the purge stops below the
// oldest kept one, so an unconsumed event is never removed. It reports
// how many it removed.
func (w *Worker) trimConsumed(ctx context.Context, ref streams.SessionRef, inSeq uint64) (uint64, error) {
	horizon := w.cfg.EventHorizon
	if horizon < 0 || inSeq == 0 {
		return 0, nil
	}
	subject := w.names.In(ref)
	info, err := w.in.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, fmt.Errorf("worker: trim consumed events of %s: %w", ref, err)
	}
	held := info.State.Subjects[subject]
	if held <= uint64(horizon) {
		return 0, nil
	}
	// Read after the count: no event after inSeq now means none when it
	// was counted (sequences only grow), so every counted one is consumed.
	if _, err := streams.GetMsg(ctx, w.js, w.in, inSeq+1, subject); err == nil {
		return 0, nil
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, fmt.Errorf("worker: trim consumed events of %s: %w", ref, err)
	}
	remove := min(held-uint64(horizon), maxTrimWalk)
	// The oldest kept: the (remove+1)th oldest event on the subject.
	var seq uint64
	for range remove + 1 {
		m, err := streams.GetMsg(ctx, w.js, w.in, seq+1, subject)
		if err != nil {
			return 0, fmt.Errorf("worker: trim consumed events of %s after %d: %w", ref, seq, err)
		}
		seq = m.Sequence
	}
	if seq > inSeq {
		return 0, nil // not consumed: cannot be, but never purge past it
	}
	if err := w.in.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(seq)); err != nil {
		return 0, fmt.Errorf("worker: trim consumed events of %s below %d: %w", ref, seq, err)
	}
	w.m.trimmed.Add(float64(remove))
	return remove, nil
}
