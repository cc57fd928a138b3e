package streams_test

import (
	"bytes"
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

// An agent whose events are much larger than the stream's average (the
// schedule ticks and small events of other agents) is held to its share of
// the room's bytes, by every Room that counts it, a fresh one too (a second
// ingest, or one that restarted): it is refused while another agent is
// still let through, and never fills the room for all.
func TestRoomAgentShareOfBytesWithLargeEvents(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	n := streams.Default()
	// A room of 4 MiB: 1 MiB an agent.
	if _, err := streams.Provision(ctx, js, streams.Options{Limits: map[string]streams.Limit{n.StreamIn(): {Bytes: 4 << 20, Msgs: 1_000_000}}}); err != nil {
		t.Fatal(err)
	}
	in := n.InAll()[:len(n.InAll())-1]
	for i := range 2000 {
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: in + "ticks.s" + fmt.Sprint(i), Data: []byte("tick")}); err != nil {
			t.Fatal(err)
		}
	}
	const size = 64 << 10
	big := bytes.Repeat([]byte("x"), size)
	shares := streams.Shares{Agent: 25, Source: 100}
	for i := range 100 {
		refused, err := streams.NewInRoom(js, n, shares).Take(ctx, streams.Write{Agents: map[string]int{"big": 1}, Bytes: size})
		if err != nil {
			t.Fatalf("event %d of agent big (%d KiB in JL_IN): the room is refused for all: %v", i, i*size>>10, err)
		}
		if refused["big"] != nil {
			if !errors.Is(refused["big"], streams.ErrShare) {
				t.Fatalf("event %d of agent big: %v, want ErrShare", i, refused["big"])
			}
			if i*size > 5<<20/4 {
				t.Fatalf("agent big refused only after %d KiB, its share is 1024 KiB", i*size>>10)
			}
			refused, err := streams.NewInRoom(js, n, shares).Take(ctx, streams.Write{Agents: map[string]int{"other": 1}, Bytes: 64})
			if err != nil || len(refused) > 0 {
				t.Fatalf("another agent once big holds its share: refused %v, err %v", refused, err)
			}
			return
		}
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: in + "big.s" + fmt.Sprint(i), Data: big}); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("agent big let through %d KiB, its share is 1024 KiB", 100*size>>10)
}

// Near its line, or an agent near its share, a Room reads the stream
// again at most ten times a second, not at every write: a flood near the
// line must not cost a JetStream request (with every subject of the agent
// in its answer) per event.
func TestRoomNearTheLineReadsBounded(t *testing.T) {
	ctx := context.Background()
	n := streams.Default()
	in := n.InAll()[:len(n.InAll())-1]
	for _, tt := range []struct {
		name   string
		shares streams.Shares
	}{
		// A room of 400 messages: 100 an agent. 85 held: near both.
		{name: "agent near its share", shares: streams.Shares{Agent: 25, Source: 100}},
		{name: "stream near half", shares: streams.Shares{Agent: 100, Source: 100}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := natstest.RunServer(t)
			nc, js := natstest.Connect(t, srv.ClientURL())
			limit := int64(400)
			if tt.shares.Agent == 100 {
				limit = 100 // 85 of a room of 100: over 40% of the limits
			}
			if _, err := streams.Provision(ctx, js, streams.Options{Limits: map[string]streams.Limit{n.StreamIn(): {Bytes: 64 << 20, Msgs: limit}}}); err != nil {
				t.Fatal(err)
			}
			for i := range 85 {
				if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: in + "a.s" + fmt.Sprint(i), Data: []byte("event")}); err != nil {
					t.Fatal(err)
				}
			}
			room := streams.NewInRoom(js, n, tt.shares)
			if refused, err := room.Take(ctx, streams.Write{Agents: map[string]int{"a": 1}, Bytes: 64}); err != nil || len(refused) > 0 {
				t.Fatalf("first write: refused %v, err %v", refused, err)
			}
			start, before := time.Now(), nc.Stats().OutMsgs
			const writes = 10
			for i := range writes {
				if refused, err := room.Take(ctx, streams.Write{Agents: map[string]int{"a": 1}, Bytes: 64}); err != nil || len(refused) > 0 {
					t.Fatalf("write %d: refused %v, err %v", i, refused, err)
				}
			}
			requests := nc.Stats().OutMsgs - before
			// Ten reads a second at most, two requests each (the stream, the agent).
			if most := 2 * (1 + uint64(time.Since(start)/(100*time.Millisecond))); requests > most {
				t.Fatalf("%d writes near the line made %d requests, want at most %d", writes, requests, most)
			}
		})
	}
}

// What a Room reads of an agent's share is one small answer, whatever the
// number of the agent's sessions (subjects) in JL_IN, and it counts every
// message of them.
func TestRoomAgentReadIsSmall(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	nc, js := natstest.Connect(t, srv.ClientURL())
	n := streams.Default()
	// A room of 20,000 messages: 5,000 an agent.
	if _, err := streams.Provision(ctx, js, streams.Options{Limits: map[string]streams.Limit{n.StreamIn(): {Bytes: 64 << 20, Msgs: 20_000}}}); err != nil {
		t.Fatal(err)
	}
	in := n.InAll()[:len(n.InAll())-1]
	const sessions = 4000
	for i := range sessions {
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: in + "a.session-with-a-long-name-" + fmt.Sprint(i), Data: []byte("e")}); err != nil {
			t.Fatal(err)
		}
	}
	room := streams.NewInRoom(js, n, streams.Shares{Agent: 25, Source: 100})
	before := nc.Stats().InBytes
	if refused, err := room.Take(ctx, streams.Write{Agents: map[string]int{"a": 1}, Bytes: 64}); err != nil || len(refused) > 0 {
		t.Fatalf("agent a with %d of its 5000: refused %v, err %v", sessions, refused, err)
	}
	if got := nc.Stats().InBytes - before; got > 32<<10 {
		t.Fatalf("reading the share of an agent with %d sessions took %d bytes", sessions, got)
	}
	// The count is right: 1000 more are refused past 5000.
	refused, err := room.Take(ctx, streams.Write{Agents: map[string]int{"a": 1000}, Bytes: 64})
	if err != nil || !errors.Is(refused["a"], streams.ErrShare) || !strings.Contains(refused["a"].Error(), fmt.Sprintf("would hold %d messages", sessions+1001)) {
		t.Fatalf("agent a past its share: refused %v, err %v", refused, err)
	}
}

// noConsumers is a JetStream whose streams refuse to make consumers, as a
// cluster without a meta leader does.
type noConsumers struct{ jetstream.JetStream }

func (j noConsumers) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	s, err := j.JetStream.Stream(ctx, name)
	return noConsumerStream{s}, err
}

type noConsumerStream struct{ jetstream.Stream }

func (noConsumerStream) CreateConsumer(context.Context, jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	return nil, jetstream.ErrJetStreamNotEnabled
}

// Where no consumer can be made to count an agent's share, the Room counts
// it from a filtered stream info, and still refuses past it.
func TestRoomAgentCountWithoutConsumers(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	n := streams.Default()
	if _, err := streams.Provision(ctx, js, streams.Options{Limits: map[string]streams.Limit{n.StreamIn(): {Bytes: 1 << 20, Msgs: 40}}}); err != nil {
		t.Fatal(err)
	}
	in := n.InAll()[:len(n.InAll())-1]
	for i := range 10 {
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: in + "a.s" + fmt.Sprint(i), Data: []byte("event")}); err != nil {
			t.Fatal(err)
		}
	}
	room := streams.NewInRoom(noConsumers{js}, n, streams.Shares{Agent: 25, Source: 100})
	refused, err := room.Take(ctx, streams.Write{Agents: map[string]int{"a": 1, "b": 1}, Bytes: 64})
	if err != nil || refused["b"] != nil || !errors.Is(refused["a"], streams.ErrShare) || !strings.Contains(refused["a"].Error(), "agent a would hold 11 messages") {
		t.Fatalf("agent a with 10 of its 10, counted without consumers: refused %v, err %v", refused, err)
	}
}
