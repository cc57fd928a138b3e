package worker

import (
	"context"
	"testing"

	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/window"
)

// OnRetentionListed calls f in every retention pass of the test, after
// the pass has read the states it decides on.
func OnRetentionListed(t testing.TB, f func(agent string)) {
	retentionListed = f
	t.Cleanup(func() { retentionListed = nil })
}

// OnRetentionPurged calls f in every removal of the test, right after
// the session's records are purged.
func OnRetentionPurged(t testing.TB, f func(ref streams.SessionRef)) {
	retentionPurged = f
	t.Cleanup(func() { retentionPurged = nil })
}

// OnRequestBuilt calls f with every model request a session builds, the
// one window.BuildRequest builds whole from the same input, and whether
// the session's went on from the request before.
func OnRequestBuilt(t testing.TB, f func(got, whole window.Context, appended bool)) {
	requestBuilt = f
	t.Cleanup(func() { requestBuilt = nil })
}

// TrimConsumed is trimConsumed, for a session whose last consumed event
// is inSeq.
func (w *Worker) TrimConsumed(ctx context.Context, ref streams.SessionRef, inSeq uint64) (uint64, error) {
	return w.trimConsumed(ctx, ref, inSeq)
}

// InputLeft is inputLeft: whether the session has input after the
// sequences st records consumed.
func (w *Worker) InputLeft(ctx context.Context, ref streams.SessionRef, st record.State) (bool, error) {
	return w.inputLeft(ctx, ref, st)
}
