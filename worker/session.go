package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/window"
)

// session is a session being run by its lease holder: the state as last
// written, its revision (the fencing token) and its live context.
type session struct {
	r   *runner
	w   *Worker
	log *slog.Logger
	st  record.State
	rev uint64
	// live is the live context (record.State.Live): what the next model
	// call is built from, never the whole transcript of a compacted
	// session.
	live  []record.Entry
	calls map[string]bool // call ids used in the live context
	// reqs builds the model calls' requests from live, each going on
	// from the one before.
	reqs window.Builder
	// dir is the session's work folder once made (dirMade): see workDir.
	dir     string
	dirMade bool
	// ctlRead is the state revision at which JL_CTL was last read, and
	// ctlReadAt when.
	ctlRead   uint64
	ctlReadAt time.Time
	// fresh is the step of the pending intent this session wrote with the
	// settlement before it and whose effect has not begun (see
	// mergeNext); 0 when there is none.
	fresh uint64
	// checked is the pending intent whose reserved ids were last looked
	// up at a boundary (see adoptStored).
	checked record.Intent

	def   *policies.Definition
	model model.Model
	// span is the span of the run in this worker; nil when none is open
	// (see spans.go); steps is its steps' tracer once looked up.
	span  trace.Span
	steps trace.Tracer
	// stepSeries are the step metrics' series (see series).
	stepSeries *stepSeries
}

// claim takes the session over: it writes the state (creating it for a
// new session) with this worker as owner and a new epoch, so a worker
// whose lease lapsed is fenced from its next write on, then reads the
// live context: the entries the state's window names, by key.
func (r *runner) claim(ctx context.Context) (*session, error) {
	w := r.w
	s := &session{r: r, w: w, log: r.log, calls: map[string]bool{}}
	for attempt := 0; ; attempt++ {
		st, rev, err := w.store.Load(ctx, r.ref)
		now := time.Now().UTC()
		switch {
		case errors.Is(err, ErrNotFound):
			st = record.NewState(r.ref.Agent, r.ref.Session, now)
			st.Owner, st.Epoch = w.cfg.ID, 1
			var first *input
			if first, err = r.firstInput(ctx); err == nil && first == nil {
				return nil, errNoSession
			}
			if err == nil {
				st.CtlSeq, err = r.skipOrphans(ctx, first.time)
			}
			if err == nil {
				rev, err = w.store.Create(ctx, r.ref, st)
			}
		case err == nil:
			if t := st.Tick; t != nil && st.Status == record.StatusWorking && t.Result == "" && !t.Deadline.IsZero() && st.Updated.Before(now) {
				// The run was interrupted (its worker died or stopped):
				// the time nobody ran it does not count against its
				// tick's timeout.
				t.Deadline = t.Deadline.Add(now.Sub(st.Updated))
			}
			st.Owner, st.Epoch, st.Updated = w.cfg.ID, st.Epoch+1, now
			rev, err = w.store.Update(ctx, r.ref, st, rev)
		}
		if errors.Is(err, record.ErrFenced) && attempt < 3 {
			// A lapsed owner wrote between our lease and our claim.
			continue
		}
		if err != nil {
			return nil, err
		}
		s.st, s.rev = st, rev
		r.observe(st)
		break
	}
	// A crash between a state write and its index entry left the index
	// behind: the session's taker puts it right.
	if err := w.index.Heal(ctx, s.st); err != nil {
		r.log.Warn("heal the session's status index entry", "err", err)
	}
	entries, err := w.store.ReadSpans(ctx, r.ref, s.st.Live(), s.rev)
	if err != nil {
		return nil, err
	}
	s.live = entries
	for _, e := range entries {
		if e.CallID != "" {
			s.calls[e.CallID] = true
		}
	}
	// Turn and step change as the session runs: lines pass them.
	s.log.Debug("session claimed", "epoch", s.st.Epoch, "status", s.st.Status, "turn", s.st.Turns, "entries", len(entries))
	return s, nil
}

// ctlRecheck is how often a running session reads JL_CTL although
// nothing said a message came: a safety net for a message the control
// subscription missed (a reconnect), which the session would otherwise
// see at its next rest.
const ctlRecheck = 50 * time.Millisecond

// loop runs steps until the session rests with no input left. ctx is the
// worker's (it ending stops the loop at the next step boundary); sctx is
// the steps'. Control messages are applied before anything else at every
// step boundary: JL_CTL is read (one direct get) whenever the control
// subscription or a delivery says a message came, before the session
// rests, and at the first boundary ctlRecheck after the last read.
func (s *session) loop(ctx, sctx context.Context) error {
	for {
		if err := context.Cause(sctx); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			// Stopping between steps: an intent whose effect has not
			// begun is taken back, so that no recovery takes it for an
			// interrupted step.
			if s.isFresh() {
				next := s.st.Clone()
				s.withdraw(&next)
				if werr := s.commit(sctx, nil, next); werr != nil {
					s.log.Warn("withdraw the next step's intent before stopping", "err", werr)
				}
			}
			return err
		}
		s.r.busyWatch.Store(s.st.Status == record.StatusWorking && takesBusyInputs(s.def))
		var err error
		switch {
		case s.st.Pending != nil && !s.isFresh() && !s.looked():
			// A settlement stored whole is adopted before a control could
			// write over its ids.
			var adopted bool
			adopted, err = s.adoptStored(sctx)
			if err == nil && !adopted {
				continue
			}
		case s.r.takeCtlHint(s.st.CtlSeq) || s.rev != s.ctlRead && (time.Since(s.ctlReadAt) >= ctlRecheck || s.resting()):
			err = s.controls(sctx)
		case s.supersededRun(sctx):
			err = s.endSuperseded(sctx)
		case s.interruptedRun(sctx):
			err = s.endInterrupted(sctx, "")
		case s.st.Status == record.StatusQueued && s.st.Queued != nil && s.st.Queued.Run:
			err = s.continueQueued(sctx)
		case s.isFresh():
			err = s.withSlot(sctx, s.begin)
		case s.st.Pending != nil:
			err = s.withSlot(sctx, s.recover)
		case s.st.Status == record.StatusWorking:
			err = s.withSlot(sctx, s.next)
		case owesCancels(s.st):
			// A run that ended stops the sessions it delegated to first.
			err = s.sendCancels(sctx)
		case owesAnswer(s.st):
			err = s.answer(sctx)
		case s.st.Tick != nil && s.st.Tick.Result == "" && !s.st.Status.Waiting():
			err = s.recordTickResult(sctx)
		default:
			s.trace(sctx, TracePoint{Phase: PhaseAck, Step: s.st.Steps})
			s.r.ack(s.st)
			in, ierr := s.r.nextInput(sctx, s.st.InSeq)
			if ierr != nil {
				return ierr
			}
			if in == nil {
				if s.r.ctlHint.Load() || s.r.wantsCancel(s.st.CtlSeq) != 0 {
					continue
				}
				return nil
			}
			err = s.input(sctx, in)
		}
		if err != nil {
			if errors.Is(err, errAborted) {
				// The control or tick that stopped the step settles it at
				// the next boundary.
				continue
			}
			if c := context.Cause(sctx); c != nil && errors.Is(err, context.Canceled) {
				return c
			}
			return err
		}
	}
}

// resting reports whether the loop would rest at this boundary: no run
// to go on with, no intent to settle.
func (s *session) resting() bool {
	return s.st.Pending == nil && s.st.Status != record.StatusWorking && !(s.st.Status == record.StatusQueued && s.st.Queued != nil && s.st.Queued.Run)
}

// commit settles entries with the next state and, on success, makes them
// the session's; status changes are announced.
func (s *session) commit(ctx context.Context, entries []record.Entry, next record.State) error {
	next.Updated = time.Now().UTC()
	if s.st.Status == record.StatusWorking && next.Status.Resting() {
		next.RunEnded = next.Updated
	}
	next.Owner = s.w.cfg.ID
	if s.st.Status != next.Status {
		// A crash before the index write below leaves this mark, by
		// which a worker heals the entry (repairIndex).
		s.w.markIndex(ctx, s.r.ref)
	}
	rev, err := s.w.store.Settle(ctx, s.r.ref, entries, next, s.rev)
	if err != nil {
		return err
	}
	prev, prevSummary, prevTick := s.st.Status, s.st.Summary, s.st.LastTickID
	prevQueued := s.st.Queued
	s.st, s.rev = next, rev
	s.fresh = 0
	if next.LastTickID != prevTick && next.LastTickID != "" {
		s.w.rememberTick(ctx, next.LastTickID)
	}
	s.r.observe(next)
	s.live = append(s.live, entries...)
	if next.Summary != prevSummary {
		s.relive(next)
	}
	for _, e := range entries {
		if e.CallID != "" {
			s.calls[e.CallID] = true
		}
	}
	if prev != next.Status {
		s.w.indexStatus(ctx, prev, next)
		s.w.announce(ctx, s.r.ref, prev, next)
		if prev == record.StatusWorking {
			s.runEnded(ctx, next)
		}
		if next.Status != record.StatusWorking {
			s.endRun(next.Status, next.Reason)
		}
	}
	if next.Status != record.StatusWorking {
		// A run that rests or waits holds no slot.
		s.r.giveBackSlot(ctx)
	}
	if prev == record.StatusQueued && prevQueued != nil && next.Status != record.StatusQueued {
		// No longer waiting: its place goes to the sessions behind it.
		s.leaveQueue(ctx, prevQueued.Slot)
	}
	return nil
}

// entry returns a new entry with the next id of next, advancing it.
func (s *session) entry(next *record.State, kind record.Kind) record.Entry {
	e := record.Entry{ID: next.NextEntry, Kind: kind, Turn: next.Turns, Time: time.Now().UTC()}
	next.NextEntry++
	return e
}

func (s *session) trace(ctx context.Context, p TracePoint) {
	if s.w.cfg.Trace == nil {
		return
	}
	p.Agent, p.Session = s.r.ref.Agent, s.r.ref.Session
	s.w.cfg.Trace(ctx, p)
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const note = "\n[cut: %d bytes more]"
	keep := n - 64
	for keep > 0 && !utf8Start(s[keep]) {
		keep--
	}
	return s[:keep] + fmt.Sprintf(note, len(s)-keep)
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }
