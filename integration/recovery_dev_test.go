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
)

// TestDevRestartTakesBackItsSessions kills `jetloop dev` with kill -9
// while a model step is in flight and starts it again on the same --data:
// its worker has the identity it had (dev-1), finds the session's lease
// held by its dead incarnation (whose liveness subject nobody answers)
// and takes the session back at once, without waiting out the lease's
// 30 s TTL; the model call is made again and the session finishes. The
// time from the restart to the session moving is logged, not asserted.
func TestDevRestartTakesBackItsSessions(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop")
	}
	bin := buildJetloop(t)
	data := t.TempDir()
	t.Setenv("JETLOOP_WORK_DIR", t.TempDir())
	// Every line, debug ones too, is checked for repeated keys.
	t.Setenv("JETLOOP_LOG_LEVEL", "debug")
	p := startProc(t, bin, devArgs(data)...)
	url := p.waitReady(time.Minute)["nats"]
	putAgent(t, url, policies.Definition{Name: "thinker", Model: policies.Model{Provider: "scripted",
		Script: []policies.ScriptEntry{{Text: "Thought it over.", Delay: policies.Duration(3 * time.Second)}}}})
	if _, err := jetloopCmd(t, bin, "send", "--server", url, "thinker", "s1", "think"); err != nil {
		t.Fatalf("%v\ndev stderr:\n%s", err, p.Stderr())
	}
	ref, _ := streams.NewSessionRef("thinker", "s1")
	state := func(url string) (record.Transcript, error) {
		_, js := natstest.Connect(t, url)
		return record.Show(context.Background(), js, streams.Default(), ref)
	}
	natstest.WaitFor(t, time.Minute, func() error {
		tr, err := state(url)
		if err != nil {
			return err
		}
		if tr.Pending == nil || tr.Pending.Kind != record.StepModel {
			return fmt.Errorf("no model step in flight: %s, pending %+v", tr.Status, tr.Pending)
		}
		return nil
	})
	_ = p.cmd.Process.Kill()
	_ = p.wait(time.Minute)
	checkLogKeys(t, "the killed jetloop dev", p.Stderr())

	restarted := time.Now()
	p = startProc(t, bin, devArgs(data)...)
	ready := p.waitReady(time.Minute)
	readyAt := time.Now()
	url = ready["nats"]
	var moved time.Time
	natstest.WaitFor(t, time.Minute, func() error {
		tr, err := state(url)
		if err != nil {
			return err
		}
		if moved.IsZero() && (tr.Pending != nil && tr.Pending.Attempt >= 1 || tr.Status == record.StatusDone) {
			moved = time.Now()
		}
		if tr.Status != record.StatusDone {
			return fmt.Errorf("status %s, pending %+v", tr.Status, tr.Pending)
		}
		return nil
	})
	t.Logf("the session moved again %s after the restart (%s after the ready line); the lease's TTL is %s",
		moved.Sub(restarted).Round(time.Millisecond), moved.Sub(readyAt).Round(time.Millisecond), 30*time.Second)
	if !strings.Contains(p.Stderr(), "taking back a session from this worker's dead incarnation") {
		t.Fatalf("the restarted worker did not take the session back; it waited for the lease\nstderr:\n%s", p.Stderr())
	}
	checkLogKeys(t, "the restarted jetloop dev", p.Stderr())
	tr, err := state(url)
	if err != nil {
		t.Fatal(err)
	}
	made := 0
	for _, e := range tr.Transcript {
		if e.Kind == record.KindSystem && strings.Contains(e.Text, "was interrupted and made again") {
			made++
		}
	}
	if made != 1 || tr.Budget.Usage.UnknownUsageCalls != 1 {
		t.Errorf("transcript %+v, usage %+v", tr.Transcript, tr.Budget.Usage)
	}
}
