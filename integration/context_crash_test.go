package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/window"
	"github.com/jetloop/jetloop/worker"
)

// compactDef compacts after a few long messages, on the scripted model,
// whose summary of a compaction request is deterministic.
func compactDef() policies.Definition {
	first, last := 1, 2
	return policies.Definition{
		Name:   "compact",
		System: "You keep a log.",
		Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{
			{Text: "Noted the first."}, {Text: "Noted the second."}, {Text: "Noted the third."},
		}, Then: &policies.ScriptEntry{Text: "Noted."}},
		Context: &policies.ContextPolicy{CompactAtTokens: 1000, KeepFirstTurns: &first, KeepLastTurns: &last},
	}
}

// contextOf is what the session's next model call receives.
func contextOf(t *testing.T, e *crashEnv, ref streams.SessionRef) (record.State, window.Context) {
	t.Helper()
	s, err := record.Open(context.Background(), e.js, e.names)
	if err != nil {
		t.Fatal(err)
	}
	st, rev, err := s.Load(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := s.ReadSpans(context.Background(), ref, st.Live(), rev)
	if err != nil {
		t.Fatal(err)
	}
	def := compactDef()
	return st, window.Build(window.Input{Names: e.names, Ref: ref, Def: &def, State: st, Entries: entries, Turn: st.Turns + 1})
}

func messagesOf(c window.Context) string {
	var b strings.Builder
	b.WriteString(c.Request.System)
	for _, m := range c.Request.Messages {
		fmt.Fprintf(&b, "\n<%s> %s", m.Role, m.Text)
	}
	return b.String()
}

// TestCompactionCrash kills a worker with kill -9 during a compaction
// (its intent durable, before and after its model call; its summary
// stored but not yet named by the state) and checks that a second worker
// recovers it by DESIGN §8's table (made again; adopted, and not paid for
// twice), nothing is lost, and the context afterwards is the context of
// the same session without a crash.
func TestCompactionCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess crash test")
	}
	for _, tt := range []struct {
		name   string
		phase  worker.Phase
		remade bool
		// lost counts the model calls made before the kill whose answer
		// was lost: the crashed session pays them once more.
		lost int
	}{
		{name: "before the summary's model call", phase: worker.PhaseEffect, remade: true},
		{name: "summary received, not stored", phase: worker.PhaseSettle, remade: true, lost: 1},
		{name: "summary stored, state not written", phase: worker.PhaseCreated},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newCrashEnv(t)
			def := compactDef()
			first := startChild(t, e.spec("w1", def, false, &crashPoint{Phase: tt.phase, Kind: record.StepModel, Compact: true, Session: "crashed"}))
			messages := make([]string, 7)
			for i := range messages {
				messages[i] = fmt.Sprintf("entry %d: %s", i+1, strings.Repeat(fmt.Sprintf("observation %d; ", i+1), 80))
			}
			var crashed streams.SessionRef
			for _, m := range messages {
				crashed = e.send(t, "compact", "crashed", m)
			}
			first.waitPoint(t, time.Minute)
			first.kill()
			second := startChild(t, e.spec("w2", def, false, nil))
			tr := waitEntries(t, e, crashed, len(messages), first, second)
			callsCrashed := e.modelCalls(t)
			var reference streams.SessionRef
			for _, m := range messages {
				reference = e.send(t, "compact", "reference", m)
			}
			waitEntries(t, e, reference, len(messages), second)

			stC, cC := contextOf(t, e, crashed)
			stR, cR := contextOf(t, e, reference)
			if stC.Summary == 0 || stR.Summary == 0 {
				t.Fatalf("no compaction: crashed %+v, reference %+v", stC.Window, stR.Window)
			}
			if got, want := messagesOf(cC), messagesOf(cR); got != want {
				t.Fatalf("the context after the crash differs from the one without:\n--- crashed\n%s\n--- reference\n%s", got, want)
			}
			tr = e.show(t, crashed)
			notes := 0
			for _, en := range tr.Transcript {
				if en.Kind == record.KindSystem && strings.Contains(en.Text, "compaction of step") && strings.Contains(en.Text, "made again") {
					notes++
				}
			}
			if tt.remade != (notes == 1) || notes > 1 {
				t.Fatalf("%d notes of a remade compaction: %+v", notes, tr.Transcript)
			}
			// Nothing lost: every message is in the transcript, once.
			if n := len(entriesOfKind(tr, record.KindUser)); n != len(messages) {
				t.Fatalf("%d of %d messages in the transcript", n, len(messages))
			}
			checkTranscript(t, tr)
			// An adopted summary is not paid for twice: the crashed session
			// made as many model calls as the reference; a remade one made
			// the interrupted call and one more.
			callsReference := e.modelCalls(t) - callsCrashed
			if callsCrashed != callsReference+tt.lost || tr.Pending != nil {
				t.Fatalf("model calls: crashed %d, reference %d; pending %+v", callsCrashed, callsReference, tr.Pending)
			}
		})
	}
}

func entriesOfKind(tr record.Transcript, k record.Kind) []record.Entry {
	var out []record.Entry
	for _, e := range tr.Transcript {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

func (e *crashEnv) show(t *testing.T, ref streams.SessionRef) record.Transcript {
	t.Helper()
	tr, err := record.Show(context.Background(), e.js, e.names, ref)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// waitEntries waits until the session rests done with n user messages.
func waitEntries(t *testing.T, e *crashEnv, ref streams.SessionRef, n int, children ...*child) record.Transcript {
	t.Helper()
	var tr record.Transcript
	err := natstest.Poll(context.Background(), time.Minute, func() error {
		var err error
		if tr, err = record.Show(context.Background(), e.js, e.names, ref); err != nil {
			return err
		}
		if got := len(entriesOfKind(tr, record.KindUser)); tr.Status != record.StatusDone || got != n {
			return fmt.Errorf("status %s with %d of %d messages", tr.Status, got, n)
		}
		return nil
	})
	if err != nil {
		var outs []string
		for _, c := range children {
			outs = append(outs, c.output())
		}
		t.Fatalf("session %s: %v\n%s", ref, err, strings.Join(outs, "\n----\n"))
	}
	return tr
}
