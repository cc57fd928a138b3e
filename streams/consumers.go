package streams

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of the worker's consumers.
const (
	// DefaultInAckWait is how long JL_IN waits for a worker's ack or
	// progress signal before redelivering; workers signal progress well
	// within it while a turn runs.
	DefaultInAckWait = 30 * time.Second
	// DefaultInMaxAckPending bounds the unacknowledged events of one
	// agent across every worker.
	DefaultInMaxAckPending = 1000
)

// InConsumerName is the durable name of the pull consumer through which
// every worker reads one agent's events: worker_<agent>.
func (n Names) InConsumerName(agent string) (string, error) {
	t, err := agentToken(agent)
	if err != nil {
		return "", err
	}
	return consumerName("worker_", t), nil
}

// maxConsumerName is the server's limit on a durable name.
const maxConsumerName = 255

// consumerName is prefix+token, or prefix and a hash of the token where
// that would exceed the server's limit on names.
func consumerName(prefix, token string) string {
	if len(prefix)+len(token) <= maxConsumerName {
		return prefix + token
	}
	h := sha256.Sum256([]byte(token))
	return prefix + token[:64] + "_" + hex.EncodeToString(h[:16])
}

// InConsumer declares the durable pull consumer on JL_IN that every worker
// shares for one agent: filter jl.in.<agent>.>, explicit acks, unlimited
// redeliveries (a worker acknowledges an event only once a session's state
// records it consumed; a crash must lead to redelivery, never to loss).
func InConsumer(n Names, agent string) (jetstream.ConsumerConfig, error) {
	name, err := n.InConsumerName(agent)
	if err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	filter, err := n.InAgent(agent)
	if err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	return jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "jetloop: events of agent " + agent + " for the workers",
		FilterSubject: filter,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       DefaultInAckWait,
		MaxDeliver:    -1,
		MaxAckPending: DefaultInMaxAckPending,
	}, nil
}

// DefaultCtlMaxAckPending bounds the unacknowledged control messages of
// one agent across every worker.
const DefaultCtlMaxAckPending = 1000

// CtlConsumerName is the durable name of the pull consumer through which
// every worker reads one agent's control messages: worker_<agent>, the
// same name as the agent's consumer on JL_IN (names are per stream).
func (n Names) CtlConsumerName(agent string) (string, error) {
	return n.InConsumerName(agent)
}

// CtlConsumer declares the durable pull consumer on JL_CTL that every
// worker shares for one agent: filter jl.ctl.<agent>.>, explicit acks,
// unlimited redeliveries. A worker acknowledges a control message once the
// session's state records it applied (its sequence at or below the state's
// control sequence), so a message published while no worker runs, or
// while the session's owner crashes, is applied when a worker gets to it.
func CtlConsumer(n Names, agent string) (jetstream.ConsumerConfig, error) {
	name, err := n.CtlConsumerName(agent)
	if err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	filter, err := n.CtlAgent(agent)
	if err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	return jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "jetloop: control messages of agent " + agent + " for the workers",
		FilterSubject: filter,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       DefaultInAckWait,
		MaxDeliver:    -1,
		MaxAckPending: DefaultCtlMaxAckPending,
	}, nil
}

// DropConsumer deletes the server's consumer behind cons, an ordered
// consumer of stream that has served its read. The server keeps an idle
// ordered consumer for minutes and allows a stream only so many (1000 by
// default), so a reader that leaves its own behind makes frequent reads
// fill the stream until every read fails. A failed delete is left to the
// server, which drops an idle consumer by itself after its inactive
// threshold; ctx's cancellation does not stop the delete.
func DropConsumer(ctx context.Context, js jetstream.JetStream, stream string, cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = js.DeleteConsumer(ctx, stream, info.Name)
}
