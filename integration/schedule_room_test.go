package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
)

// A backfill whose ticks would take their agent past its share of JL_IN's
// room is answered 503 with the reason, writes none of them and leaves a
// no_room record in JL_AUDIT; one within the share fires.
func TestScheduleBackfillChecksRoom(t *testing.T) {
	n := streams.Default()
	// A room of 40 messages: 10 an agent.
	e := newOpsEnvWith(t, streams.Options{Limits: map[string]streams.Limit{n.StreamIn(): {Bytes: 64 << 20, Msgs: 40}}})
	now := time.Now()
	e.put(t, "mon", policies.Schedule{Name: "hourly", Cron: farCron(now)})
	e.reconcile(t)
	ctx := context.Background()
	in, err := e.js.Stream(ctx, n.StreamIn())
	if err != nil {
		t.Fatal(err)
	}
	held := func() uint64 {
		t.Helper()
		info, err := in.Info(ctx, jetstream.WithSubjectFilter("jl.in.mon.>"))
		if err != nil {
			t.Fatal(err)
		}
		var sum uint64
		for _, c := range info.State.Subjects {
			sum += c
		}
		return sum
	}
	_, err = e.client.Schedules(ctx, api.SchedulesRequest{Action: api.ScheduleBackfill, Agent: "mon", Schedule: "hourly", From: now.Add(-20 * time.Hour), To: now})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != 503 || !strings.Contains(ae.Message, "agent mon would hold") {
		t.Fatalf("a backfill of 20 ticks for an agent with a share of 10: %v, want 503 naming the share", err)
	}
	if n := held(); n != 0 {
		t.Fatalf("the refused backfill wrote %d ticks", n)
	}
	audit, err := e.js.Stream(ctx, n.StreamAudit())
	if err != nil {
		t.Fatal(err)
	}
	subj, err := n.Audit("room", "mon")
	if err != nil {
		t.Fatal(err)
	}
	m, err := audit.GetLastMsgForSubject(ctx, subj)
	if err != nil || !strings.Contains(string(m.Data), `"decision":"no_room"`) || !strings.Contains(string(m.Data), `"schedule":"hourly"`) {
		t.Fatalf("no no_room record of the refused backfill on %s: %v", subj, err)
	}
	resp, err := e.client.Schedules(ctx, api.SchedulesRequest{Action: api.ScheduleBackfill, Agent: "mon", Schedule: "hourly", From: now.Add(-5 * time.Hour), To: now})
	if err != nil || len(resp.Ticks) != 5 {
		t.Fatalf("a backfill of 5 ticks within the share: %+v, %v", resp, err)
	}
	if n := held(); n != 5 {
		t.Fatalf("JL_IN holds %d ticks of mon, want 5", n)
	}
}
