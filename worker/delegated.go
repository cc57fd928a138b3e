package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/dlq"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/ledger"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
)

// The child's side of a delegation: its session is created by the
// delegate event (admitted to it by the host's rule), records where it
// came from (State.Delegation), runs with the budget its parent carved
// and sees in its context only what its definition reads of what it was
// given. When the run ends, however it ends, the child owes its parent an
// answer: the loop publishes it (answer) before the delegate event is
// acknowledged, so a crash in between publishes it again, once (the
// answer's id names the call).

// delegation reads the delegate event ev for a session and records it in
// next. handled is true when the event starts nothing: a repeat of the
// event that started the session, or one for a session that exists
// otherwise, which is dead-lettered (and the latter's parent answered).
func (s *session) delegation(ctx context.Context, in *input, ev event.Event, next *record.State) (handled bool, err error) {
	var d events.Delegation
	if err := json.Unmarshal(ev.Data(), &d); err != nil {
		return true, s.deadDelegation(ctx, in, next, nil, "delegate event whose data does not parse: "+err.Error())
	}
	if cur := s.st.Delegation; cur != nil {
		if cur.Parent == d.Parent && cur.CallID == d.CallID {
			return true, s.deadDelegation(ctx, in, next, nil, fmt.Sprintf("repeat of the delegate event of call %s of %s, which started this session", d.CallID, d.Parent))
		}
		return true, s.deadDelegation(ctx, in, next, &d, fmt.Sprintf("session %s was started by call %s of %s, not this one", s.r.ref, cur.CallID, cur.Parent))
	}
	if s.st.NextEntry > 1 {
		return true, s.deadDelegation(ctx, in, next, &d, fmt.Sprintf("session %s exists already; a delegate call starts a session of its own", s.r.ref))
	}
	next.Delegation = &record.Delegation{
		Parent: d.Parent, CallID: d.CallID, Event: ev.ID(), Seq: in.seq, Task: d.Task,
		Hops: d.Hops, MaxHops: d.MaxHops, Path: d.Path,
		Budget:     policies.Budget{MaxTurns: d.Budget.MaxTurns, MaxTokens: d.Budget.MaxTokens, MaxCostUSD: d.Budget.MaxCostUSD},
		DeadlineAt: d.Budget.DeadlineAt,
	}
	return false, nil
}

// deadDelegation dead-letters a delegate event that starts nothing and
// records it consumed; when d is set, the parent's call is answered with
// the reason at once (it would wait for ever otherwise).
func (s *session) deadDelegation(ctx context.Context, in *input, next *record.State, d *events.Delegation, why string) error {
	if d != nil {
		if err := s.publishAnswer(ctx, d.Parent, d.CallID, events.DelegationResult{
			CallID: d.CallID, Child: s.r.ref.String(), Status: string(record.StatusFailed), Reason: why,
			Text: "delegated session did not start: " + why, IsError: true, Sessions: 0,
		}); err != nil {
			return err
		}
	}
	if err := s.w.deadLetter(ctx, in.subject, in.header, in.data, in.seq, dlq.NotApplicable, why); err != nil {
		return err
	}
	return s.commit(ctx, nil, *next)
}

// startDelegatedRun binds the run a delegate event starts: its limits are
// the lower of its definition's and its parent's carve, its context is
// the task (when the definition reads it) and its inputs, and its ledger
// account is opened, with the run's ceiling.
func (s *session) startDelegatedRun(ctx context.Context, ev event.Event, next *record.State, e *record.Entry) error {
	dl := next.Delegation
	dl.Run = next.Runs
	next.Limits = carved(next.Limits, events.Budget{MaxTurns: dl.Budget.MaxTurns, MaxTokens: dl.Budget.MaxTokens, MaxCostUSD: dl.Budget.MaxCostUSD})
	var d events.Delegation
	if err := json.Unmarshal(ev.Data(), &d); err != nil {
		return fmt.Errorf("worker: delegate event %s: %w", ev.ID(), err)
	}
	e.Text = delegationText(s.def, d)
	next.RunTask = events.TaskDigest(d.Task)
	next.Ledger = strconv.Itoa(next.Runs)
	ref := s.r.ref
	if _, err := s.w.ledger.OpenAccount(ctx, ref, next.Ledger, ledgerCeiling(next.Limits), ledger.Part{}); err != nil {
		return err
	}
	return nil
}

// delegationText is what a delegated session's context starts from: the
// task, when def reads it, and each input it was given (admission let
// through only those def reads). Nothing else of the parent reaches it.
func delegationText(def *policies.Definition, d events.Delegation) string {
	var b strings.Builder
	if def.ReadsTask() {
		b.WriteString(d.Task)
	}
	for _, in := range d.Inputs {
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
		if in.Blob != "" {
			fmt.Fprintf(&b, "[input %s: %d bytes, stored as blob %q; its first part follows, read the rest with read_blob]\n%s", in.Name, in.Size, in.Blob, in.Text)
			continue
		}
		fmt.Fprintf(&b, "[input %s]\n%s", in.Name, in.Text)
	}
	if b.Len() == 0 {
		b.WriteString("(no task text or inputs: your instructions are your own)")
	}
	return cut(b.String(), record.MaxEntryBytes/2)
}

// owesAnswer reports whether st is a delegated session whose delegated
// run has ended without its answer published yet.
func owesAnswer(st record.State) bool {
	d := st.Delegation
	return d != nil && !d.Answered && st.InSeq >= d.Seq && st.Status.Ended() && st.Pending == nil
}

// answer publishes the delegated run's answer to the parent, with what
// the run and everything below it consumed, then records it sent. A crash
// in between publishes it again under the same id: the parent takes it
// once.
func (s *session) answer(ctx context.Context) error {
	d := s.st.Delegation
	s.report(ctx)
	st := s.st
	text, last := s.runAnswer(d.Seq), ""
	res := events.DelegationResult{
		CallID: d.CallID, Child: s.r.ref.String(), Status: string(st.Status), Reason: st.Reason,
		Usage: events.TreeUsage{
			Turns:        st.RunTurns + st.RunDelegated.Turns,
			InputTokens:  st.RunUsage.InputTokens + st.RunDelegated.Usage.InputTokens,
			OutputTokens: st.RunUsage.OutputTokens + st.RunDelegated.Usage.OutputTokens,
			CostUSD:      st.RunUsage.CostUSD + st.RunDelegated.Usage.CostUSD,
		},
		Sessions: 1 + st.RunDelegated.Sessions,
	}
	// The run's ledger account counts, as they reported, descendants that
	// have not answered (cancelled with this run, they answer it late):
	// each count is the larger of the account's and the answers'.
	if acct, err := s.w.ledger.Get(ctx, s.r.ref); err == nil && acct.Run == st.Ledger {
		tot, u := acct.Total(), &res.Usage
		u.Turns, u.InputTokens, u.OutputTokens = max(u.Turns, tot.Turns), max(u.InputTokens, tot.InputTokens), max(u.OutputTokens, tot.OutputTokens)
		u.CostUSD, res.Sessions = max(u.CostUSD, tot.CostUSD), max(res.Sessions, len(acct.Parts))
	} else if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		s.log.Warn("the answer counts the run and its answered children only: its ledger account cannot be read", "err", err)
	}
	if st.Status == record.StatusDone {
		res.Text = text
	} else {
		res.IsError = true
		if text != "" {
			last = "\nits last answer:\n" + text
		}
		res.Text = fmt.Sprintf("delegated session %s ended %s: %s%s", s.r.ref, st.Status, orNone(st.Reason), last)
	}
	if err := s.publishAnswer(ctx, d.Parent, d.CallID, res); err != nil {
		return err
	}
	next := s.st.Clone()
	next.Delegation.Answered = true
	s.log.Info("answered the delegating session", "parent", d.Parent, "call", d.CallID, "status", st.Status)
	return s.commit(ctx, nil, next)
}

func orNone(s string) string {
	if s == "" {
		return "no reason given"
	}
	return s
}

// runAnswer is the text of the last answer of the run that started at
// the input with sequence seq.
func (s *session) runAnswer(seq uint64) string {
	for i := len(s.live) - 1; i >= 0; i-- {
		e := s.live[i]
		if e.Event != nil && (e.Kind == record.KindEvent || e.Kind == record.KindUser) && e.Event.Seq <= seq {
			return ""
		}
		if e.Kind == record.KindAssistant && strings.TrimSpace(e.Text) != "" {
			return e.Text
		}
	}
	return ""
}

// publishAnswer publishes a child's answer to its parent's subject: it is
// not admitted again (no agent's rules decide what a parent waits for;
// its state does), and its id names the child and the call, so JetStream
// keeps one of a repeated publish.
func (s *session) publishAnswer(ctx context.Context, parent, callID string, res events.DelegationResult) error {
	agent, session, _ := strings.Cut(parent, "/")
	pref, err := streams.NewSessionRef(agent, session)
	if err != nil {
		return fmt.Errorf("worker: answer to %q: %w", parent, err)
	}
	data, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("worker: encode answer to %s: %w", parent, err)
	}
	e := event.New()
	e.SetID(callID)
	e.SetSource(events.ResultSource(s.r.ref.Agent, s.r.ref.Session))
	e.SetType(events.TypeDelegateResult)
	e.SetSubject(pref.Session)
	e.SetTime(time.Now().UTC())
	e.SetExtension(events.ExtAgent, pref.Agent)
	e.SetExtension(events.ExtSession, pref.Session)
	if err := e.SetData(event.ApplicationJSON, data); err != nil {
		return fmt.Errorf("worker: answer to %s: %w", parent, err)
	}
	m, err := events.ToMsg(s.w.names.In(pref), e)
	if err != nil {
		return fmt.Errorf("worker: answer to %s: %w", parent, err)
	}
	if err := s.w.inRoom(ctx, pref, writerAnswer, true, len(m.Data)); err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.w.js.PublishMsg(pctx, m, jetstream.WithExpectStream(s.w.names.StreamIn())); err != nil {
		return fmt.Errorf("worker: answer to %s: publish on %s: %w", parent, m.Subject, err)
	}
	return nil
}
