package streams

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Pull requests of Consume: each asks for up to its batch, the server
// answers with deliveries and, while it has none, a heartbeat every
// pullHeartbeat, and ends the request after pullExpires.
const (
	pullExpires   = 30 * time.Second
	pullHeartbeat = 5 * time.Second
	// pullStatusDelay is how long Consume waits before its next request
	// after the server ended one with a status other than its expiry.
	pullStatusDelay = time.Second
)

// ackPrefix begins the reply subject of every delivery of a consumer (the
// subject its ack goes to); a status of the server has no reply subject.
const ackPrefix = "$JS.ACK."

// Consume delivers the messages of the durable pull consumer consumer on
// stream, up to batch a request, to handle, one at a time, until the
// returned context is stopped, ctx ends or the consumer is gone (its
// Closed is closed then too).
//
// It is the consumer's Consume of the client, without taking a delivery
// for the server's status: the client reads a delivery without data whose
// sender set a Status header (any stored message keeps the headers its
// sender set) as a heartbeat, the end of a request or the end of the
// consume, and never hands it on. Such deliveries were never
// acknowledged, were delivered again after every ack wait, and, as many
// as the consumer's MaxAckPending, left it delivering nothing more. Here
// only a message without a reply subject is a status: a delivery always
// has one, the subject of its ack.
func Consume(ctx context.Context, js jetstream.JetStream, stream, consumer string, batch int, handle func(jetstream.Msg), onErr func(error)) (jetstream.ConsumeContext, error) {
	if batch < 1 {
		return nil, fmt.Errorf("streams: consume %s on %s: batch %d: want at least 1", consumer, stream, batch)
	}
	nc := js.Conn()
	subj := apiPrefix(js.Options()) + "CONSUMER.MSG.NEXT." + stream + "." + consumer
	body, err := json.Marshal(struct {
		Batch     int           `json:"batch"`
		Expires   time.Duration `json:"expires"`
		Heartbeat time.Duration `json:"idle_heartbeat"`
	}{batch, pullExpires, pullHeartbeat})
	if err != nil {
		return nil, fmt.Errorf("streams: consume %s on %s: %w", consumer, stream, err)
	}
	inbox := nc.NewInbox()
	// Room for a whole batch and the statuses around it: a delivery the
	// channel has no room for is dropped by the client.
	msgs := make(chan *nats.Msg, 4*batch+16)
	sub, err := nc.ChanSubscribe(inbox, msgs)
	if err != nil {
		return nil, fmt.Errorf("streams: consume %s on %s: subscribe %s: %w", consumer, stream, inbox, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	c := &consuming{cancel: cancel, closed: make(chan struct{})}
	report := func(err error) {
		if onErr != nil && cctx.Err() == nil {
			onErr(fmt.Errorf("streams: consume %s on %s: %w", consumer, stream, err))
		}
	}
	go func() {
		defer close(c.closed)
		defer func() { _ = sub.Unsubscribe() }()
		for cctx.Err() == nil {
			var delay time.Duration
			if err := nc.PublishRequest(subj, inbox, body); err != nil {
				report(fmt.Errorf("request: %w", err))
				delay = pullStatusDelay
			} else {
				delay = c.receive(cctx, nc, msgs, batch, handle, report)
			}
			if delay < 0 {
				return
			}
			if delay > 0 {
				t := time.NewTimer(delay)
				select {
				case <-cctx.Done():
					t.Stop()
				case <-t.C:
				}
			}
		}
	}()
	return c, nil
}

// consuming is the jetstream.ConsumeContext of Consume.
type consuming struct {
	cancel context.CancelFunc
	closed chan struct{}
	once   sync.Once
}

// receive hands on the deliveries of one pull request until it is
// fulfilled or ended, and returns how long to wait before the next, or a
// negative delay when the consumer is gone: consuming ends then.
func (c *consuming) receive(ctx context.Context, nc *nats.Conn, msgs <-chan *nats.Msg, batch int, handle func(jetstream.Msg), report func(error)) time.Duration {
	// A request the server stopped answering (it restarted, the
	// connection was lost) is given up after two missed heartbeats.
	idle := time.NewTimer(2 * pullHeartbeat)
	defer idle.Stop()
	for got := 0; got < batch; {
		select {
		case <-ctx.Done():
			return 0
		case <-idle.C:
			report(jetstream.ErrNoHeartbeat)
			return 0
		case m := <-msgs:
			idle.Reset(2 * pullHeartbeat)
			if strings.HasPrefix(m.Reply, ackPrefix) {
				handle(delivery{m, nc})
				got++
				continue
			}
			switch st, descr := m.Header.Get("Status"), m.Header.Get("Description"); {
			case st == "100":
				// A heartbeat: the request is still open.
			case st == "404", st == "408":
				// Nothing (more) to deliver before the request expired.
				return 0
			case st == "503", st == "409" && strings.Contains(strings.ToLower(descr), "consumer deleted"):
				// No consumer answers: it is gone.
				report(fmt.Errorf("%w: status %s %s", jetstream.ErrConsumerNotFound, st, descr))
				return -1
			default:
				// Consumer deleted, too many waiting requests, leader
				// changed, ...: ask again, not at once.
				report(fmt.Errorf("status %s %s", st, descr))
				return pullStatusDelay
			}
		}
	}
	return 0
}

// Stop stops consuming; a delivery being handled is handled to its end.
func (c *consuming) Stop() { c.once.Do(c.cancel) }

// Drain stops consuming, as Stop does.
func (c *consuming) Drain() { c.Stop() }

// Closed is closed once consuming has stopped.
func (c *consuming) Closed() <-chan struct{} { return c.closed }

// delivery is one delivery of Consume, acknowledged on its reply subject
// as the server's protocol says.
type delivery struct {
	m  *nats.Msg
	nc *nats.Conn
}

// Metadata reads where the delivery was stored and how often it was
// delivered, from its reply subject.
func (d delivery) Metadata() (*jetstream.MsgMetadata, error) {
	md, err := d.m.Metadata()
	if err != nil {
		return nil, fmt.Errorf("streams: delivery on %s: %w", d.m.Subject, err)
	}
	return &jetstream.MsgMetadata{
		Sequence:     jetstream.SequencePair{Consumer: md.Sequence.Consumer, Stream: md.Sequence.Stream},
		NumDelivered: md.NumDelivered,
		NumPending:   md.NumPending,
		Timestamp:    md.Timestamp,
		Stream:       md.Stream,
		Consumer:     md.Consumer,
		Domain:       md.Domain,
	}, nil
}

// Data is the delivery's data.
func (d delivery) Data() []byte { return d.m.Data }

// Headers are the delivery's headers.
func (d delivery) Headers() nats.Header { return d.m.Header }

// Subject is the subject the message was stored on.
func (d delivery) Subject() string { return d.m.Subject }

// Reply is the delivery's ack subject.
func (d delivery) Reply() string { return d.m.Reply }

// Ack acknowledges the delivery.
func (d delivery) Ack() error { return d.send("+ACK") }

// DoubleAck acknowledges the delivery and waits for the server to confirm.
func (d delivery) DoubleAck(ctx context.Context) error {
	if _, err := d.nc.RequestWithContext(ctx, d.m.Reply, []byte("+ACK")); err != nil {
		return fmt.Errorf("streams: ack of a delivery on %s: %w", d.m.Subject, err)
	}
	return nil
}

// Nak asks for the delivery again.
func (d delivery) Nak() error { return d.send("-NAK") }

// NakWithDelay asks for the delivery again after delay.
func (d delivery) NakWithDelay(delay time.Duration) error {
	if delay <= 0 {
		return d.Nak()
	}
	return d.send(fmt.Sprintf(`-NAK {"delay": %d}`, delay.Nanoseconds()))
}

// InProgress resets the delivery's ack wait.
func (d delivery) InProgress() error { return d.send("+WPI") }

// Term asks for the delivery never again.
func (d delivery) Term() error { return d.send("+TERM") }

// TermWithReason asks for the delivery never again, saying why.
func (d delivery) TermWithReason(reason string) error { return d.send("+TERM " + reason) }

// send publishes ack to the delivery's reply subject.
func (d delivery) send(ack string) error {
	if err := d.nc.Publish(d.m.Reply, []byte(ack)); err != nil {
		return fmt.Errorf("streams: %s of a delivery on %s: %w", ack, d.m.Subject, err)
	}
	return nil
}
