package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/worker"
)

// waitStatus waits for the session's status and returns its transcript.
func (e *crashEnv) waitStatus(t *testing.T, ref streams.SessionRef, want record.Status, children ...*child) record.Transcript {
	t.Helper()
	var tr record.Transcript
	err := natstest.Poll(context.Background(), time.Minute, func() error {
		var err error
		if tr, err = record.Show(context.Background(), e.js, e.names, ref); err != nil {
			return err
		}
		if tr.Status != want {
			return fmt.Errorf("status %s (%s), want %s", tr.Status, tr.Reason, want)
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

func (e *crashEnv) publish(t *testing.T, ref streams.SessionRef, m control.Message) uint64 {
	t.Helper()
	seq, err := control.Publish(context.Background(), e.js, e.names, ref, m)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// ctlAcked waits until the agent's JL_CTL consumer has acked everything.
func (e *crashEnv) ctlAcked(t *testing.T, agent string) {
	t.Helper()
	name, _ := e.names.CtlConsumerName(agent)
	err := natstest.Poll(context.Background(), 30*time.Second, func() error {
		c, err := e.js.Consumer(context.Background(), e.names.StreamCtl(), name)
		if err != nil {
			return err
		}
		info, err := c.Info(context.Background())
		if err != nil {
			return err
		}
		if info.NumAckPending != 0 || info.NumPending != 0 {
			return fmt.Errorf("consumer %s: %d ack pending, %d pending", name, info.NumAckPending, info.NumPending)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// gatedCrashDef is crashDef with its ledger call behind an approval, so a
// session waits, blocked, for the control messages of a test.
func gatedCrashDef() policies.Definition {
	def := crashDef()
	def.Approvals = []policies.Approval{{Name: "ledger", When: `tool.name == "ledger"`}}
	return def
}

func countControl(tr record.Transcript, verb string) int {
	n := 0
	for _, e := range tr.Transcript {
		if e.Kind == record.KindControl && e.Name == verb {
			n++
		}
	}
	return n
}

// TestControlCrash kills a worker with kill -9 around control messages
// and checks that a second worker applies each message exactly once: a
// steer applied but not acked is not applied again; a cancel published
// while the owner lies dead mid-step, or applied but not acked, ends the
// session cancelled with the interrupted call answered, and the
// replay-unsafe tool never runs.
func TestControlCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess crash test")
	}
	t.Run("steer applied before the ack", func(t *testing.T) {
		// A control message applies only to a session that exists: the
		// session first waits on an approval, then the steer reaches it.
		e := newCrashEnv(t)
		def := gatedCrashDef()
		first := startChild(t, e.spec("w0", def, false, nil))
		ref := e.send(t, "crash", "s1", "write it")
		tr := e.waitStatus(t, ref, record.StatusBlocked, first)
		first.kill()
		seq := e.publish(t, ref, control.Message{Verb: control.Steer, Text: "mind the ledger"})
		second := startChild(t, e.spec("w1", def, false, &crashPoint{Phase: worker.PhaseControl, Step: seq}))
		second.waitPoint(t, time.Minute)
		second.kill()
		third := startChild(t, e.spec("w2", def, false, nil))
		e.publish(t, ref, control.Message{Verb: control.Approve, CallID: tr.WaitingFor})
		tr = e.waitDone(t, ref, first, second, third)
		if n := countControl(tr, "steer"); n != 1 {
			t.Fatalf("steer applied %d times: %+v", n, tr.Transcript)
		}
		checkOneResult(t, tr)
		e.ctlAcked(t, "crash")
		natstestPollAcked(t, e, "crash")
	})
	t.Run("cancel while the owner is dead mid-step", func(t *testing.T) {
		e := newCrashEnv(t)
		first := startChild(t, e.spec("w1", crashDef(), false, &crashPoint{Phase: worker.PhaseEffect, Kind: record.StepTool, Step: 2}))
		ref := e.send(t, "crash", "s1", "write it")
		first.waitPoint(t, time.Minute)
		first.kill()
		e.publish(t, ref, control.Message{Verb: control.Cancel, Text: "owner died"})
		second := startChild(t, e.spec("w2", crashDef(), false, nil))
		tr := e.waitStatus(t, ref, record.StatusCancelled, first, second)
		results := checkOneResult(t, tr)
		for id, r := range results {
			// The call's intent was written: for all the worker that
			// comes next knows, it may have run.
			if r.Result != "cancelled; may or may not have run" || !r.IsError {
				t.Errorf("call %s: result %+v", id, r)
			}
			if runs := ledgerCounts(t, filepath.Join(e.dir, "ledger"))["s1 "+id]; runs != 0 {
				t.Errorf("call %s ran %d times", id, runs)
			}
		}
		if tr.Pending != nil || countControl(tr, "cancel") != 1 {
			t.Fatalf("pending %+v, transcript %+v", tr.Pending, tr.Transcript)
		}
		e.ctlAcked(t, "crash")
		natstestPollAcked(t, e, "crash")
	})
	t.Run("cancel applied before the ack", func(t *testing.T) {
		e := newCrashEnv(t)
		def := gatedCrashDef()
		first := startChild(t, e.spec("w0", def, false, nil))
		ref := e.send(t, "crash", "s1", "write it")
		e.waitStatus(t, ref, record.StatusBlocked, first)
		first.kill()
		seq := e.publish(t, ref, control.Message{Verb: control.Cancel})
		second := startChild(t, e.spec("w1", def, false, &crashPoint{Phase: worker.PhaseControl, Step: seq}))
		second.waitPoint(t, time.Minute)
		second.kill()
		e.send(t, "crash", "s1", "write it again")
		third := startChild(t, e.spec("w2", def, false, nil))
		tr := e.waitStatus(t, ref, record.StatusCancelled, first, second, third)
		if countControl(tr, "cancel") != 1 {
			t.Fatalf("transcript %+v", tr.Transcript)
		}
		e.ctlAcked(t, "crash")
		// The event sent to the cancelled session is dead-lettered, not run.
		natstestPollAcked(t, e, "crash")
		if runs := ledgerCounts(t, filepath.Join(e.dir, "ledger")); len(runs) != 0 {
			t.Fatalf("ledger %v", runs)
		}
	})
	t.Run("owner dies running the call an approve let through", func(t *testing.T) {
		e := newCrashEnv(t)
		def := gatedCrashDef()
		first := startChild(t, e.spec("w1", def, false, &crashPoint{Phase: worker.PhaseEffect, Kind: record.StepTool, Step: 2}))
		ref := e.send(t, "crash", "s1", "write it")
		tr := e.waitStatus(t, ref, record.StatusBlocked, first)
		e.publish(t, ref, control.Message{Verb: control.Approve, CallID: tr.WaitingFor})
		first.waitPoint(t, time.Minute)
		first.kill()
		// The approve is the only message of the run: its redelivery
		// brings the session to a worker that recovers the call.
		second := startChild(t, e.spec("w2", def, false, nil))
		tr = e.waitDone(t, ref, first, second)
		for id, r := range checkOneResult(t, tr) {
			if r.Result != "interrupted; may or may not have run" {
				t.Errorf("call %s: result %+v", id, r)
			}
			if runs := ledgerCounts(t, filepath.Join(e.dir, "ledger"))["s1 "+id]; runs != 0 {
				t.Errorf("call %s ran %d times", id, runs)
			}
		}
		if countControl(tr, "approve") != 1 {
			t.Fatalf("transcript %+v", tr.Transcript)
		}
		e.ctlAcked(t, "crash")
		natstestPollAcked(t, e, "crash")
	})
}
