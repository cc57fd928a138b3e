package streams_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

// Every stream and bucket has byte and message limits, and every one that
// holds what is not yet consumed refuses new writes when full instead of
// dropping old ones; JL_AUDIT, a record, drops its oldest.
func TestEveryResourceIsBounded(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	opts := streams.Options{}
	if _, err := streams.Provision(ctx, js, opts); err != nil {
		t.Fatal(err)
	}
	n := streams.Default()
	var total int64
	for name, c := range configs(t, js, opts) {
		if c.MaxBytes <= 0 || c.MaxMsgs <= 0 {
			t.Errorf("%s: max_bytes %d, max_msgs %d: unbounded", name, c.MaxBytes, c.MaxMsgs)
		}
		total += c.MaxBytes
		want := jetstream.DiscardNew
		switch name {
		case n.StreamAudit():
			want = jetstream.DiscardOld
		case streams.KVStream(n.BucketDedupe()):
			// Ids remembered for a while: the oldest are forgotten.
			want = jetstream.DiscardOld
		case n.StreamIn():
			// Message schedules forbid discard new; the ingest refuses
			// at half (streams.Room).
			want = jetstream.DiscardOld
		}
		if c.Discard != want {
			t.Errorf("%s: discard %v, want %v", name, c.Discard, want)
		}
	}
	// JL_IN's server limit is twice its share: its working limit is half.
	if total-streams.Limits(opts)[n.StreamIn()].Bytes/2 > streams.DefaultStorageBudget {
		t.Errorf("limits add up to %d bytes, over the budget of %d", total, streams.DefaultStorageBudget)
	}
}

// A full stream that holds unconsumed messages refuses the next one with an
// error that says so, and keeps every message it had.
func TestFullStreamRefusesNewKeepsOld(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	n := streams.Default()
	opts := streams.Options{Limits: map[string]streams.Limit{
		n.StreamCtl():      {Bytes: 1 << 20, Msgs: 5},
		n.BucketSessions(): {Bytes: 1 << 20, Msgs: 3},
	}}
	if _, err := streams.Provision(ctx, js, opts); err != nil {
		t.Fatal(err)
	}
	subject := n.CtlAll()[:len(n.CtlAll())-1] + "a.s"
	for i := range 5 {
		if _, err := js.Publish(ctx, subject, fmt.Appendf(nil, "m%d", i)); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	_, err := js.Publish(ctx, subject, []byte("one too many"))
	if err == nil || !strings.Contains(err.Error(), "maximum messages") {
		t.Fatalf("publish to a full %s: %v, want maximum messages exceeded", n.StreamCtl(), err)
	}
	s, _ := js.Stream(ctx, n.StreamCtl())
	if m, err := s.GetMsg(ctx, 1); err != nil || string(m.Data) != "m0" {
		t.Fatalf("first message of a full stream: %v %v", m, err)
	}

	kv, err := js.KeyValue(ctx, n.BucketSessions())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := kv.Put(ctx, fmt.Sprintf("a.s%d.state", i), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Put(ctx, "a.s9.state", []byte("{}")); err == nil {
		t.Fatal("a put into a full bucket was stored")
	}
	if _, err := kv.Get(ctx, "a.s0.state"); err != nil {
		t.Fatalf("the first key of a full bucket: %v", err)
	}
}

// Room refuses writes to JL_IN once it holds half its limits, before the
// server's own limits (where the oldest would go) are reached.
func TestRoomRefusesAtHalf(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	n := streams.Default()
	if _, err := streams.Provision(ctx, js, streams.Options{Limits: map[string]streams.Limit{n.StreamIn(): {Bytes: 1 << 20, Msgs: 4}}}); err != nil {
		t.Fatal(err)
	}
	room := streams.NewRoom(js, n.StreamIn())
	subject := n.InAll()[:len(n.InAll())-1] + "a.s"
	natstest.WaitFor(t, 10*time.Second, func() error {
		if err := room.Check(ctx, 1, 64); err != nil {
			return nil
		}
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: []byte("event")}); err != nil {
			t.Fatal(err)
		}
		return errors.New("room left")
	})
	err := room.Check(ctx, 1, 64)
	if !errors.Is(err, streams.ErrFull) || !strings.Contains(err.Error(), "half its max_msgs 8") {
		t.Fatalf("check of a half-full JL_IN: %v", err)
	}
	s, _ := js.Stream(ctx, n.StreamIn())
	info, _ := s.Info(ctx)
	if info.State.Msgs >= 8 || info.State.FirstSeq != 1 {
		t.Fatalf("JL_IN %+v: reached its server limit or lost its oldest", info.State)
	}
}

// Provision never sets a limit below what a resource holds: a smaller
// budget on a fuller deployment leaves it room instead of refusing every
// write.
func TestProvisionNeverLimitsBelowWhatIsHeld(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	n := streams.Default()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	subject := n.CtlAll()[:len(n.CtlAll())-1] + "a.s"
	for range 8 {
		if _, err := js.Publish(ctx, subject, []byte("held")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := streams.Provision(ctx, js, streams.Options{Limits: map[string]streams.Limit{n.StreamCtl(): {Bytes: 1 << 20, Msgs: 2}}}); err != nil {
		t.Fatal(err)
	}
	s, _ := js.Stream(ctx, n.StreamCtl())
	if got := s.CachedInfo().Config.MaxMsgs; got != 10 {
		t.Fatalf("max_msgs %d for a stream holding 8, want 10", got)
	}
}

// An agent that holds its share of JL_IN's room is refused while another
// agent is let through, and a source that added its share within its
// window is refused whole, while another source is not.
func TestRoomSharesOfAgentsAndSources(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	n := streams.Default()
	// A room of 40 messages: 10 an agent, 20 a source within its window.
	if _, err := streams.Provision(ctx, js, streams.Options{Limits: map[string]streams.Limit{n.StreamIn(): {Bytes: 1 << 20, Msgs: 40}}}); err != nil {
		t.Fatal(err)
	}
	room := streams.NewInRoom(js, n, streams.Shares{Agent: 25, Source: 50, SourceWindow: time.Hour})
	for i := range 10 {
		subject := n.InAll()[:len(n.InAll())-1] + "a.s" + fmt.Sprint(i)
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: []byte("event")}); err != nil {
			t.Fatal(err)
		}
	}
	refused, err := room.Take(ctx, streams.Write{Source: "github", Agents: map[string]int{"a": 1, "b": 1}, Bytes: 64})
	if err != nil || refused["b"] != nil || !errors.Is(refused["a"], streams.ErrShare) || !strings.Contains(refused["a"].Error(), "agent a would hold 11 messages") {
		t.Fatalf("agent a with 10 of its 10: refused %v, err %v", refused, err)
	}
	for range 9 {
		if refused, err := room.Take(ctx, streams.Write{Source: "github", Agents: map[string]int{"b": 1, "c": 1}, Bytes: 64}); err != nil || len(refused) > 0 {
			t.Fatalf("github within its share: refused %v, err %v", refused, err)
		}
	}
	// 19 of github's 20 so far (b's one above and nine of two).
	_, err = room.Take(ctx, streams.Write{Source: "github", Agents: map[string]int{"d": 2}, Bytes: 64})
	if !errors.Is(err, streams.ErrShare) || !strings.Contains(err.Error(), "source github added 19 messages") {
		t.Fatalf("github past its share: %v", err)
	}
	if refused, err := room.Take(ctx, streams.Write{Source: "request", Agents: map[string]int{"d": 2}, Bytes: 64}); err != nil || len(refused) > 0 {
		t.Fatalf("another source: refused %v, err %v", refused, err)
	}
}
