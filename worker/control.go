package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/dlq"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/schedule"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tracing"
)

// Control messages (DESIGN §9) reach a session two ways. Every message is
// in JL_CTL and delivered through the agent's durable consumer to some
// worker, which leases the session (if nobody runs it) and applies it; and
// the owner of a running session subscribes to the session's control
// subject, so it learns of a message in milliseconds. Either way the
// message itself is read from the stream, in sequence order, after the
// state's CtlSeq; applying it and advancing CtlSeq is one state write, so a
// message is applied once however often it is delivered.
//
// Messages are applied at step boundaries. A cancel does not wait for one:
// the owner aborts the step in flight (the model's HTTP request, the tool
// and its process group), and the cancel is applied at the boundary that
// follows at once, settling the aborted step.

// Limits of control application.
const (
	// MaxSteers bounds the steer texts queued in a session's state; a
	// steer beyond it is refused with a note in the transcript.
	MaxSteers = 64
	// maxCtlScan bounds the messages a cancel confirmation reads.
	maxCtlScan = 256
	// cancelConfirmWait bounds how long the owner waits for a cancel it
	// heard on the control subject to show in JL_CTL.
	cancelConfirmWait = 2 * time.Second
)

// errAborted is the cause of a step whose effect the owner stopped: its
// intent stays, and the control that stopped it settles it.
var errAborted = errors.New("step aborted")

var (
	errCancelRequested = fmt.Errorf("%w: cancelled by a control message", errAborted)
	errSuperseded      = fmt.Errorf("%w: %s", errAborted, supersededText)
)

// supersededText is the reason of a run a newer tick of a cancel_previous
// schedule ended.
const supersededText = "cancelled by a newer tick"

// ctlInput is one control message read from JL_CTL.
type ctlInput struct {
	msg  *nats.Msg
	seq  uint64
	time time.Time
}

// nextControl returns the session's first control message after seq, read
// from JL_CTL or, when a replica lags, from a held delivery.
func (r *runner) nextControl(ctx context.Context, seq uint64) (*ctlInput, error) {
	var in *ctlInput
	m, err := streams.GetMsg(ctx, r.w.js, r.w.ctl, seq+1, r.w.names.Ctl(r.ref))
	switch {
	case err == nil:
		in = &ctlInput{msg: &nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}, seq: m.Sequence, time: m.Time}
	case errors.Is(err, jetstream.ErrMsgNotFound):
	default:
		return nil, fmt.Errorf("worker: read control messages of %s after %d: %w", r.ref, seq, err)
	}
	if d, ok := r.heldAfter(seq, true); ok && (in == nil || d.seq < in.seq) {
		var t time.Time
		if meta, _ := d.msg.Metadata(); meta != nil {
			t = meta.Timestamp
		}
		in = &ctlInput{msg: &nats.Msg{Subject: d.msg.Subject(), Header: d.msg.Headers(), Data: d.msg.Data()}, seq: d.seq, time: t}
	}
	return in, nil
}

// onControl is the owner's subscription to the session's control subject:
// it tells the loop to read JL_CTL at its next boundary and, for a cancel,
// aborts the step in flight once the cancel is confirmed in the stream (a
// message on the subject that the stream refused as a duplicate must not
// stop anything).
func (r *runner) onControl(ctx context.Context, m *nats.Msg) {
	r.ctlHint.Store(true)
	msg, err := control.Parse(m)
	if err != nil || msg.Verb != control.Cancel {
		return
	}
	delay := 2 * time.Millisecond
	deadline := time.Now().Add(cancelConfirmWait)
	for {
		if seq, ok := r.findCancel(ctx); ok {
			r.requestCancel(seq)
			return
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(2*delay, 200*time.Millisecond)
	}
}

// findCancel looks in JL_CTL for a cancel not yet applied.
func (r *runner) findCancel(ctx context.Context) (uint64, bool) {
	seq := r.applied.Load()
	subject := r.w.names.Ctl(r.ref)
	for range maxCtlScan {
		m, err := streams.GetMsg(ctx, r.w.js, r.w.ctl, seq+1, subject)
		if err != nil {
			return 0, false
		}
		if msg, err := control.Parse(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}); err == nil && msg.Verb == control.Cancel {
			return m.Sequence, true
		}
		seq = m.Sequence
	}
	return 0, false
}

// requestCancel records a cancel at JL_CTL sequence seq and aborts the
// step in flight.
func (r *runner) requestCancel(seq uint64) {
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	r.ctlHint.Store(true)
	if seq <= r.applied.Load() || seq <= r.cancelSeq {
		return
	}
	r.cancelSeq = seq
	if r.abort != nil {
		r.abort(errCancelRequested)
	}
}

// supersede aborts the step in flight of a tick run a newer tick replaces.
func (r *runner) supersede() {
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	r.superseded = true
	if r.abort != nil {
		r.abort(errSuperseded)
	}
}

// effectContext returns the context of a step's effect: the owner aborts
// it for a cancel or a newer tick. done must be called once the effect
// has returned.
func (r *runner) effectContext(ctx context.Context) (ectx context.Context, done func()) {
	ectx, cancel := context.WithCancelCause(ctx)
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	switch {
	case r.cancelSeq > r.applied.Load():
		cancel(errCancelRequested)
	case r.superseded:
		cancel(errSuperseded)
	case r.interruptSeq > r.runSeq:
		cancel(errInterrupted)
	}
	r.abort = cancel
	return ectx, func() {
		r.ctlMu.Lock()
		r.abort = nil
		r.ctlMu.Unlock()
		cancel(nil)
	}
}

// aborted returns the cause of an effect the owner stopped, nil when it
// was not stopped so.
func aborted(ectx context.Context) error {
	if c := context.Cause(ectx); errors.Is(c, errAborted) {
		return c
	}
	return nil
}

// takeCtlHint reports whether the loop should read JL_CTL at this
// boundary: a message may have arrived, or a cancel waits.
func (r *runner) takeCtlHint(applied uint64) bool {
	hint := r.ctlHint.Swap(false)
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	return hint || r.cancelSeq > applied
}

// wantsCancel returns the confirmed cancel not applied yet, if any.
func (r *runner) wantsCancel(applied uint64) uint64 {
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	if r.cancelSeq > applied {
		return r.cancelSeq
	}
	return 0
}

// forgetCancel drops a cancel the stream never showed.
func (r *runner) forgetCancel() {
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	r.cancelSeq = 0
}

// observe records what the runner's signals need of the state just
// written.
func (r *runner) observe(st record.State) {
	r.applied.Store(st.CtlSeq)
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	r.runSeq = st.InSeq
	if r.interruptSeq <= st.InSeq {
		r.interruptSeq = 0
	}
	r.runTick = ""
	if st.Status == record.StatusWorking && st.Tick != nil && st.Tick.Overlap == schedule.OverlapCancelPrevious && !st.Tick.Superseded {
		r.runTick, r.runInSeq = st.Tick.Schedule, st.InSeq
	} else {
		r.superseded = false
	}
}

// controls applies the control messages JL_CTL holds for the session after
// its CtlSeq, in order. A verb that needs a step boundary without a
// pending intent waits while one is pending (recovery settles it first).
func (s *session) controls(ctx context.Context) error {
	waited := time.Duration(0)
	for {
		in, err := s.r.nextControl(ctx, s.st.CtlSeq)
		if err != nil {
			return err
		}
		if in == nil {
			want := s.r.wantsCancel(s.st.CtlSeq)
			if want == 0 {
				s.ctlRead, s.ctlReadAt = s.rev, time.Now()
				return nil
			}
			// A cancel was confirmed on one replica; another may lag.
			if waited >= cancelConfirmWait {
				s.log.Warn("cancel heard but not found in the control stream; carrying on", "seq", want)
				s.r.forgetCancel()
				s.ctlRead, s.ctlReadAt = s.rev, time.Now()
				return nil
			}
			if err := sleep(ctx, 20*time.Millisecond); err != nil {
				return err
			}
			waited += 20 * time.Millisecond
			continue
		}
		msg, perr := control.Parse(in.msg)
		if perr == nil && s.st.Pending != nil && !s.isFresh() && msg.Verb != control.Steer && msg.Verb != control.Cancel &&
			s.r.wantsCancel(s.st.CtlSeq) <= in.seq {
			// Settle the interrupted step first (recovery); come back at
			// the next boundary. With a cancel behind this message there
			// is nothing to recover: the cancel settles the step.
			s.ctlRead, s.ctlReadAt = s.rev, time.Now()
			return nil
		}
		if err := s.apply(ctx, in, msg, perr); err != nil {
			return err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// apply applies one control message and records its sequence, in one
// state write.
func (s *session) apply(ctx context.Context, in *ctlInput, msg control.Message, perr error) error {
	next := s.st.Clone()
	// The next step's intent, written with the last settlement, has not
	// begun: the control comes first, and the step is decided again
	// after it.
	s.withdraw(&next)
	next.CtlSeq = in.seq
	verb := string(msg.Verb)
	if perr != nil {
		verb = "invalid"
		if err := s.w.deadLetter(ctx, in.msg.Subject, in.msg.Header, in.msg.Data, in.seq, dlq.InvalidControl, "invalid control message: "+perr.Error()); err != nil {
			return err
		}
		s.w.m.controls.WithLabelValues(verb, "invalid").Inc()
		return s.commit(ctx, nil, next)
	}
	log := s.log.With("verb", msg.Verb, "seq", in.seq, "id", msg.ID, "source", msg.Source)
	if first, err := s.w.appliedBefore(ctx, in, msg); err != nil {
		return err
	} else if first != 0 {
		// The sender sent it again after JL_CTL's duplicate window: the
		// stream kept it twice, the session takes it once.
		s.w.m.controls.WithLabelValues(verb, "duplicate").Inc()
		log.Info("control message sent again after the duplicate window; applied once", "first_seq", first)
		return s.commit(ctx, nil, next)
	}
	_, span := s.controlSpan(ctx, in, verb)
	defer span.End()
	now := time.Now().UTC()
	ref := &record.EventRef{ID: msg.ID, Source: msg.Source, Type: events.ControlType(verb), Seq: in.seq}
	var entries []record.Entry
	note := func(kind record.Kind, text string) {
		e := s.entry(&next, kind)
		e.Name, e.Text, e.Event = verb, text, ref
		entries = append(entries, e)
	}
	// ignore records a message that had nothing to act on in the transcript,
	// and goes to the dead letter stream with the reason.
	var dead string
	// armed: the session waits with a timeout; a message that ends the
	// wait disarms its timer.
	armed := !s.st.WaitUntil.IsZero()
	ignore := func(why string) {
		text := fmt.Sprintf("%s from %s ignored: %s", verb, msg.Source, why)
		// The same message again and again (300 cancels of a cancelled
		// session) is one entry: the transcript does not grow with the
		// repeats, each of which the dead letter stream still records.
		if s.lastEntryIs(ctx, record.KindSystem, verb, text) {
			s.w.m.controls.WithLabelValues(verb, "repeated").Inc()
		} else {
			note(record.KindSystem, text)
		}
		dead = why
	}
	// unwait continues a blocked or paused session; the time it waited
	// does not count against the run's deadline.
	unwait := func() { resumeRun(&next, now) }
	outcome := "applied"
	final := s.st.Status.Final()
	switch msg.Verb {
	case control.Steer:
		switch {
		case final:
			ignore("the session is " + string(s.st.Status))
			outcome = "ignored"
		case len(next.Steers) >= MaxSteers:
			ignore(fmt.Sprintf("%d steers already wait for the next model call", MaxSteers))
			outcome = "refused"
		default:
			next.Steers = append(next.Steers, record.Steer{Text: msg.Text, Seq: in.seq, Time: in.time.UTC()})
		}
	case control.Interrupt:
		if s.st.Status != record.StatusWorking {
			ignore("the session is " + string(s.st.Status) + ", not working")
			outcome = "ignored"
			break
		}
		note(record.KindControl, msg.Text)
		reason := "interrupted"
		if msg.Text != "" {
			reason = "interrupted: " + msg.Text
		}
		next.SetStatus(record.StatusPaused, reason, now)
	case control.Resume:
		switch {
		case s.st.Status == record.StatusPaused:
			note(record.KindControl, msg.Text)
			unwait()
		case s.st.Status == record.StatusBlocked && s.st.Approval == "":
			call, ok := outstanding(next, s.st.BlockedCall)
			if !ok {
				ignore("the call " + s.st.BlockedCall + " it waits on is not outstanding")
				outcome = "ignored"
				break
			}
			note(record.KindControl, "")
			answer := msg.Text
			if answer == "" {
				answer = "(resumed without an answer)"
			}
			e := s.entry(&next, record.KindToolResult)
			e.Name, e.CallID, e.Result = call.Name, call.ID, cut(answer, record.MaxEntryBytes)
			entries = append(entries, e)
			next.Calls = removeCall(next.Calls, call.ID)
			next.Steps++
			unwait()
		case s.st.Status == record.StatusBlocked:
			ignore(fmt.Sprintf("the session waits for approval of call %s: approve or deny it", s.st.BlockedCall))
			outcome = "ignored"
		case final || msg.Text == "":
			ignore("the session is " + string(s.st.Status) + ", neither paused nor blocked")
			outcome = "ignored"
		case len(next.Steers) >= MaxSteers:
			ignore(fmt.Sprintf("%d steers already wait for the next model call", MaxSteers))
			outcome = "refused"
		default:
			// Nothing to resume: the text waits for the next model call,
			// as a steer's would.
			next.Steers = append(next.Steers, record.Steer{Text: msg.Text, Seq: in.seq, Time: in.time.UTC()})
		}
	case control.Cancel:
		if final {
			ignore("the session is already " + string(s.st.Status))
			outcome = "ignored"
			break
		}
		note(record.KindControl, msg.Text)
		reason := "cancelled"
		if msg.Text != "" {
			reason = "cancelled: " + msg.Text
		}
		entries = append(entries, s.settleOpen(&next, "cancelled")...)
		next.Steers = nil
		// A delegated run answers however it ends, a cancel from its
		// parent's run included: the answer carries what it consumed,
		// which the parent counts as a late answer.
		next.SetStatus(record.StatusCancelled, reason, now)
	case control.Approve, control.Deny:
		if s.st.Status != record.StatusBlocked || s.st.Approval == "" || s.st.BlockedCall != msg.CallID {
			why := "the session is " + string(s.st.Status) + ", not waiting for an approval"
			if s.st.Status == record.StatusBlocked && s.st.Approval != "" {
				why = "the session waits for approval of call " + s.st.BlockedCall + ", not " + msg.CallID
			}
			ignore(why)
			outcome = "ignored"
			break
		}
		note(record.KindControl, msg.Text)
		if msg.Verb == control.Approve {
			next.Approved = msg.CallID
		} else {
			call, _ := outstanding(next, msg.CallID)
			text := "denied: the call did not run"
			if msg.Text != "" {
				text = "denied: " + msg.Text + " (the call did not run)"
			}
			e := s.entry(&next, record.KindToolResult)
			e.Name, e.CallID, e.Result, e.IsError = call.Name, call.ID, cut(text, record.MaxEntryBytes), true
			entries = append(entries, e)
			next.Calls = removeCall(next.Calls, call.ID)
			next.Steps++
		}
		unwait()
	case control.Fork:
		why, err := s.fork(ctx, msg, in.seq)
		if err != nil {
			return err
		}
		if why != "" {
			ignore(why)
			outcome = "refused"
		}
	}
	span.SetAttributes(attribute.String("jetloop.control.outcome", outcome), tracing.AttrStatus.String(string(next.Status)))
	if dead != "" {
		detail := fmt.Sprintf("%s of %s: %s", verb, s.r.ref, dead)
		if err := s.w.deadLetter(ctx, in.msg.Subject, in.msg.Header, in.msg.Data, in.seq, dlq.NotApplicable, detail); err != nil {
			return err
		}
	}
	if err := s.commit(ctx, entries, next); err != nil {
		return err
	}
	if armed && s.st.WaitUntil.IsZero() {
		s.disarmWait(ctx)
	}
	s.trace(ctx, TracePoint{Phase: PhaseControl, Step: in.seq, Control: verb})
	s.w.m.controls.WithLabelValues(verb, outcome).Inc()
	if !in.time.IsZero() {
		s.w.m.controlSeconds.WithLabelValues(verb).Observe(time.Since(in.time).Seconds())
	}
	log.Info("control message "+outcome, "status", next.Status)
	return nil
}

// lastEntryIs reports whether the session's last transcript entry is of
// kind, named name, with text; false when it cannot be read.
func (s *session) lastEntryIs(ctx context.Context, kind record.Kind, name, text string) bool {
	if s.st.NextEntry <= 1 {
		return false
	}
	kve, err := s.w.sessions.Get(ctx, s.w.names.LogKey(s.r.ref, s.st.NextEntry-1))
	if err != nil {
		return false
	}
	var e record.Entry
	if json.Unmarshal(kve.Value(), &e) != nil {
		return false
	}
	return e.Kind == kind && e.Name == name && e.Text == text
}

// controlsApplied is the jl_dedupe source of applied control messages.
const controlsApplied = "control"

// appliedBefore claims the message's id (with its subject and source, as
// JL_CTL's Nats-Msg-Id names it) for its sequence, and returns the
// sequence of an earlier message the id was claimed for, or 0: the claim
// is written before the message is applied, so a crash between the two
// finds the claim its own.
func (w *Worker) appliedBefore(ctx context.Context, in *ctlInput, msg control.Message) (uint64, error) {
	id := in.msg.Subject + "\x00" + msg.Source + "\x00" + msg.ID
	out, _ := json.Marshal(struct {
		Seq uint64 `json:"seq"`
	}{in.seq})
	ent, _, fresh, err := w.seen.Claim(ctx, controlsApplied, id, out)
	if err != nil || fresh {
		return 0, err
	}
	var first struct {
		Seq uint64 `json:"seq"`
	}
	if json.Unmarshal(ent.Outcome, &first) != nil || first.Seq == in.seq {
		return 0, nil
	}
	return first.Seq, nil
}

// settleOpen ends the step in flight and answers every outstanding call
// with an error result (see closeOpen) saying why: the step's intent is
// cleared, a model call it interrupted is counted as possibly billed.
func (s *session) settleOpen(next *record.State, why string) []record.Entry {
	s.withdraw(next)
	if p := next.Pending; p != nil && p.Kind == record.StepModel {
		next.UnknownUsage++
	}
	return s.closeOpen(next, why)
}

// outstanding finds call id among st's outstanding calls.
func outstanding(st record.State, id string) (record.CallRef, bool) {
	for _, c := range st.Calls {
		if c.ID == id {
			return c, true
		}
	}
	return record.CallRef{}, false
}

func removeCall(calls []record.CallRef, id string) []record.CallRef {
	out := calls[:0:0]
	for _, c := range calls {
		if c.ID != id {
			out = append(out, c)
		}
	}
	return out
}
