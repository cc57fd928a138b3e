package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/worker"
)

// TestConsumerDeletedIsConsumedAgain deletes an agent's durable consumers
// on JL_IN and JL_CTL while a worker consumes them: the server ends the
// worker's pulls, and the worker creates both again and goes on, so the
// agent's next event runs.
func TestConsumerDeletedIsConsumedAgain(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	def := policies.Definition{Name: "demo", Model: scripted(policies.ScriptEntry{Text: "one"}, policies.ScriptEntry{Text: "two"})}
	e.start(t, worker.Config{Definitions: defs{"demo": def}, Agents: []string{"demo"}})
	ref := e.ref(t, "demo", "s1")
	e.send(t, ref, "first")
	e.waitStatus(t, ref, record.StatusDone)

	in, err := streams.InConsumer(e.names, "demo")
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := streams.CtlConsumer(e.names, "demo")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{e.names.StreamIn(), e.names.StreamCtl()} {
		if err := e.js.DeleteConsumer(ctx, s, in.Durable); err != nil {
			t.Fatalf("delete consumer %s on %s: %v", in.Durable, s, err)
		}
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if _, err := e.js.Consumer(ctx, e.names.StreamCtl(), ctl.Durable); err != nil {
			return fmt.Errorf("consumer %s on %s: %w", ctl.Durable, e.names.StreamCtl(), err)
		}
		return nil
	})
	last := e.send(t, ref, "second")
	natstest.WaitFor(t, 30*time.Second, func() error {
		tr, err := record.Show(ctx, e.js, e.names, ref)
		if err != nil {
			return err
		}
		if tr.Status != record.StatusDone || tr.InSeq < last {
			return fmt.Errorf("status %s, consumed to %d, want done at %d", tr.Status, tr.InSeq, last)
		}
		return nil
	})
}
