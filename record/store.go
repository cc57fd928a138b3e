package record

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetloop/jetloop/streams"
)

// Limits of what one settlement writes.
const (
	// MaxBatch is the server's limit on messages in one atomic batch.
	MaxBatch = 1000
	// MaxEntryBytes bounds one stored transcript entry; longer texts are
	// cut (tools put large results in jl_blobs before that).
	MaxEntryBytes = 256 << 10
	// MaxToolCalls bounds the tool calls of one model response, so its
	// settlement stays a bounded burst of creates.
	MaxToolCalls = 256
)

// Header names of JetStream's atomic batch publish (nats-server 2.12+).
const (
	hdrBatchID     = "Nats-Batch-Id"
	hdrBatchSeq    = "Nats-Batch-Sequence"
	hdrBatchCommit = "Nats-Batch-Commit"
)

// JetStream error codes the store branches on.
const (
	errCodeWrongLastSeq         = 10071
	errCodeWrongLastSeqConstant = 10164 // replicated streams report CAS conflicts so
	// errCodeAtomicIncomplete: the server dropped the batch before its
	// commit: a message lost on a reconnect, or the first message refused
	// while too many batches were in flight (a message that is not a
	// request is refused silently, so the commit learns it this way).
	errCodeAtomicIncomplete    = 10176
	errCodeAtomicTooManyFlight = 10210
)

// Retries of a state write.
const (
	// writeAttemptTimeout bounds one attempt of a write.
	writeAttemptTimeout = 5 * time.Second
	// writeRetryFirst and writeRetryMax bound the pause between attempts.
	writeRetryFirst = 20 * time.Millisecond
	writeRetryMax   = time.Second
)

// Store reads and writes sessions in jl_sessions: the state under
// <agent>.<session>.state, the transcript entries under
// <agent>.<session>.log.<id>.
type Store struct {
	js     jetstream.JetStream
	nc     *nats.Conn
	names  streams.Names
	kv     jetstream.KeyValue
	bucket string
	// publish publishes one atomic batch (publishBatch; tests replace it
	// to lose an answer).
	publish func(ctx context.Context, msgs []*nats.Msg) (uint64, error)
	// send makes one create of an entry (publish; tests replace it to
	// lose an answer).
	send func(ctx context.Context, m *nats.Msg) error
	// acks hears the answers of creates sent together.
	acks acks
	// Retried, if set, hears every write attempt that failed for a
	// passing reason and is made again, and every entry id found taken by
	// an entry no state names (why "entry_replaced"). Set it before the
	// first write.
	Retried func(ref streams.SessionRef, why string, err error)
	// Between, if set, is called by Settle after the first created of the
	// entries are durable and before the others are sent (created 1, when
	// there are several), and after all of them, before the state write
	// (created == len(entries)). It is a seam for crash tests, which stop
	// a process there; with it, the first entry is created alone.
	Between func(ctx context.Context, ref streams.SessionRef, entries []Entry, created int)
}

// Open opens the sessions bucket of names.
func Open(ctx context.Context, js jetstream.JetStream, names streams.Names) (*Store, error) {
	kv, err := js.KeyValue(ctx, names.BucketSessions())
	if err != nil {
		return nil, fmt.Errorf("record: open bucket %s: %w", names.BucketSessions(), err)
	}
	s := &Store{js: js, nc: js.Conn(), names: names, kv: kv, bucket: names.BucketSessions()}
	s.publish = s.publishBatch
	s.send = func(ctx context.Context, m *nats.Msg) error {
		_, err := publish(ctx, s.nc, m)
		return err
	}
	return s, nil
}

// Load returns a session's state and its revision, ErrNotFound when the
// session has none.
func (s *Store) Load(ctx context.Context, ref streams.SessionRef) (State, uint64, error) {
	e, err := s.kv.Get(ctx, s.names.StateKey(ref))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return State{}, 0, fmt.Errorf("record: session %s: %w", ref, ErrNotFound)
	}
	if err != nil {
		return State{}, 0, fmt.Errorf("record: read state of %s: %w", ref, err)
	}
	st, err := DecodeState(e.Value())
	if err != nil {
		return State{}, 0, fmt.Errorf("record: decode state of %s (revision %d): %w", ref, e.Revision(), err)
	}
	return st, e.Revision(), nil
}

// Create writes the first state of a session; ErrFenced when one exists.
func (s *Store) Create(ctx context.Context, ref streams.SessionRef, st State) (uint64, error) {
	b, err := encodeStateJSON(&st)
	if err != nil {
		return 0, fmt.Errorf("record: encode state of %s: %w", ref, err)
	}
	rev, err := s.kv.Create(ctx, s.names.StateKey(ref), b)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("record: create state of %s: %w", ref, ErrFenced)
	}
	if err != nil {
		return 0, fmt.Errorf("record: create state of %s: %w", ref, err)
	}
	return rev, nil
}

// encodeState returns the stored form of st.
func encodeState(ref streams.SessionRef, st *State) ([]byte, error) {
	b, err := encodeStateJSON(st)
	if err != nil {
		return nil, fmt.Errorf("record: encode state of %s: %w", ref, err)
	}
	if len(b) > MaxEntryBytes*3 {
		return nil, fmt.Errorf("record: state of %s is %d bytes: too large", ref, len(b))
	}
	return b, nil
}

// Update writes st if the state is still at revision rev.
func (s *Store) Update(ctx context.Context, ref streams.SessionRef, st State, rev uint64) (uint64, error) {
	b, err := encodeState(ref, &st)
	if err != nil {
		return 0, err
	}
	return s.updateEncoded(ctx, ref, b, rev)
}

// updateEncoded writes the encoded state b if the state is still at
// revision rev: the compare-and-set KeyValue.Update makes, published
// directly (the key is the store's own, valid by construction).
func (s *Store) updateEncoded(ctx context.Context, ref streams.SessionRef, b []byte, rev uint64) (uint64, error) {
	subject := streams.KVSubject(s.bucket, s.names.StateKey(ref))
	last := strconv.FormatUint(rev, 10)
	return s.write(ctx, ref, b, rev, func(actx context.Context) (uint64, error) {
		m := &nats.Msg{Subject: subject, Header: nats.Header{}, Data: b}
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, last)
		return publish(actx, s.nc, m)
	})
}

// write makes a conditional write of the state (b over revision rev,
// with whatever attempt publishes beside it) until it lands, is fenced,
// or ctx ends: the session's step context, which ends when the lease is
// lost. A write that failed for a passing reason (the server dropped the
// batch, too many batches in flight, a leader change, a lost answer) is
// made again, so the effect a settlement records is never thrown away
// for it. After an attempt whose outcome is unknown (no answer), the
// state is read back: if it holds b, that attempt landed.
func (s *Store) write(ctx context.Context, ref streams.SessionRef, b []byte, rev uint64, attempt func(context.Context) (uint64, error)) (uint64, error) {
	uncertain := false
	delay := writeRetryFirst
	for n := 1; ; n++ {
		actx, cancel := context.WithTimeout(ctx, writeAttemptTimeout)
		nrev, err := attempt(actx)
		cancel()
		if err == nil {
			return nrev, nil
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("record: write state of %s at revision %d: %w (last attempt: %v)", ref, rev, context.Cause(ctx), err)
		}
		why, retry, unknown := classifyWrite(err)
		if why == "fenced" || unknown {
			uncertain = uncertain || unknown
			if uncertain {
				// An earlier attempt may have landed: the state says.
				lrev, landed, lerr := s.landed(ctx, ref, b, rev)
				switch {
				case lerr != nil:
					err = lerr
				case landed:
					return lrev, nil
				case lrev != rev:
					return 0, fmt.Errorf("record: write state of %s at revision %d: %w", ref, rev, ErrFenced)
				}
			} else {
				return 0, fmt.Errorf("record: write state of %s at revision %d: %w", ref, rev, ErrFenced)
			}
		}
		if !retry && why != "fenced" {
			return 0, fmt.Errorf("record: write state of %s at revision %d: %w", ref, rev, err)
		}
		if s.Retried != nil {
			s.Retried(ref, why, err)
		}
		if err := sleep(ctx, jitter(delay)); err != nil {
			return 0, fmt.Errorf("record: write state of %s at revision %d: %w (after %d attempts, last: %v)", ref, rev, context.Cause(ctx), n, err)
		}
		delay = min(2*delay, writeRetryMax)
	}
}

// landed reads the state back after an attempt whose outcome is unknown:
// it reports whether the state holds b (and its revision), or the
// revision it is at.
func (s *Store) landed(ctx context.Context, ref streams.SessionRef, b []byte, rev uint64) (uint64, bool, error) {
	gctx, cancel := context.WithTimeout(ctx, writeAttemptTimeout)
	defer cancel()
	e, err := s.kv.Get(gctx, s.names.StateKey(ref))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return rev, false, fmt.Errorf("read back state of %s: %w", ref, err)
	}
	if bytes.Equal(e.Value(), b) {
		return e.Revision(), true, nil
	}
	return e.Revision(), false, nil
}

// classifyWrite says why a write attempt failed: fenced (the revision
// moved on), a passing reason to try again (retry), and whether the
// attempt may nevertheless have landed (unknown: no answer came).
func classifyWrite(err error) (why string, retry, unknown bool) {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch) || isWrongLastSeq(err):
		return "fenced", false, false
	case errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeAtomicIncomplete:
		return "batch_incomplete", true, false
	case errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeAtomicTooManyFlight:
		return "batches_in_flight", true, false
	case errors.As(err, &apiErr) && apiErr.Code == 503:
		return "unavailable", true, false
	case errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse):
		return "no_responders", true, false
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return "timeout", true, true
	case errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected):
		return "reconnecting", true, true
	}
	return "", false, false
}

// jitter spreads d by up to a quarter either way.
func jitter(d time.Duration) time.Duration {
	q := int64(d) / 4
	if q <= 0 {
		return d
	}
	return d - time.Duration(q) + time.Duration(rand.Int64N(2*q+1))
}

// WriteEntries writes transcript entries without a state, in atomic
// batches of at most MaxBatch: they are part of no transcript until a
// state whose NextEntry covers them is written (a fork's new session).
func (s *Store) WriteEntries(ctx context.Context, ref streams.SessionRef, entries []Entry) error {
	maxPayload := int(s.nc.MaxPayload())
	for len(entries) > 0 {
		chunk := entries[:min(len(entries), MaxBatch)]
		entries = entries[len(chunk):]
		msgs := make([]*nats.Msg, 0, len(chunk))
		for _, e := range chunk {
			b, err := marshal(e)
			if err != nil {
				return fmt.Errorf("record: encode entry %d of %s: %w", e.ID, ref, err)
			}
			if len(b) > maxPayload-1024 {
				return fmt.Errorf("record: entry %d of %s is %d bytes, over the server's max payload %d", e.ID, ref, len(b), maxPayload)
			}
			msgs = append(msgs, &nats.Msg{Subject: streams.KVSubject(s.bucket, s.names.LogKey(ref, e.ID)), Header: nats.Header{}, Data: b})
		}
		// Entries without a state may be written twice: every passing
		// failure is simply tried again.
		delay := writeRetryFirst
		for {
			actx, cancel := context.WithTimeout(ctx, writeAttemptTimeout)
			_, err := s.publish(actx, msgs)
			cancel()
			if err == nil {
				break
			}
			if _, retry, _ := classifyWrite(err); !retry || ctx.Err() != nil {
				return fmt.Errorf("record: write %d entries of %s: %w", len(msgs), ref, err)
			}
			if err := sleep(ctx, jitter(delay)); err != nil {
				return fmt.Errorf("record: write %d entries of %s: %w", len(msgs), ref, err)
			}
			delay = min(2*delay, writeRetryMax)
		}
	}
	return nil
}

// batchAck is the server's answer to the commit of an atomic batch.
type batchAck struct {
	Error *jetstream.APIError `json:"error,omitempty"`
	Seq   uint64              `json:"seq"`
	Batch string              `json:"batch"`
	Count uint64              `json:"count"`
}

// publishBatch publishes msgs as one atomic batch and returns the
// sequence of the last one. Only the commit is a request; the messages
// before it ride the same connection, so they reach the server first.
func (s *Store) publishBatch(ctx context.Context, msgs []*nats.Msg) (uint64, error) {
	id := nuid.Next()
	for i, m := range msgs {
		m.Header.Set(hdrBatchID, id)
		m.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
		if i < len(msgs)-1 {
			if err := s.nc.PublishMsg(m); err != nil {
				return 0, fmt.Errorf("publish batch message %d of %d: %w", i+1, len(msgs), err)
			}
		}
	}
	last := msgs[len(msgs)-1]
	last.Header.Set(hdrBatchCommit, "1")
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, writeAttemptTimeout)
		defer cancel()
	}
	resp, err := s.nc.RequestMsgWithContext(ctx, last)
	if err != nil {
		return 0, fmt.Errorf("commit batch of %d: %w", len(msgs), err)
	}
	var ack batchAck
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return 0, fmt.Errorf("commit batch of %d: bad answer %q: %w", len(msgs), resp.Data, err)
	}
	if ack.Error != nil {
		return 0, ack.Error
	}
	if ack.Batch != id || ack.Count != uint64(len(msgs)) {
		return 0, fmt.Errorf("commit batch of %d: answer names batch %q of %d", len(msgs), ack.Batch, ack.Count)
	}
	return ack.Seq, nil
}

// IsConflict reports whether err is a conditional write's conflict: the
// key was not at the expected revision (or, for a create, existed).
func IsConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSeq(err)
}

func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == errCodeWrongLastSeq || apiErr.ErrorCode == errCodeWrongLastSeqConstant)
}

// entriesCatchUp bounds how long a read of entries waits for a replica
// behind the state it reads for.
const entriesCatchUp = 10 * time.Second

// Entries reads a session's entries 1..next-1 in order, as the state at
// revision rev names them (ReadSpans over the whole transcript: rev 0
// reads what the replica answering holds). A replica behind the leader
// may hold an earlier version of an id (a leftover a settlement
// replaced): the read is made again until the replica answering holds
// the state at rev or later. A missing id is an error.
func (s *Store) Entries(ctx context.Context, ref streams.SessionRef, next, rev uint64) ([]Entry, error) {
	if next <= 1 {
		return nil, nil
	}
	return s.ReadSpans(ctx, ref, []Span{{From: 1, To: next - 1}}, rev)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
