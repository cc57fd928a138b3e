package dedupe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/streams"
)

// MaxRecordSize bounds the outcome a Record keeps, in bytes.
const MaxRecordSize = 16 << 10

// MsgID returns the Nats-Msg-Id of the publish of e to subject,
// events.SubjectMsgID. One event is published once per admitting agent
// and session, all into JL_IN, whose duplicate window is per stream: the
// id therefore names the pair, not the event alone, or the second agent's
// copy would be dropped as a duplicate of the first.
func MsgID(e event.Event, subject string) string {
	return events.SubjectMsgID(subject, e)
}

// Config configures a Store.
type Config struct {
	// Names are the deployment's names.
	Names streams.Names
	// TTL is how long an event is remembered. Default
	// streams.DefaultDedupeTTL (72 hours); at most the bucket's own TTL.
	TTL time.Duration
}

func (c *Config) setDefaults() {
	if c.TTL == 0 {
		c.TTL = streams.DefaultDedupeTTL
	}
}

// Validate reports a config that cannot work.
func (c Config) Validate() error {
	if c.TTL < 0 {
		return fmt.Errorf("dedupe: TTL %s is negative", c.TTL)
	}
	return nil
}

// Store is the long-horizon dedupe record in the jl_dedupe bucket.
type Store struct {
	kv    jetstream.KeyValue
	names streams.Names
	ttl   time.Duration
}

// New binds to the deployment's jl_dedupe bucket, which streams.Provision
// creates.
func New(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, cfg.Names.BucketDedupe())
	if err != nil {
		return nil, fmt.Errorf("dedupe: open bucket %s: %w", cfg.Names.BucketDedupe(), err)
	}
	return &Store{kv: kv, names: cfg.Names, ttl: cfg.TTL}, nil
}

// Entry is what the store remembers of a handled event.
type Entry struct {
	// At is when it was recorded.
	At time.Time `json:"at"`
	// Outcome is what the first handling answered (JSON), so a duplicate
	// can repeat it; it may be empty.
	Outcome json.RawMessage `json:"outcome,omitempty"`
}

// Seen returns the entry of the event with source and id, and whether
// there is one.
func (s *Store) Seen(ctx context.Context, source, id string) (Entry, bool, error) {
	key := s.names.DedupeKey(source, id)
	e, err := s.kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return Entry{}, false, nil
	case err != nil:
		return Entry{}, false, fmt.Errorf("dedupe: look up %s (source %q, id %q): %w", key, source, id, err)
	}
	var ent Entry
	if err := json.Unmarshal(e.Value(), &ent); err != nil {
		// An unreadable entry still means the event was handled.
		return Entry{At: e.Created()}, true, nil
	}
	return ent, true, nil
}

// Record marks the event with source and id handled, for the store's TTL.
// It must be called only once everything the event caused is durable: a
// crash before Record leads to a redelivery being handled again (and the
// stream's Nats-Msg-Id window dropping the repeated publishes inside the
// window), never to an event marked handled that was not. Recording an
// event already recorded (a concurrent delivery of the same event won the
// race) is not an error. An outcome over MaxRecordSize is not kept.
func (s *Store) Record(ctx context.Context, source, id string, outcome []byte) error {
	key := s.names.DedupeKey(source, id)
	ent := Entry{At: time.Now().UTC()}
	if len(outcome) <= MaxRecordSize && json.Valid(outcome) {
		ent.Outcome = outcome
	}
	val, err := json.Marshal(ent)
	if err != nil {
		return fmt.Errorf("dedupe: record %s: %w", key, err)
	}
	_, err = s.kv.Create(ctx, key, val, jetstream.KeyTTL(s.ttl))
	if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("dedupe: record %s (source %q, id %q): %w", key, source, id, err)
	}
	return nil
}
