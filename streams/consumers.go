package streams

import (
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
	return "worker_" + t, nil
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
