package streams_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

// Messages without data whose senders set the Status (and Description)
// of each status the server answers a pull with are delivered by
// Consume as messages, in order, with their headers, among messages
// with data, and acknowledged: the consumer has nothing left to ack.
// The client's own Consume hands none of them on.
func TestConsumeDeliversAStatusHeader(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "P", Subjects: []string{"p.>"}}); err != nil {
		t.Fatal(err)
	}
	statuses := []nats.Header{
		{"Status": {"503"}},
		{"Status": {"400"}, "Description": {"Bad Request"}},
		{"Status": {"409"}, "Description": {"Consumer Deleted"}},
		{"Status": {"408"}, "Nats-Pending-Messages": {"x"}},
		{"Status": {"404"}, "Description": {"No Messages"}},
		{"Status": {"100"}, "Description": {"Idle Heartbeat"}},
	}
	var want []string
	for i, h := range statuses {
		for _, m := range []*nats.Msg{{Subject: fmt.Sprint("p.", i), Header: h}, {Subject: fmt.Sprint("p.", i), Data: []byte("data")}} {
			if _, err := js.PublishMsg(ctx, m); err != nil {
				t.Fatal(err)
			}
			want = append(want, fmt.Sprintf("%s %q %s", m.Subject, m.Data, m.Header.Get("Status")))
		}
	}
	c, err := js.CreateOrUpdateConsumer(ctx, "P", jetstream.ConsumerConfig{Durable: "d", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, len(want))
	cc, err := streams.Consume(ctx, js, "P", "d", 4, func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			t.Errorf("metadata of %s: %v", m.Subject(), err)
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Errorf("ack of %d: %v", md.Sequence.Stream, err)
		}
		got <- fmt.Sprintf("%s %q %s", m.Subject(), m.Data(), m.Headers().Get("Status"))
	}, func(err error) { t.Errorf("consume: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		select {
		case g := <-got:
			if g != w {
				t.Fatalf("delivery %d: %s, want %s", i, g, w)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("delivery %d (%s) not handed on", i, w)
		}
	}
	cc.Stop()
	select {
	case <-cc.Closed():
	case <-time.After(30 * time.Second):
		t.Fatal("not closed after Stop")
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.NumPending != 0 {
		t.Fatalf("%d waiting for an ack, %d pending; want none", info.NumAckPending, info.NumPending)
	}
}

// Consume ends when its consumer is deleted, and when it is stopped.
func TestConsumeEnds(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "E", Subjects: []string{"e.>"}}); err != nil {
		t.Fatal(err)
	}
	for _, deleted := range []bool{true, false} {
		t.Run(fmt.Sprintf("deleted %t", deleted), func(t *testing.T) {
			name := fmt.Sprint("d", deleted)
			if _, err := js.CreateOrUpdateConsumer(ctx, "E", jetstream.ConsumerConfig{Durable: name, FilterSubject: "e." + name, AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
				t.Fatal(err)
			}
			got := make(chan uint64, 1)
			cc, err := streams.Consume(ctx, js, "E", name, 4, func(m jetstream.Msg) {
				md, _ := m.Metadata()
				_ = m.Ack()
				got <- md.Sequence.Stream
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			ack, err := js.Publish(ctx, "e."+name, []byte("x"))
			if err != nil {
				t.Fatal(err)
			}
			select {
			case seq := <-got:
				if seq != ack.Sequence {
					t.Fatalf("delivered %d, want %d", seq, ack.Sequence)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("nothing delivered")
			}
			if deleted {
				if err := js.DeleteConsumer(ctx, "E", name); err != nil {
					t.Fatal(err)
				}
			} else {
				cc.Stop()
			}
			select {
			case <-cc.Closed():
			case <-time.After(30 * time.Second):
				t.Fatal("still consuming")
			}
		})
	}
}
