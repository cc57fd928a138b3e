package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
	// settlement fits one batch.
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
	errCodeAtomicTooManyFlight  = 10210
)

// store reads and writes sessions in jl_sessions.
type store struct {
	js     jetstream.JetStream
	nc     *nats.Conn
	names  streams.Names
	kv     jetstream.KeyValue
	bucket string
}

func newStore(ctx context.Context, js jetstream.JetStream, names streams.Names) (*store, error) {
	kv, err := js.KeyValue(ctx, names.BucketSessions())
	if err != nil {
		return nil, fmt.Errorf("worker: open bucket %s: %w", names.BucketSessions(), err)
	}
	return &store{js: js, nc: js.Conn(), names: names, kv: kv, bucket: names.BucketSessions()}, nil
}

// load returns a session's state and its revision, ErrNotFound when the
// session has none.
func (s *store) load(ctx context.Context, ref streams.SessionRef) (State, uint64, error) {
	e, err := s.kv.Get(ctx, s.names.StateKey(ref))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return State{}, 0, fmt.Errorf("worker: session %s: %w", ref, ErrNotFound)
	}
	if err != nil {
		return State{}, 0, fmt.Errorf("worker: read state of %s: %w", ref, err)
	}
	var st State
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return State{}, 0, fmt.Errorf("worker: decode state of %s (revision %d): %w", ref, e.Revision(), err)
	}
	return st, e.Revision(), nil
}

// create writes the first state of a session; ErrFenced when one exists.
func (s *store) create(ctx context.Context, ref streams.SessionRef, st State) (uint64, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return 0, fmt.Errorf("worker: encode state of %s: %w", ref, err)
	}
	rev, err := s.kv.Create(ctx, s.names.StateKey(ref), b)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("worker: create state of %s: %w", ref, ErrFenced)
	}
	if err != nil {
		return 0, fmt.Errorf("worker: create state of %s: %w", ref, err)
	}
	return rev, nil
}

// update writes st if the state is still at revision rev.
func (s *store) update(ctx context.Context, ref streams.SessionRef, st State, rev uint64) (uint64, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return 0, fmt.Errorf("worker: encode state of %s: %w", ref, err)
	}
	if len(b) > MaxEntryBytes*3 {
		return 0, fmt.Errorf("worker: state of %s is %d bytes: too large", ref, len(b))
	}
	nrev, err := s.kv.Update(ctx, s.names.StateKey(ref), b, rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || isWrongLastSeq(err) {
		return 0, fmt.Errorf("worker: write state of %s at revision %d: %w", ref, rev, ErrFenced)
	}
	if err != nil {
		return 0, fmt.Errorf("worker: write state of %s at revision %d: %w", ref, rev, err)
	}
	return nrev, nil
}

// settle writes entries and the next state as one atomic batch,
// conditional on the state being at revision rev: all of it lands or none.
// Without entries it is a plain compare-and-set.
func (s *store) settle(ctx context.Context, ref streams.SessionRef, entries []Entry, st State, rev uint64) (uint64, error) {
	if len(entries) == 0 {
		return s.update(ctx, ref, st, rev)
	}
	if len(entries)+1 > MaxBatch {
		return 0, fmt.Errorf("worker: settlement of %s has %d entries, max %d", ref, len(entries), MaxBatch-1)
	}
	msgs := make([]*nats.Msg, 0, len(entries)+1)
	maxPayload := int(s.nc.MaxPayload())
	for _, e := range entries {
		b, err := marshal(e)
		if err != nil {
			return 0, fmt.Errorf("worker: encode entry %d of %s: %w", e.ID, ref, err)
		}
		if len(b) > maxPayload-1024 {
			return 0, fmt.Errorf("worker: entry %d of %s is %d bytes, over the server's max payload %d", e.ID, ref, len(b), maxPayload)
		}
		msgs = append(msgs, &nats.Msg{Subject: streams.KVSubject(s.bucket, s.names.LogKey(ref, e.ID)), Header: nats.Header{}, Data: b})
	}
	b, err := json.Marshal(st)
	if err != nil {
		return 0, fmt.Errorf("worker: encode state of %s: %w", ref, err)
	}
	m := &nats.Msg{Subject: streams.KVSubject(s.bucket, s.names.StateKey(ref)), Header: nats.Header{}, Data: b}
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	msgs = append(msgs, m)

	var lastErr error
	for attempt := range 5 {
		nrev, err := s.publishBatch(ctx, msgs)
		if err == nil {
			return nrev, nil
		}
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != errCodeAtomicTooManyFlight {
			if isWrongLastSeq(err) {
				return 0, fmt.Errorf("worker: settle %s at revision %d: %w", ref, rev, ErrFenced)
			}
			return 0, fmt.Errorf("worker: settle %s at revision %d: %w", ref, rev, err)
		}
		lastErr = err
		t := time.NewTimer(time.Duration(attempt+1) * 20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		case <-t.C:
		}
	}
	return 0, fmt.Errorf("worker: settle %s: %w", ref, lastErr)
}

// writeEntries writes transcript entries without a state, in atomic
// batches of at most MaxBatch: they are part of no transcript until a
// state whose NextEntry covers them is written (a fork's new session).
func (s *store) writeEntries(ctx context.Context, ref streams.SessionRef, entries []Entry) error {
	maxPayload := int(s.nc.MaxPayload())
	for len(entries) > 0 {
		chunk := entries[:min(len(entries), MaxBatch)]
		entries = entries[len(chunk):]
		msgs := make([]*nats.Msg, 0, len(chunk))
		for _, e := range chunk {
			b, err := marshal(e)
			if err != nil {
				return fmt.Errorf("worker: encode entry %d of %s: %w", e.ID, ref, err)
			}
			if len(b) > maxPayload-1024 {
				return fmt.Errorf("worker: entry %d of %s is %d bytes, over the server's max payload %d", e.ID, ref, len(b), maxPayload)
			}
			msgs = append(msgs, &nats.Msg{Subject: streams.KVSubject(s.bucket, s.names.LogKey(ref, e.ID)), Header: nats.Header{}, Data: b})
		}
		if _, err := s.publishBatch(ctx, msgs); err != nil {
			return fmt.Errorf("worker: write %d entries of %s: %w", len(msgs), ref, err)
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
func (s *store) publishBatch(ctx context.Context, msgs []*nats.Msg) (uint64, error) {
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
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
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

func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == errCodeWrongLastSeq || apiErr.ErrorCode == errCodeWrongLastSeqConstant)
}

// transcript reads a session's entries 1..upto-1 in order. Missing ids
// (never, unless the bucket was tampered with) are an error.
func (s *store) transcript(ctx context.Context, ref streams.SessionRef, next uint64) ([]Entry, error) {
	if next <= 1 {
		return nil, nil
	}
	w, err := s.kv.Watch(ctx, s.names.LogKeys(ref), jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("worker: read transcript of %s: %w", ref, err)
	}
	defer w.Stop()
	out := make([]Entry, 0, next-1)
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case kve, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("worker: read transcript of %s: watcher closed", ref)
			}
			if kve == nil {
				slices.SortFunc(out, func(a, b Entry) int { return cmpU64(a.ID, b.ID) })
				// Entries past next belong to no settlement of this state
				// (there are none, but a reader must not trust them).
				out = slices.DeleteFunc(out, func(e Entry) bool { return e.ID >= next })
				if uint64(len(out)) != next-1 {
					return nil, fmt.Errorf("worker: transcript of %s has %d of %d entries", ref, len(out), next-1)
				}
				return out, nil
			}
			var e Entry
			if err := json.Unmarshal(kve.Value(), &e); err != nil {
				return nil, fmt.Errorf("worker: decode %s: %w", kve.Key(), err)
			}
			out = append(out, e)
		}
	}
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
