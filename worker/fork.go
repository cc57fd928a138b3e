package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools"
)

// forkSource is the source of the resume a fork sends its new session.
const forkSource = "/jetloop/worker/fork"

// fork copies the session's transcript up to turn msg.Turn into a new
// session msg.As of the same agent, which records this one as its parent,
// and starts it with a resume (carrying msg.Text) on its control subject.
// The original session is left as it is. It returns why the fork was
// refused, "" when it was made.
//
// The new session's state is created last: entries written before a crash
// belong to no state and are written again. A fork applied twice (a crash
// between the new session's creation and the parent's CtlSeq) finds the
// session it created by its parent and fork sequence, and only makes sure
// it was started.
func (s *session) fork(ctx context.Context, msg control.Message, seq uint64) (string, error) {
	child, err := streams.NewSessionRef(s.r.ref.Agent, msg.As)
	if err != nil {
		return fmt.Sprintf("fork as %q: %v", msg.As, err), nil
	}
	if msg.Turn > s.st.Turns {
		return fmt.Sprintf("fork at turn %d: the session has had %d turns", msg.Turn, s.st.Turns), nil
	}
	existing, _, err := s.w.store.Load(ctx, child)
	switch {
	case err == nil:
		if existing.Parent == s.r.ref.Session && existing.ForkSeq == seq {
			return "", s.w.startFork(ctx, child, existing, msg, seq)
		}
		return fmt.Sprintf("fork as %q: that session exists", msg.As), nil
	case !errors.Is(err, ErrNotFound):
		return "", err
	}
	// The copy is of the transcript, not of the live context: a
	// compacted session's summarised turns are copied whole.
	all, err := s.w.store.Entries(ctx, s.r.ref, s.st.NextEntry, s.rev)
	if err != nil {
		return "", err
	}
	entries, st := s.forkState(all, msg, seq, child)
	if err := s.w.store.WriteEntries(ctx, child, entries); err != nil {
		return "", err
	}
	// The notes go with the copy (they are the parent's now, not at the
	// fork's turn: notes have no history). Written before the state, a
	// second attempt finds them and leaves them.
	if notes, _, err := tools.ReadNotes(ctx, s.w.sessions, s.w.names, s.r.ref); err != nil {
		return "", err
	} else if notes.Text != "" {
		b, _ := json.Marshal(tools.Notes{Text: notes.Text})
		if _, err := s.w.sessions.Create(ctx, s.w.names.NotesKey(child), b); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return "", fmt.Errorf("worker: fork notes of %s to %s: %w", s.r.ref, child, err)
		}
	}
	if _, err := s.w.store.Create(ctx, child, st); err != nil {
		if errors.Is(err, record.ErrFenced) {
			return fmt.Sprintf("fork as %q: that session was created meanwhile", msg.As), nil
		}
		return "", err
	}
	s.log.Info("session forked", "as", msg.As, "at_turn", msg.Turn, "entries", len(entries), "status", st.Status)
	return "", s.w.startFork(ctx, child, st, msg, seq)
}

// forkState returns the entries and the first state of the session a fork
// creates: the transcript up to the end of turn msg.Turn, renumbered from
// 1 (without the parent's summaries: the copy holds what they stood
// for), the calls its last answer left without results, and the usage of
// the answers copied. It is paused, to be resumed at once, unless nothing is
// left for a model call to answer (the copy ends with an answer and no
// text was given): then it is done and waits for an event.
func (s *session) forkState(all []record.Entry, msg control.Message, seq uint64, child streams.SessionRef) ([]record.Entry, record.State) {
	now := time.Now().UTC()
	st := record.NewState(child.Agent, child.Session, now)
	st.Parent, st.ForkTurn, st.ForkSeq = s.r.ref.Session, msg.Turn, seq
	st.Program = s.st.Program
	st.Turns = msg.Turn
	st.RunStarted = now

	var out []record.Entry
	var calls []record.CallRef
	last := record.Kind("")
	for _, e := range all {
		if e.Turn > msg.Turn {
			break
		}
		if e.Kind == record.KindSummary {
			// It names entries by the parent's ids; the copy has them
			// all, and compacts itself when its policy says so.
			continue
		}
		e.ID = uint64(len(out) + 1)
		switch e.Kind {
		case record.KindAssistant:
			calls = nil
			if e.Usage != nil {
				st.Usage = st.Usage.Add(*e.Usage)
			}
			st.Steps++
		case record.KindToolCall:
			calls = append(calls, record.CallRef{ID: e.CallID, Name: e.Name, Entry: e.ID})
		case record.KindToolResult:
			calls = removeCall(calls, e.CallID)
			st.Steps++
		}
		if e.Kind != record.KindSystem {
			last = e.Kind
		}
		out = append(out, e)
	}
	st.Calls = calls
	note := record.Entry{ID: uint64(len(out) + 1), Kind: record.KindSystem, Turn: msg.Turn, Time: now,
		Text: fmt.Sprintf("forked from session %s at turn %d", s.r.ref.Session, msg.Turn)}
	out = append(out, note)
	st.NextEntry = uint64(len(out) + 1)
	if msg.Text == "" && len(calls) == 0 && (last == record.KindAssistant || last == "") {
		st.SetStatus(record.StatusDone, "", now)
		st.RunEnded = now
	} else {
		st.SetStatus(record.StatusPaused, fmt.Sprintf("forked from %s at turn %d", s.r.ref.Session, msg.Turn), now)
	}
	return out, st
}

// startFork sends the resume that starts a paused forked session, unless
// it has applied a control message already. Its id is the fork's, so a
// second send inside JL_CTL's duplicate window is dropped.
func (w *Worker) startFork(ctx context.Context, child streams.SessionRef, st record.State, msg control.Message, seq uint64) error {
	if st.Status != record.StatusPaused || st.CtlSeq != 0 {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := control.Publish(pctx, w.js, w.names, child, control.Message{
		Verb: control.Resume, Text: msg.Text,
		ID: "fork-" + strconv.FormatUint(seq, 10), Source: forkSource,
	})
	if err != nil {
		return fmt.Errorf("worker: start forked session %s: %w", child, err)
	}
	return nil
}
