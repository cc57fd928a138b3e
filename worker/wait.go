package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
)

// A wait for a human (an approval, an ask_human answer) may time out. The
// block that starts it also writes a delayed (@at) message on the
// session's timer subject, jl.timer.<agent>.<session>.wait, which the
// server fires onto the session's input subject when the timeout passes:
// nothing runs while the session waits. The fired message is an input
// like any other, so the session's owner applies it between steps, by the
// same compare-and-set as an approve: whichever of the two it applies
// first ends the wait, and the other finds nothing to act on (the approve
// is dead-lettered as not_applicable, the timeout ignored). An answer
// disarms the timer; one that fires anyway is ignored as stale.

// Event types of waits.
const (
	// TypeWaitTimeout is the event a wait's timer fires.
	TypeWaitTimeout = "dev.jetloop.wait.timeout"
	// TypeEscalation is the event a wait that timed out with on_timeout
	// escalate records on jl.audit.escalation.<agent>.
	TypeEscalation = "dev.jetloop.escalation"
)

// waitTimer is the name of a session's wait timer on its timer subject.
const waitTimer = "wait"

// waitTimeout is the data of a TypeWaitTimeout event.
type waitTimeout struct {
	CallID    string            `json:"call_id"`
	Timeout   policies.Duration `json:"timeout"`
	OnTimeout string            `json:"on_timeout"`
	// Approval is the gate of an approval wait; empty for ask_human.
	Approval string    `json:"approval,omitempty"`
	Since    time.Time `json:"since"`
}

// Escalation is the data of a TypeEscalation event.
type Escalation struct {
	Agent   string `json:"agent"`
	Session string `json:"session"`
	// CallID is the call the session waits on, Tool its tool; Approval
	// the gate of an approval (empty for an ask_human question, which is
	// Question).
	CallID   string          `json:"call_id"`
	Tool     string          `json:"tool,omitempty"`
	Args     json.RawMessage `json:"args,omitempty"`
	Approval string          `json:"approval,omitempty"`
	Question string          `json:"question,omitempty"`
	Since    time.Time       `json:"since"`
	Timeout  string          `json:"timeout"`
	// Answer says how to end the wait.
	Answer string `json:"answer"`
}

// waitPolicy returns the timeout and on_timeout of a wait on an approval
// gate (gate non-empty) or on an ask_human answer.
func waitPolicy(def *policies.Definition, gate string) (time.Duration, string) {
	var w policies.Wait
	if gate != "" {
		for i, a := range def.Approvals {
			if policies.ApprovalName(a, i) == gate {
				w = policies.Wait{Timeout: a.Timeout, OnTimeout: a.OnTimeout}
			}
		}
	} else if def.AskHuman != nil {
		w = *def.AskHuman
	}
	if w.Timeout <= 0 {
		return 0, ""
	}
	if w.OnTimeout == "" {
		w.OnTimeout = policies.OnTimeoutDeny
	}
	return w.Timeout.D(), w.OnTimeout
}

// armWait starts the timeout of the wait next is about to begin on call
// (next's status is blocked, Since its start), if its policy has one: it
// writes the timer and sets next.WaitUntil. It is written before the
// state, so a crash between them leaves a timer that fires on a session
// not waiting for it, which is ignored; never a wait without its timer.
func (s *session) armWait(ctx context.Context, next *record.State, call string, gate string) error {
	d, on := waitPolicy(s.def, gate)
	if d <= 0 {
		return nil
	}
	at := next.Since.Add(d)
	if r := at.Truncate(time.Second); r.Before(at) {
		at = r.Add(time.Second) // @at takes whole seconds: never sooner than asked
	}
	subject, err := s.w.names.Timer(s.r.ref, waitTimer)
	if err != nil {
		return fmt.Errorf("worker: wait timer of %s: %w", s.r.ref, err)
	}
	data, _ := json.Marshal(waitTimeout{CallID: call, Timeout: policies.Duration(d), OnTimeout: on, Approval: gate, Since: next.Since})
	e := event.New()
	e.SetID("timeout-" + call)
	e.SetSource("/jetloop/worker")
	e.SetType(TypeWaitTimeout)
	e.SetSubject(s.r.ref.Session)
	e.SetTime(at)
	e.SetExtension(events.ExtAgent, s.r.ref.Agent)
	e.SetExtension(events.ExtSession, s.r.ref.Session)
	if err := e.SetData(event.ApplicationJSON, json.RawMessage(data)); err != nil {
		return fmt.Errorf("worker: wait timer of %s: %w", s.r.ref, err)
	}
	m, err := events.ToMsg(subject, e)
	if err != nil {
		return fmt.Errorf("worker: wait timer of %s: %w", s.r.ref, err)
	}
	m.Header.Set("Nats-Schedule", "@at "+at.UTC().Format(time.RFC3339))
	m.Header.Set("Nats-Schedule-Target", s.w.names.In(s.r.ref))
	// One wait at a time: a new one replaces any timer left.
	m.Header.Set("Nats-Rollup", "sub")
	m.Header.Set(nats.MsgIdHdr, "wait-"+s.r.ref.Key()+"-"+call+"-"+next.Since.Format(time.RFC3339Nano))
	if err := s.w.inRoom(ctx, s.r.ref, writerWaitTimer, true, len(m.Data)); err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.w.js.PublishMsg(pctx, m, jetstream.WithExpectStream(s.w.names.StreamIn())); err != nil {
		return fmt.Errorf("worker: arm the wait timer of %s on %s: %w", s.r.ref, subject, err)
	}
	next.WaitUntil, next.OnTimeout = at, on
	s.log.Info("wait armed", "call", call, "timeout", d, "on_timeout", on, "until", at)
	return nil
}

// disarmWait removes the session's wait timer once an answer ended the
// wait. A failure is logged: a timer that fires anyway is ignored.
func (s *session) disarmWait(ctx context.Context) {
	subject, err := s.w.names.Timer(s.r.ref, waitTimer)
	if err != nil {
		return
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.w.in.Purge(pctx, jetstream.WithPurgeSubject(subject)); err != nil {
		s.log.Warn("disarm the wait timer; it will fire and be ignored", "err", err)
	}
}

// resumeRun continues a blocked or paused session: the time it waited
// counts neither against the run's deadline nor against its tick's
// timeout.
func resumeRun(next *record.State, now time.Time) {
	if !next.RunStarted.IsZero() && next.Since.Before(now) {
		next.RunStarted = next.RunStarted.Add(now.Sub(next.Since))
	}
	if t := next.Tick; t != nil && !t.Deadline.IsZero() && t.Result == "" && next.Since.Before(now) {
		t.Deadline = t.Deadline.Add(now.Sub(next.Since))
	}
	next.SetStatus(record.StatusWorking, "", now)
}

// timedOut applies a fired wait timer: the session's on_timeout if it
// still waits on that call, else nothing (the answer came first). Either
// way the input is consumed with next.
func (s *session) timedOut(ctx context.Context, in *input, ev event.Event, next record.State) error {
	var w waitTimeout
	if err := json.Unmarshal(ev.Data(), &w); err != nil || w.CallID == "" {
		s.log.Warn("unreadable wait timeout ignored", "seq", in.seq, "err", err)
		return s.commit(ctx, nil, next)
	}
	log := s.log.With("call", w.CallID, "timeout", w.Timeout.D(), "on_timeout", w.OnTimeout)
	if s.st.Status != record.StatusBlocked || s.st.BlockedCall != w.CallID || !s.st.Escalated.IsZero() {
		log.Info("wait timeout ignored: the wait ended first", "status", s.st.Status)
		s.w.m.waitTimeouts.WithLabelValues(w.OnTimeout, "stale").Inc()
		return s.commit(ctx, nil, next)
	}
	if err := s.ensure(ctx); err != nil {
		return err
	}
	now := time.Now().UTC()
	what := "answer to ask_human call " + w.CallID
	if s.st.Approval != "" {
		what = "approval of " + w.CallID + " (gate " + s.st.Approval + ")"
	}
	note := s.entry(&next, record.KindSystem)
	note.CallID = w.CallID
	entries := []record.Entry{note}
	switch w.OnTimeout {
	case policies.OnTimeoutCancel:
		note.Text = fmt.Sprintf("no %s within %s: the session is cancelled", what, w.Timeout.D())
		reason := fmt.Sprintf("cancelled: no %s within %s", what, w.Timeout.D())
		entries = append(entries, s.settleOpen(&next, reason)...)
		next.Steers = nil
		next.SetStatus(record.StatusCancelled, reason, now)
	case policies.OnTimeoutEscalate:
		note.Text = fmt.Sprintf("no %s within %s: escalated (jl.audit.escalation.%s); the session waits on", what, w.Timeout.D(), s.r.ref.Agent)
		if err := s.escalate(ctx, w); err != nil {
			return err
		}
		next.Escalated = now
	default:
		call, _ := outstanding(next, w.CallID)
		result := fmt.Sprintf("no answer within %s", w.Timeout.D())
		if s.st.Approval != "" {
			result = fmt.Sprintf("denied: no decision within %s (the call did not run)", w.Timeout.D())
		}
		note.Text = fmt.Sprintf("no %s within %s: %s", what, w.Timeout.D(), result)
		r := s.entry(&next, record.KindToolResult)
		r.Name, r.CallID, r.Result, r.IsError = call.Name, call.ID, result, true
		entries = append(entries, r)
		next.Calls = removeCall(next.Calls, call.ID)
		next.Steps++
		resumeRun(&next, now)
	}
	entries[0] = note
	if err := s.commit(ctx, entries, next); err != nil {
		return err
	}
	if w.OnTimeout == policies.OnTimeoutEscalate {
		// The status stays; what the index shows of it changed.
		s.w.indexStatus(ctx, s.st.Status, s.st)
	}
	s.w.m.waitTimeouts.WithLabelValues(w.OnTimeout, "applied").Inc()
	log.Info("wait timed out", "status", next.Status)
	return nil
}

// escalate records the escalation of a wait that timed out on JL_AUDIT,
// where whoever watches jl.audit.escalation.> picks it up.
func (s *session) escalate(ctx context.Context, w waitTimeout) error {
	subject, err := s.w.names.Audit("escalation", s.r.ref.Agent)
	if err != nil {
		return fmt.Errorf("worker: escalate %s: %w", s.r.ref, err)
	}
	esc := Escalation{Agent: s.r.ref.Agent, Session: s.r.ref.Session, CallID: w.CallID, Approval: s.st.Approval,
		Since: s.st.Since, Timeout: w.Timeout.D().String()}
	if c, ok := outstanding(s.st, w.CallID); ok {
		esc.Tool, esc.Args = c.Name, s.args(c)
	}
	if s.st.Approval != "" {
		esc.Answer = fmt.Sprintf("jetloop approve|deny %s %s", s.r.ref, w.CallID)
	} else {
		esc.Question = s.st.WaitingFor
		esc.Answer = fmt.Sprintf("jetloop resume %s ANSWER", s.r.ref)
	}
	data, _ := json.Marshal(esc)
	e := event.New()
	e.SetID("escalation-" + s.r.ref.Key() + "-" + w.CallID)
	e.SetSource("/jetloop/worker")
	e.SetType(TypeEscalation)
	e.SetSubject(s.r.ref.Session)
	e.SetTime(time.Now().UTC())
	e.SetExtension(events.ExtAgent, s.r.ref.Agent)
	e.SetExtension(events.ExtSession, s.r.ref.Session)
	if err := e.SetData(event.ApplicationJSON, json.RawMessage(data)); err != nil {
		return fmt.Errorf("worker: escalate %s: %w", s.r.ref, err)
	}
	m, err := events.ToMsg(subject, e)
	if err != nil {
		return fmt.Errorf("worker: escalate %s: %w", s.r.ref, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.w.js.PublishMsg(pctx, m, jetstream.WithExpectStream(s.w.names.StreamAudit())); err != nil {
		return fmt.Errorf("worker: escalate %s on %s: %w", s.r.ref, subject, err)
	}
	return nil
}
