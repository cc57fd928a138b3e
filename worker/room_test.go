package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/worker"
)

// A runtime writer of JL_IN checks its room: with JL_IN at three quarters
// of its limits, the timeout of an ask_human is refused with a JL_AUDIT
// record naming the writer and why, the session does not wait without its
// timer, and JL_IN reaches neither its limits nor loses its oldest; once
// room is free, the step is tried again and the session waits with its
// timer armed.
func TestRuntimeWriterRefusedWhenJLINIsFull(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	// A room of 40 messages, three quarters of the server's 80 for what
	// settles admitted work: 60.
	if _, err := streams.Provision(ctx, e.js, streams.Options{Limits: map[string]streams.Limit{e.names.StreamIn(): {Bytes: 8 << 20, Msgs: 40}}}); err != nil {
		t.Fatal(err)
	}
	filler := e.ref(t, "unserved", "filler")
	for range 59 {
		if _, err := e.js.Publish(ctx, e.names.In(filler), []byte("held")); err != nil {
			t.Fatal(err)
		}
	}
	def := policies.Definition{Name: "asker", Tools: []string{"ask"}, AskHuman: &policies.Wait{Timeout: policies.Duration(time.Hour), OnTimeout: policies.OnTimeoutCancel},
		Model: scripted(
			policies.ScriptEntry{Text: "Let me ask.", ToolCalls: []policies.ScriptToolCall{{Name: "ask", Args: map[string]any{"question": "Deploy?"}}}},
			policies.ScriptEntry{Text: "Deployed."})}
	e.start(t, worker.Config{Definitions: defs{"asker": def}, Tools: worker.ToolMap{"ask": asker{}}, Agents: []string{"asker"}})
	ref := e.ref(t, "asker", "s1")
	e.send(t, ref, "ship it") // the 60th message
	audit, err := e.js.OrderedConsumer(ctx, e.names.StreamAudit(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{"jl.audit.room.asker"}})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := audit.Next(jetstream.FetchMaxWait(30 * time.Second))
	if err != nil {
		t.Fatalf("no record of the refused timer: %v", err)
	}
	var rec struct{ Agent, Session, Writer, Decision, Reason string }
	if err := json.Unmarshal(msg.Data(), &rec); err != nil || rec.Session != "s1" || rec.Writer != "wait-timer" || rec.Decision != "no_room" ||
		!strings.Contains(rec.Reason, "three quarters of its max_msgs 80") {
		t.Fatalf("record %s: %v", msg.Data(), err)
	}
	if st := state(t, e, ref); st.Status == record.StatusBlocked {
		t.Fatalf("the session waits without its timer: %+v", st)
	}
	in, err := e.js.Stream(ctx, e.names.StreamIn())
	if err != nil {
		t.Fatal(err)
	}
	if info, err := in.Info(ctx); err != nil || info.State.FirstSeq != 1 || info.State.Msgs > 60 {
		t.Fatalf("JL_IN %+v, %v: past the line, or lost its oldest", info.State, err)
	}
	// Room again: the step is tried again and the session waits, its
	// timer armed.
	if err := in.Purge(ctx, jetstream.WithPurgeSubject(e.names.In(filler))); err != nil {
		t.Fatal(err)
	}
	timer, _ := e.names.Timer(ref, "wait")
	natstest.WaitFor(t, 60*time.Second, func() error {
		st := state(t, e, ref)
		if st.Status != record.StatusBlocked || st.WaitUntil.IsZero() {
			return fmt.Errorf("status %s, wait until %s", st.Status, st.WaitUntil)
		}
		if _, err := in.GetLastMsgForSubject(ctx, timer); err != nil {
			return fmt.Errorf("timer %s: %w", timer, err)
		}
		return nil
	})
}
