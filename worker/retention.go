package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
)

// DefaultRetentionInterval is how often a worker applies the retention
// of the agents it serves.
const DefaultRetentionInterval = time.Minute

// Retained is what one retention pass of an agent did.
type Retained struct {
	Agent string `json:"agent"`
	// Examined counts the sessions the pass looked at; Removed names the
	// ones it removed.
	Examined int      `json:"examined"`
	Removed  []string `json:"removed"`
	// Kept counts sessions that were due but could not be removed now
	// (leased, changed since the pass read it, or with input they have not
	// consumed); a later pass decides again.
	Kept int `json:"kept"`
}

// Retain applies an agent's retention (policies.Retention) once, as of
// now: every session of the agent at rest (done, failed, cancelled,
// budget_exceeded or idle, with no step in flight, no call outstanding,
// no answer, cancel or tick result it still owes, no fork of it left, and
// no input or control message it has not consumed) that rested longer
// than max_age, or beyond the max_count that rested least long, is
// removed with every record it has: its state, transcript and notes in
// jl_sessions, its blobs, its status index entry, its ledger account,
// its consumed messages in JL_IN and JL_CTL, its lease and its work
// folder here; everything only the state leads a pass to goes before the
// state, so a removal cut short is finished by the next pass. A session that is working, blocked,
// paused or queued is never touched, and each removal holds the
// session's lease, so no worker runs it meanwhile, and finds the state
// the pass decided on (one that changed since waits for the next pass);
// an event that arrives for it afterwards starts a new session of that
// name.
func (w *Worker) Retain(ctx context.Context, agent string, now time.Time) (Retained, error) {
	out := Retained{Agent: agent, Removed: []string{}}
	def, err := w.cfg.Definitions.Get(ctx, agent)
	if errors.Is(err, ErrNotFound) {
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("worker: retention of %s: definition: %w", agent, err)
	}
	pol := def.Retention
	if pol == nil {
		return out, nil
	}
	states, err := w.agentStates(ctx, agent)
	if err != nil {
		return out, err
	}
	if retentionListed != nil {
		retentionListed(agent)
	}
	out.Examined = len(states)
	// A session forked from stays while its forks do: their transcripts
	// hold its blob handles and its events' sequences.
	forked := map[string]bool{}
	for _, l := range states {
		if l.st.Parent != "" {
			forked[l.st.Parent] = true
		}
	}
	var resting []listedState
	for _, l := range states {
		if retainable(l.st, *pol) && !forked[l.st.Session] {
			resting = append(resting, l)
		}
	}
	// Least recently rested last: those beyond max_count go first.
	slices.SortFunc(resting, func(a, b listedState) int { return restedAt(b.st).Compare(restedAt(a.st)) })
	var due []listedState
	for i, l := range resting {
		old := !pol.MaxAge.IsZero() && now.Sub(restedAt(l.st)) > pol.MaxAge.D()
		many := pol.MaxCount > 0 && i >= pol.MaxCount
		if old || many {
			due = append(due, l)
		}
	}
	if len(due) == 0 {
		return out, nil
	}
	blobs, err := w.blobNames(ctx)
	if err != nil {
		return out, err
	}
	for _, l := range due {
		ref, err := streams.NewSessionRef(l.st.Agent, l.st.Session)
		if err != nil {
			continue
		}
		removed, err := w.removeSession(ctx, ref, *pol, blobs, l.rev)
		if err != nil {
			return out, err
		}
		if removed {
			out.Removed = append(out.Removed, l.st.Session)
		} else {
			out.Kept++
		}
	}
	return out, nil
}

// retainable reports whether a session's state lets retention remove it.
func retainable(st record.State, pol policies.Retention) bool {
	if pol.Scope() == policies.RetainEphemeral && !st.Ephemeral {
		return false
	}
	switch st.Status {
	case record.StatusDone, record.StatusFailed, record.StatusCancelled, record.StatusBudgetExceeded, record.StatusIdle:
	default:
		return false
	}
	// A delegated session that has not answered, or a run that owes its
	// children their cancels, is not done with; nor is a tick's run whose
	// result its schedule has not recorded yet.
	if st.Tick != nil && st.Tick.Result == "" {
		return false
	}
	return st.Pending == nil && len(st.Calls) == 0 && len(st.Steers) == 0 && st.Queued == nil && st.Slot == nil &&
		len(st.Children) == 0 && !owesAnswer(st)
}

// restedAt is when a session came to rest: its last run's end, else its
// last write.
func restedAt(st record.State) time.Time {
	if !st.RunEnded.IsZero() {
		return st.RunEnded
	}
	return st.Updated
}

// retentionListed, when set (by tests), is called after a pass has read
// the states it decides on.
var retentionListed func(agent string)

// retentionPurged, when set (by tests), is called right after a removal
// purged a session's records.
var retentionPurged func(ref streams.SessionRef)

// listedState is a session's state as a pass read it, with its revision.
type listedState struct {
	st  record.State
	rev uint64
}

// agentStates reads the state of every session of an agent.
func (w *Worker) agentStates(ctx context.Context, agent string) ([]listedState, error) {
	at, err := events.EncodeToken(agent)
	if err != nil {
		return nil, err
	}
	watch, err := w.sessions.Watch(ctx, at+".*.state", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("worker: retention of %s: list sessions: %w", agent, err)
	}
	defer watch.Stop()
	var out []listedState
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-watch.Updates():
			if !ok {
				return nil, fmt.Errorf("worker: retention of %s: watch closed", agent)
			}
			if e == nil {
				return out, nil
			}
			var st record.State
			if err := json.Unmarshal(e.Value(), &st); err != nil {
				w.log.Warn("retention skips a state that does not decode", "key", e.Key(), "err", err)
				continue
			}
			out = append(out, listedState{st: st, rev: e.Revision()})
		}
	}
}

// blobNames lists jl_blobs, once per pass that removes anything: blob
// names start with the session's key.
func (w *Worker) blobNames(ctx context.Context) ([]string, error) {
	obs, err := w.js.ObjectStore(ctx, w.names.ObjectBlobs())
	if err != nil {
		return nil, fmt.Errorf("worker: retention: open %s: %w", w.names.ObjectBlobs(), err)
	}
	infos, err := obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("worker: retention: list %s: %w", w.names.ObjectBlobs(), err)
	}
	out := make([]string, 0, len(infos))
	for _, i := range infos {
		out = append(out, i.Name)
	}
	return out, nil
}

// removeSession removes one session under its lease, after checking
// again that retention may: the state read under the lease must be the
// one decided on (at revision rev; a session that ran since, or was
// forked, waits for the next pass). It reports false, without an error,
// for a session that is leased, changed or has input left.
func (w *Worker) removeSession(ctx context.Context, ref streams.SessionRef, pol policies.Retention, blobs []string, rev uint64) (bool, error) {
	ls, err := w.leases.acquire(ctx, ref)
	if errors.Is(err, ErrLeased) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	released := false
	defer func() {
		if !released {
			_ = w.leases.release(context.WithoutCancel(ctx), ls)
		}
	}()
	st, cur, err := w.store.Load(ctx, ref)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if cur != rev || !retainable(st, pol) {
		return false, nil
	}
	if left, err := w.inputLeft(ctx, ref, st); err != nil || left {
		return false, err
	}
	// Blobs first, then the records in one purge: a crash in between
	// leaves a session without some blobs, which the next pass removes.
	obs, err := w.js.ObjectStore(ctx, w.names.ObjectBlobs())
	if err != nil {
		return false, fmt.Errorf("worker: retention: open %s: %w", w.names.ObjectBlobs(), err)
	}
	for _, name := range blobs {
		if strings.HasPrefix(name, ref.Key()+".") {
			if err := obs.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
				return false, fmt.Errorf("worker: retention of %s: delete blob %s: %w", ref, name, err)
			}
		}
	}
	// What only the state leads a pass to goes before the state: a
	// removal cut short after the purge below would leave it where no
	// pass finds it again; cut short before, the state is there and the
	// next pass removes it.
	if err := w.index.Remove(ctx, ref); err != nil {
		return false, fmt.Errorf("worker: retention of %s: remove the status index entry: %w", ref, err)
	}
	// The consumed messages only: a message that came since stays.
	if st.InSeq > 0 {
		if err := w.in.Purge(ctx, jetstream.WithPurgeSubject(w.names.In(ref)), jetstream.WithPurgeSequence(st.InSeq+1)); err != nil {
			return false, fmt.Errorf("worker: retention of %s: purge consumed events up to %d: %w", ref, st.InSeq, err)
		}
	}
	if st.CtlSeq > 0 {
		if err := w.ctl.Purge(ctx, jetstream.WithPurgeSubject(w.names.Ctl(ref)), jetstream.WithPurgeSequence(st.CtlSeq+1)); err != nil {
			return false, fmt.Errorf("worker: retention of %s: purge applied control messages up to %d: %w", ref, st.CtlSeq, err)
		}
	}
	// Its delegation ledger account (of a run that ended: a new run
	// opens its own) goes with it.
	if err := w.ledger.Delete(ctx, ref); err != nil {
		return false, fmt.Errorf("worker: retention of %s: %w", ref, err)
	}
	kvs, err := w.js.Stream(ctx, streams.KVStream(w.names.BucketSessions()))
	if err != nil {
		return false, fmt.Errorf("worker: retention of %s: %w", ref, err)
	}
	// State, transcript and notes go in one purge: there is no moment
	// with a state whose entries are gone.
	if err := kvs.Purge(ctx, jetstream.WithPurgeSubject(streams.KVSubject(w.names.BucketSessions(), w.names.SessionKeys(ref)))); err != nil {
		return false, fmt.Errorf("worker: retention of %s: purge records: %w", ref, err)
	}
	if retentionPurged != nil {
		retentionPurged(ref)
	}
	_ = os.RemoveAll(workFolder(w.cfg.WorkDir, ref))
	// The lease last: until it goes, no worker takes the name.
	if err := w.leases.kv.Purge(ctx, ls.key); err == nil {
		released = true
	}
	w.m.retained.Inc()
	w.log.Info("session removed by retention", "agent", ref.Agent, "session", ref.Session, "status", st.Status, "rested", restedAt(st))
	w.auditRemoval(ctx, ref, st)
	return true, nil
}

// inputLeft reports whether the session has input it has not consumed:
// an event after InSeq, a pending debounced burst, a control message
// after CtlSeq.
func (w *Worker) inputLeft(ctx context.Context, ref streams.SessionRef, st record.State) (bool, error) {
	// A pending debounced burst is a schedule message on the session's
	// debounce subject (or one of its keyed ones); the server purges it
	// when it fires.
	for _, subj := range []string{w.names.Debounce(ref), w.names.Debounce(ref) + ".>"} {
		info, err := w.in.Info(ctx, jetstream.WithSubjectFilter(subj))
		if err != nil {
			return false, fmt.Errorf("worker: retention of %s: read %s: %w", ref, subj, err)
		}
		if len(info.State.Subjects) > 0 {
			return true, nil
		}
	}
	for _, c := range []struct {
		s     jetstream.Stream
		subj  string
		after uint64
	}{
		{w.in, w.names.In(ref), st.InSeq},
		{w.ctl, w.names.Ctl(ref), st.CtlSeq},
	} {
		m, err := streams.GetLastMsg(ctx, w.js, c.s, c.subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("worker: retention of %s: read %s: %w", ref, c.subj, err)
		}
		if m.Sequence > c.after {
			return true, nil
		}
	}
	return false, nil
}

// auditRemoval records a removal in JL_AUDIT.
func (w *Worker) auditRemoval(ctx context.Context, ref streams.SessionRef, st record.State) {
	subj, err := w.names.Audit("retention", ref.Agent)
	if err != nil {
		return
	}
	b, err := json.Marshal(map[string]any{
		"agent": ref.Agent, "session": ref.Session, "status": st.Status, "rested": restedAt(st),
		"turns": st.Turns, "entries": st.NextEntry - 1, "worker": w.cfg.ID, "removed": time.Now().UTC(),
	})
	if err != nil {
		return
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := w.js.Publish(actx, subj, b); err != nil {
		w.log.Warn("audit retention", "agent", ref.Agent, "session", ref.Session, "err", err)
	}
}

// retain applies an agent's retention every interval until ctx ends. A
// pass lease in jl_leases makes one worker of many do each pass.
func (w *Worker) retain(ctx context.Context, agent string) {
	t := time.NewTicker(w.cfg.RetentionInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		key, err := w.names.RetentionLeaseKey(agent)
		if err != nil {
			return
		}
		// The pass lease lapses by its TTL: one pass per interval.
		// Per-key TTLs are whole seconds, at least one.
		ttl := max(w.cfg.RetentionInterval.Round(time.Second), time.Second)
		if _, err := w.leases.kv.Create(ctx, key, []byte(w.cfg.ID), jetstream.KeyTTL(ttl)); err != nil {
			// Another worker does this pass (or the bucket is away: the
			// next tick tries again).
			if !errors.Is(err, jetstream.ErrKeyExists) && ctx.Err() == nil {
				w.log.Warn("retention pass lease", "agent", agent, "err", err)
			}
			continue
		}
		res, err := w.Retain(ctx, agent, time.Now())
		if err != nil && ctx.Err() == nil {
			w.log.Warn("retention pass failed", "agent", agent, "err", err)
		} else if len(res.Removed) > 0 {
			w.log.Info("retention pass", "agent", agent, "examined", res.Examined, "removed", len(res.Removed), "kept", res.Kept)
		}
	}
}
