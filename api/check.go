package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
)

// A control verb is checked against the session before it is published,
// so a sender learns at once that it cannot apply (404, 409, 400) instead
// of a message that sits in JL_CTL and is noted in the transcript as
// ignored. The worker applies the same rules when the message is applied
// (the state may have moved on in between, and a raw publish is checked
// by nobody else), so this is an answer to the sender, not the guard.

// CheckControl reports why m cannot apply to session ref as its state
// stands now: an *Error with 404 (no such agent or session), 409 (the
// session is not in a state the verb acts on, naming what it waits for)
// or 400 (a fork past the last turn); nil when it can. A control message
// never creates a session, so a session without state is 404 for every
// verb, unless an event for it waits in JL_IN (it is then checked as the
// idle session that event starts); a fork's new session must not exist.
func (s *Service) CheckControl(ctx context.Context, ref streams.SessionRef, m control.Message) error {
	if _, err := s.agents.Get(ctx, ref.Agent); err != nil {
		if errors.Is(err, policies.ErrNotFound) {
			return errorf(http.StatusNotFound, "%s %s: no agent %q (jetloop agents lists them)", m.Verb, ref, ref.Agent)
		}
		return err
	}
	st, ok, err := s.state(ctx, ref)
	if err != nil {
		return err
	}
	if !ok {
		// An event waiting in JL_IN starts the session when a worker takes
		// it, and the message applies then: the session is as good as
		// there, idle.
		if _, err := streams.GetLastMsg(ctx, s.js, s.in, s.names.In(ref)); err != nil {
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return errorf(http.StatusNotFound, "%s %s: no session %s: a control message acts on a session an event started (jetloop send starts one)", m.Verb, ref, ref)
			}
			return fmt.Errorf("api: look for events of %s: %w", ref, err)
		}
		st = record.State{}
		st.Agent, st.Session, st.Status = ref.Agent, ref.Session, record.StatusIdle
	}
	if code, why := applicable(st, m); code != 0 {
		return errorf(code, "%s %s: %s", m.Verb, ref, why)
	}
	if m.Verb == control.Fork {
		child, err := streams.NewSessionRef(ref.Agent, m.As)
		if err != nil {
			return errorf(http.StatusBadRequest, "fork %s as %q: %v", ref, m.As, err)
		}
		if _, exists, err := s.state(ctx, child); err != nil {
			return err
		} else if exists {
			return errorf(http.StatusConflict, "fork %s: session %s exists; fork as a new name", ref, child)
		}
	}
	return nil
}

// applicable is the rule of each verb over the session's state: 0 when m
// acts on it, else the status to answer and why.
func applicable(st record.State, m control.Message) (int, string) {
	status := string(st.Status)
	approval := st.Status == record.StatusBlocked && st.Approval != ""
	question := st.Status == record.StatusBlocked && st.Approval == ""
	final := st.Status.Final()
	switch m.Verb {
	case control.Steer:
		if final {
			return http.StatusConflict, "the session is " + status + ": nothing will read the text"
		}
	case control.Interrupt:
		if st.Status != record.StatusWorking {
			return http.StatusConflict, "the session is " + status + ", not working: nothing to interrupt"
		}
	case control.Resume:
		switch {
		case approval:
			return http.StatusConflict, fmt.Sprintf("the session waits for approval of call %s: approve or deny it", st.BlockedCall)
		case st.Status == record.StatusPaused, question:
		case final:
			return http.StatusConflict, "the session is " + status
		case st.Status == record.StatusWaiting && m.Text == "":
			return http.StatusConflict, "the session waits for the sessions it delegated to (" + st.WaitingFor + "); it goes on when they answer"
		case m.Text == "":
			return http.StatusConflict, "the session is " + status + ", neither paused nor blocked: nothing to resume"
		}
	case control.Cancel:
		if final {
			return http.StatusConflict, "the session is already " + status
		}
	case control.Approve, control.Deny:
		switch {
		case approval && st.BlockedCall == m.CallID:
		case approval:
			return http.StatusConflict, fmt.Sprintf("call %s is not pending: the session waits for approval of call %s", m.CallID, st.BlockedCall)
		case question:
			return http.StatusConflict, fmt.Sprintf("call %s is not pending: the session waits for an answer to call %s (resume it with the answer)", m.CallID, st.BlockedCall)
		default:
			return http.StatusConflict, fmt.Sprintf("call %s is not pending: the session is %s and waits for no approval", m.CallID, status)
		}
	case control.Fork:
		if m.Turn > st.Turns {
			return http.StatusBadRequest, fmt.Sprintf("turn %d is past the last turn, %d", m.Turn, st.Turns)
		}
	}
	return 0, ""
}

// state reads a session's state; ok is false when it has none.
func (s *Service) state(ctx context.Context, ref streams.SessionRef) (record.State, bool, error) {
	e, err := s.sessions.Get(ctx, s.names.StateKey(ref))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return record.State{}, false, nil
	case err != nil:
		return record.State{}, false, fmt.Errorf("api: read state of %s: %w", ref, err)
	}
	var st record.State
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return record.State{}, false, fmt.Errorf("api: decode state of %s: %w", ref, err)
	}
	return st, true, nil
}

// retried returns the JL_CTL sequence of m when it is a retry of the
// session's last control message (same id and source): a retry after the
// first was applied is answered as the first was, not refused because the
// first changed the session.
func (s *Service) retried(ctx context.Context, ref streams.SessionRef, m control.Message) (uint64, bool) {
	raw, err := streams.GetLastMsg(ctx, s.js, s.ctl, s.names.Ctl(ref))
	if err != nil {
		return 0, false
	}
	last, err := control.Parse(&nats.Msg{Subject: raw.Subject, Header: raw.Header, Data: raw.Data})
	if err != nil || last.ID != m.ID || last.Source != m.Source || last.Verb != m.Verb {
		return 0, false
	}
	return raw.Sequence, true
}
