package dedupe

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
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
	// w makes the lookup and the create as plain requests (wire.go);
	// nil where they go through kv.
	w *wire
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
	var w *wire
	if ownKV(kv) {
		if w, err = newWire(ctx, js, cfg.Names.BucketDedupe(), cfg.TTL); err != nil {
			return nil, err
		}
	}
	return &Store{kv: kv, names: cfg.Names, ttl: cfg.TTL, w: w}, nil
}

// get is s.kv.Get(ctx, key) of a key names built.
func (s *Store) get(ctx context.Context, key string) (entry, error) {
	if s.w != nil {
		e, _, err := s.w.get(ctx, key)
		return e, err
	}
	kve, err := s.kv.Get(ctx, key)
	if err != nil {
		return entry{}, err
	}
	return entry{value: kve.Value(), revision: kve.Revision(), created: kve.Created()}, nil
}

// create is s.kv.Create(ctx, key, value, jetstream.KeyTTL(s.ttl)) of a
// key names built.
func (s *Store) create(ctx context.Context, key string, value []byte) (uint64, error) {
	if s.w != nil {
		return s.w.create(ctx, key, value)
	}
	return s.kv.Create(ctx, key, value, jetstream.KeyTTL(s.ttl))
}

// ErrConflict means an id was recorded for another request: the same
// Idempotency-Key (or event id) with a different body. The rule payment
// APIs follow answers it 409, never as a duplicate of the first.
var ErrConflict = errors.New("dedupe: id already used for a different request")

// Entry is what the store remembers of a handled event.
type Entry struct {
	// At is when it was recorded.
	At time.Time `json:"at"`
	// Outcome is what the first handling answered (JSON), so a duplicate
	// can repeat it; it may be empty.
	Outcome json.RawMessage `json:"outcome,omitempty"`
	// Digest names the request the id was first used for (a hash of its
	// body), when the recorder gave one (WithDigest).
	Digest string `json:"digest,omitempty"`
}

// encode is json.Marshal(e) for an outcome that is valid JSON (the
// callers check it), written directly: Marshal would check the outcome
// again, and this is once per event.
func (e Entry) encode() ([]byte, error) {
	b := make([]byte, 0, 64+len(e.Outcome)+len(e.Digest))
	b = append(b, `{"at":"`...)
	// What Time.MarshalJSON writes, and refuses: a year outside 0 to
	// 9999, a zone offset of a day or more (which Unmarshal refuses to
	// read back).
	b, err := e.At.AppendText(b)
	if err != nil {
		return nil, fmt.Errorf("time %s: %w", e.At.String(), err)
	}
	b = append(b, '"')
	if len(e.Outcome) > 0 {
		b = append(b, `,"outcome":`...)
		b = append(b, e.Outcome...)
	}
	if e.Digest != "" {
		d, err := json.Marshal(e.Digest)
		if err != nil {
			return nil, err
		}
		b = append(b, `,"digest":`...)
		b = append(b, d...)
	}
	return append(b, '}'), nil
}

// RecordOption adjusts a Record or Claim.
type RecordOption func(*Entry)

// WithDigest records digest, a hash of the request the id is used for:
// a later Record or Claim of the same id with another digest fails with
// ErrConflict.
func WithDigest(digest string) RecordOption { return func(e *Entry) { e.Digest = digest } }

// Digest is a hex SHA-256 of parts, each length-prefixed, for WithDigest.
func Digest(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Key names the event with source and id in the store: its key, made
// once for a lookup and the record that follows it (SeenKey, RecordKey).
type Key struct {
	source, id, key string
}

// Key returns the Key of the event with source and id.
func (s *Store) Key(source, id string) Key {
	return Key{source: source, id: id, key: s.names.DedupeKey(source, id)}
}

// Seen returns the entry of the event with source and id, and whether
// there is one.
func (s *Store) Seen(ctx context.Context, source, id string) (Entry, bool, error) {
	return s.SeenKey(ctx, s.Key(source, id))
}

// SeenKey is Seen of the event k names.
func (s *Store) SeenKey(ctx context.Context, k Key) (Entry, bool, error) {
	key, source, id := k.key, k.source, k.id
	e, err := s.get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return Entry{}, false, nil
	case err != nil:
		return Entry{}, false, fmt.Errorf("dedupe: look up %s (source %q, id %q): %w", key, source, id, err)
	}
	var ent Entry
	if err := json.Unmarshal(e.value, &ent); err != nil {
		// An unreadable entry still means the event was handled.
		return Entry{At: e.created}, true, nil
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
//
// With WithDigest, an id recorded before for another digest is
// ErrConflict: two concurrent requests with one id and different bodies,
// of which only the first was stored.
func (s *Store) Record(ctx context.Context, source, id string, outcome []byte, opts ...RecordOption) error {
	return s.RecordKey(ctx, s.Key(source, id), outcome, opts...)
}

// RecordKey is Record of the event k names.
func (s *Store) RecordKey(ctx context.Context, k Key, outcome []byte, opts ...RecordOption) error {
	source, id := k.source, k.id
	prev, _, fresh, err := s.claim(ctx, k, outcome, opts...)
	if err != nil || fresh {
		return err
	}
	var want Entry
	for _, o := range opts {
		o(&want)
	}
	if want.Digest != "" && prev.Digest != want.Digest {
		return fmt.Errorf("%w: source %q, id %q", ErrConflict, source, id)
	}
	return nil
}

// Claim records the event with source and id, with outcome, for the
// store's TTL, unless it was recorded before: then it returns that entry,
// its revision and false, and writes nothing. Claiming before acting and
// amending the outcome after (Amend) makes concurrent requests with one
// id agree on which of them acts.
func (s *Store) Claim(ctx context.Context, source, id string, outcome []byte, opts ...RecordOption) (Entry, uint64, bool, error) {
	return s.claim(ctx, s.Key(source, id), outcome, opts...)
}

func (s *Store) claim(ctx context.Context, k Key, outcome []byte, opts ...RecordOption) (Entry, uint64, bool, error) {
	key, source, id := k.key, k.source, k.id
	ent := Entry{At: time.Now().UTC()}
	for _, o := range opts {
		o(&ent)
	}
	if len(outcome) <= MaxRecordSize && json.Valid(outcome) {
		ent.Outcome = outcome
	}
	val, err := ent.encode()
	if err != nil {
		return Entry{}, 0, false, fmt.Errorf("dedupe: record %s: %w", key, err)
	}
	for attempt := 1; ; attempt++ {
		rev, err := s.create(ctx, key, val)
		if err == nil {
			return ent, rev, true, nil
		}
		if !lostCreate(err) {
			return Entry{}, 0, false, fmt.Errorf("dedupe: record %s (source %q, id %q): %w", key, source, id, err)
		}
		kve, err := s.get(ctx, key)
		if err == nil {
			var prev Entry
			if err := json.Unmarshal(kve.value, &prev); err != nil {
				prev = Entry{At: kve.created}
			}
			return prev, kve.revision, false, nil
		}
		// The write that won is not stored yet (a replicated stream
		// refuses a write to a key another write is being proposed for),
		// a replica behind the leader answered, or the key was deleted
		// since: create again.
		if !errors.Is(err, jetstream.ErrKeyNotFound) || attempt == claimAttempts {
			return Entry{}, 0, false, fmt.Errorf("dedupe: read %s (source %q, id %q) after another write won its create (attempt %d): %w", key, source, id, attempt, err)
		}
		select {
		case <-ctx.Done():
			return Entry{}, 0, false, fmt.Errorf("dedupe: record %s (source %q, id %q): %w", key, source, id, ctx.Err())
		case <-time.After(min(time.Duration(attempt)*claimRetryWait, 10*claimRetryWait)):
		}
	}
}

// claimAttempts bounds a Claim's creates of a key that another write
// takes at the same time, claimRetryWait times the attempt apart (at
// most ten times it): about two seconds for the winner to be stored and
// readable.
const (
	claimAttempts  = 15
	claimRetryWait = 20 * time.Millisecond
)

// lostCreate reports whether a create failed because the key had (or
// was being given) another message: ErrKeyExists, or a wrong last
// sequence, which a replicated stream answers with 10164 rather than
// 10071 and which the KV API's Create (and the wire form, which answers
// as it does) returns unwrapped when its create of a deleted key loses.
func lostCreate(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Amend replaces the outcome of the entry of source and id, which must
// still be at revision rev (a Claim's), keeping its digest.
func (s *Store) Amend(ctx context.Context, source, id string, rev uint64, ent Entry) error {
	key := s.names.DedupeKey(source, id)
	if len(ent.Outcome) > MaxRecordSize || !json.Valid(ent.Outcome) {
		ent.Outcome = nil
	}
	val, err := ent.encode()
	if err != nil {
		return fmt.Errorf("dedupe: amend %s: %w", key, err)
	}
	if _, err := s.kv.Update(ctx, key, val, rev); err != nil {
		return fmt.Errorf("dedupe: amend %s (source %q, id %q): %w", key, source, id, err)
	}
	return nil
}
