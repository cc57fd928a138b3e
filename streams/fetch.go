package streams

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ackPrefix begins the reply subject of every delivery of a consumer (the
// subject its ack goes to); a status of the server has no reply subject.
const ackPrefix = "$JS.ACK."

// Fetch hands handle, in order, up to batch messages the pull consumer
// consumer of stream has for it now, in one pull request that waits at
// most maxWait, and returns once the server has sent them or said it has
// no more. It is the client's Fetch without taking a delivery for the
// server's status: the client reads a delivery without data whose sender
// set a Status header (every delivery of a headers-only consumer has no
// data, and a stored message keeps the headers its sender set) as no
// responders or the end of the batch, and never hands it on. Here only a
// message without a reply subject is a status: a delivery always has one,
// the subject of its ack. The consumer's acks are the caller's.
func Fetch(ctx context.Context, js jetstream.JetStream, stream, consumer string, batch int, maxWait time.Duration, handle func(*nats.Msg)) error {
	what := fmt.Sprintf("streams: fetch %d of %s on %s", batch, consumer, stream)
	if batch < 1 || maxWait <= 0 {
		return fmt.Errorf("%s within %s: want a batch of at least 1 and a wait above 0", what, maxWait)
	}
	nc := js.Conn()
	body, err := json.Marshal(struct {
		Batch   int           `json:"batch"`
		Expires time.Duration `json:"expires"`
		NoWait  bool          `json:"no_wait"`
	}{batch, maxWait, true})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	inbox := nc.NewInbox()
	// Room for the whole batch and the status after it: a delivery the
	// channel has no room for is dropped by the client.
	msgs := make(chan *nats.Msg, batch+4)
	sub, err := nc.ChanSubscribe(inbox, msgs)
	if err != nil {
		return fmt.Errorf("%s: subscribe %s: %w", what, inbox, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	ctx, cancel := context.WithTimeout(ctx, maxWait+js.Options().DefaultTimeout)
	defer cancel()
	subj := apiPrefix(js.Options()) + "CONSUMER.MSG.NEXT." + stream + "." + consumer
	if err := nc.PublishRequest(subj, inbox, body); err != nil {
		return fmt.Errorf("%s: request: %w", what, err)
	}
	for got := 0; got < batch; {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s (%d handed on): %w", what, got, ctx.Err())
		case m := <-msgs:
			if strings.HasPrefix(m.Reply, ackPrefix) {
				handle(m)
				got++
				continue
			}
			switch st := m.Header.Get("Status"); st {
			case "100":
				// A heartbeat: the request is still open.
			case "404", "408":
				// Nothing (more) to deliver.
				return nil
			case "503":
				return fmt.Errorf("%s (%d handed on): %w", what, got, nats.ErrNoResponders)
			default:
				return fmt.Errorf("%s (%d handed on): status %s %s", what, got, st, m.Header.Get("Description"))
			}
		}
	}
	return nil
}
