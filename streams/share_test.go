package streams_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

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
