package dlq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/dlq"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/schedule"
	"github.com/jetloop/jetloop/streams"
)

// TestRedriveTick dead-letters a fired tick (its schedule headers, which
// no client may publish, kept under Jl-Orig- names) and redrives it: it
// goes back to its input subject as the same tick, with no header of the
// server's or of the letter, once however often it is redriven.
func TestRedriveTick(t *testing.T) {
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := streams.Default()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	ref, _ := streams.NewSessionRef("mon", "drift")
	next := time.Date(2026, 1, 1, 0, 5, 0, 0, time.UTC).Format(time.RFC3339Nano)
	h := nats.Header{
		"ce-specversion": {"1.0"}, "ce-type": {"dev.jetloop.tick"}, "ce-source": {"/jetloop/schedule"}, "ce-id": {"t1"},
		"Content-Type":           {"application/json"},
		schedule.HeaderScheduler: {"jl.sched.mon.drift"},
		schedule.HeaderNext:      {next},
		"Nats-TTL":               {"never"},
		"Nats-Sequence":          {"41"}, // as a direct get reads it
		"Nats-Stream":            {"JL_IN"},
	}
	letter, err := dlq.New(names, dlq.SessionCancelled, "session is cancelled", names.In(ref), 41, h, []byte(`{"schedule":"drift"}`))
	if err != nil {
		t.Fatal(err)
	}
	ack, err := js.PublishMsg(ctx, letter)
	if err != nil {
		t.Fatal(err)
	}
	ls, next0, err := dlq.List(ctx, js, names, dlq.Filter{Reason: dlq.SessionCancelled})
	if err != nil || len(ls) != 1 || next0 != 0 || ls[0].Seq != ack.Sequence || ls[0].Agent != "mon" || ls[0].Session != "drift" || ls[0].OrigSeq != 41 || ls[0].EventID != "t1" {
		t.Fatalf("list: %+v next %d, %v", ls, next0, err)
	}
	if ls, _, err := dlq.List(ctx, js, names, dlq.Filter{Reason: dlq.NoSession}); err != nil || len(ls) != 0 {
		t.Fatalf("list of another reason: %+v, %v", ls, err)
	}
	// Each listing removes the consumer it read with: the server keeps
	// an idle one for minutes and allows a stream only so many.
	if st, err := js.Stream(ctx, names.StreamDLQ()); err != nil {
		t.Fatal(err)
	} else if info, err := st.Info(ctx); err != nil {
		t.Fatal(err)
	} else if info.State.Consumers != 0 {
		t.Fatalf("%s has %d consumers after two listings, want 0", names.StreamDLQ(), info.State.Consumers)
	}
	r, err := dlq.NewRedriver(ctx, js, names, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, err := r.Redrive(ctx, ack.Sequence)
	if err != nil || first.Subject != names.In(ref) || first.Seq == 0 || first.Duplicate {
		t.Fatalf("redrive: %+v, %v", first, err)
	}
	in, err := js.Stream(ctx, names.StreamIn())
	if err != nil {
		t.Fatal(err)
	}
	m, err := in.GetMsg(ctx, first.Seq)
	if err != nil {
		t.Fatal(err)
	}
	tick, err := schedule.ParseTick(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
	if err != nil || tick.Scheduler != "jl.sched.mon.drift" || tick.NextHeader != next {
		t.Fatalf("redriven tick: %+v, %v; headers %v", tick, err, m.Header)
	}
	for k := range m.Header {
		switch k {
		case "Nats-TTL", "Jl-Orig-Nats-TTL", dlq.HeaderReason, dlq.HeaderDetail, dlq.HeaderSubject, dlq.HeaderSeq:
			t.Errorf("header %s went back", k)
		}
	}
	if m.Header.Get("ce-id") != "t1" || m.Header.Get(dlq.HeaderRedriveOf) == "" {
		t.Errorf("headers %v", m.Header)
	}
	again, err := r.Redrive(ctx, ack.Sequence)
	if err != nil || !again.Duplicate || again.Seq != first.Seq {
		t.Fatalf("second redrive: %+v, %v", again, err)
	}
	info, err := in.Info(ctx)
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("JL_IN holds %d messages after two redrives, want 1 (%v)", info.State.Msgs, err)
	}
	if _, err := r.Redrive(ctx, 999); !errors.Is(err, dlq.ErrNotFound) {
		t.Errorf("redrive of no letter: %v", err)
	}
}

// A redrive to a JL_IN that holds half its limits is refused, naming the
// stream, and publishes nothing: its server limits would drop the oldest.
func TestRedriveWaitsForRoomInJLIN(t *testing.T) {
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := streams.Default()
	if _, err := streams.Provision(ctx, js, streams.Options{Limits: map[string]streams.Limit{names.StreamIn(): {Bytes: 1 << 20, Msgs: 4}}}); err != nil {
		t.Fatal(err)
	}
	ref, _ := streams.NewSessionRef("mon", "drift")
	for range 4 {
		if _, err := js.Publish(ctx, names.In(ref), []byte("held")); err != nil {
			t.Fatal(err)
		}
	}
	h := nats.Header{"ce-specversion": {"1.0"}, "ce-type": {"dev.jetloop.request"}, "ce-source": {"/test"}, "ce-id": {"r1"}}
	letter, err := dlq.New(names, dlq.SessionCancelled, "session is cancelled", names.In(ref), 2, h, []byte(`{"text":"again"}`))
	if err != nil {
		t.Fatal(err)
	}
	ack, err := js.PublishMsg(ctx, letter)
	if err != nil {
		t.Fatal(err)
	}
	r, err := dlq.NewRedriver(ctx, js, names, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Redrive(ctx, ack.Sequence); !errors.Is(err, streams.ErrFull) || !strings.Contains(err.Error(), "JL_IN") {
		t.Fatalf("redrive to a JL_IN at half its limits: %v", err)
	}
	in, _ := js.Stream(ctx, names.StreamIn())
	if info, err := in.Info(ctx); err != nil || info.State.Msgs != 4 {
		t.Fatalf("JL_IN after a refused redrive: %+v, %v", info.State, err)
	}
}
