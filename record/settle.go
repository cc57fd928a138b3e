package record

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/streams"
)

// maxReplace bounds the rounds of replacing one taken entry id.
const maxReplace = 8

// Settle writes a settlement: each of entries created under its id with
// a create-only write, then st compare-and-set over revision rev. Without
// entries it is the compare-and-set alone.
//
// The creates come first: an entry is part of no transcript until a state
// whose NextEntry is past it is written, so a crash between them leaves
// entries that belong to nothing, and a reader never sees a state naming
// an entry that is not there. They are sent together and their answers
// awaited together (one round trip, however many), then the state is
// written (the second). A second writer of an id loses: an id found
// taken by the same bytes is this writer's own earlier attempt; taken by
// other bytes while the state is still at rev, it is left over from a
// writer that crashed or was fenced before its state write (no state
// names it: the state is at rev and rev reserved the id), and it is
// replaced by a write the server stores only while the state is still at
// rev; taken while the state has moved on, this writer is fenced
// (ErrFenced), and nothing it writes is part of any transcript.
//
// The state is encoded while the answers of several creates are awaited
// (beside a single create, encoded before it: a goroutine of its own
// costs more than the encoding).
func (s *Store) Settle(ctx context.Context, ref streams.SessionRef, entries []Entry, st State, rev uint64) (uint64, error) {
	if len(entries) == 0 {
		return s.Update(ctx, ref, st, rev)
	}
	var b []byte
	var encErr error
	encoded := false
	encode := func() {
		if !encoded {
			b, encErr = encodeState(ref, &st)
			encoded = true
		}
	}
	if err := s.createEntries(ctx, ref, entries, rev, encode); err != nil {
		return 0, err
	}
	if encode(); encErr != nil {
		return 0, encErr
	}
	if s.Between != nil {
		s.Between(ctx, ref, entries, len(entries))
	}
	return s.updateEncoded(ctx, ref, b, rev)
}

// encodeEntry returns the stored form of e, bounded by the server's
// payload limit.
func (s *Store) encodeEntry(ref streams.SessionRef, e Entry) ([]byte, error) {
	// Entry's own encoder, not marshal(e): through an Encoder its output
	// would be validated and compacted a second time.
	b, err := e.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("record: encode entry %d of %s: %w", e.ID, ref, err)
	}
	if maxPayload := int(s.nc.MaxPayload()); len(b) > maxPayload-1024 {
		return nil, fmt.Errorf("record: entry %d of %s is %d bytes, over the server's max payload %d", e.ID, ref, len(b), maxPayload)
	}
	return b, nil
}

// createHeader makes a publish create-only. Shared by every create:
// nothing writes it after this (the publishes take no options that would
// add to it).
var createHeader = nats.Header{jetstream.ExpectedLastSubjSeqHeader: []string{"0"}}

// createMsg is the create-only write of an entry: it lands only on a
// subject without messages.
func (s *Store) createMsg(ref streams.SessionRef, id uint64, b []byte) *nats.Msg {
	return &nats.Msg{Subject: streams.KVSubject(s.bucket, s.names.LogKey(ref, id)), Header: createHeader, Data: b}
}

// createEntries creates entries, create-only, for a state at rev, calling
// meanwhile, if set, once while answers are awaited (or before a single
// create).
func (s *Store) createEntries(ctx context.Context, ref streams.SessionRef, entries []Entry, rev uint64, meanwhile func()) error {
	if meanwhile == nil {
		meanwhile = func() {}
	}
	if len(entries) > MaxToolCalls+8 {
		return fmt.Errorf("record: settlement of %s has %d entries, max %d", ref, len(entries), MaxToolCalls+8)
	}
	bodies := make([][]byte, len(entries))
	for i, e := range entries {
		b, err := s.encodeEntry(ref, e)
		if err != nil {
			return err
		}
		bodies[i] = b
	}
	first := 0
	if s.Between != nil && len(entries) > 1 {
		if err := s.createOne(ctx, ref, entries[0].ID, bodies[0], rev); err != nil {
			return err
		}
		s.Between(ctx, ref, entries, 1)
		first = 1
	}
	if len(entries)-first == 1 {
		meanwhile()
		return s.createOne(ctx, ref, entries[first].ID, bodies[first], rev)
	}
	// Send them all, then hear every answer: one round trip.
	type sent struct {
		token string
		ch    chan ackResult
	}
	futs := make([]sent, len(entries))
	if err := s.acks.start(s.nc); err == nil {
		for i := first; i < len(entries); i++ {
			token, ch, err := s.acks.send(s.nc, s.createMsg(ref, entries[i].ID, bodies[i]))
			if err != nil {
				// Not sent: made alone below.
				continue
			}
			futs[i] = sent{token, ch}
		}
	}
	meanwhile()
	// One bound for every answer: they come together.
	actx, cancel := context.WithTimeout(ctx, writeAttemptTimeout)
	defer cancel()
	for i := first; i < len(entries); i++ {
		err := errors.New("not sent")
		if f := futs[i]; f.ch != nil {
			select {
			case r := <-f.ch:
				err = r.err
			case <-actx.Done():
				s.acks.forget(f.token)
				err = actx.Err()
			}
		}
		if err == nil {
			continue
		}
		if IsConflict(err) {
			err = s.replace(ctx, ref, entries[i].ID, bodies[i], rev, conflictSeq(err))
		} else {
			err = s.createOne(ctx, ref, entries[i].ID, bodies[i], rev)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// createOne creates one entry until it lands, is found to be this
// writer's already, is replaced over a leftover, or the writer is fenced.
func (s *Store) createOne(ctx context.Context, ref streams.SessionRef, id uint64, b []byte, rev uint64) error {
	delay := writeRetryFirst
	for n := 1; ; n++ {
		actx, cancel := context.WithTimeout(ctx, writeAttemptTimeout)
		err := s.send(actx, s.createMsg(ref, id, b))
		cancel()
		switch {
		case err == nil:
			return nil
		case IsConflict(err):
			return s.replace(ctx, ref, id, b, rev, conflictSeq(err))
		case ctx.Err() != nil:
			return fmt.Errorf("record: create entry %d of %s: %w (last attempt: %v)", id, ref, context.Cause(ctx), err)
		}
		why, retry, _ := classifyWrite(err)
		if !retry {
			return fmt.Errorf("record: create entry %d of %s: %w", id, ref, err)
		}
		// An attempt without an answer may have landed: the next finds
		// the id taken by the same bytes.
		if s.Retried != nil {
			s.Retried(ref, why, err)
		}
		if err := sleep(ctx, jitter(delay)); err != nil {
			return fmt.Errorf("record: create entry %d of %s: %w (after %d attempts)", id, ref, err, n)
		}
		delay = min(2*delay, writeRetryMax)
	}
}

// replace settles an entry id found taken: by the same bytes it is this
// writer's; by others, it is replaced while the state is still at rev,
// and the writer is fenced once the state has moved on. taken is the
// sequence the server named as the id's last when it refused the create
// (0 if its answer did not say).
//
// The replacement is conditional on the state, not on the entry: it
// carries the state key as the subject of its expected last sequence, so
// the server stores it only while the state is at rev. Conditional on the
// entry's revision alone it would race a successor: read at rev, the state
// may move on before the write (a successor's claim, then its settlement
// adopting the very entry, which writes nothing), and the late write would
// then change an entry a state names.
//
// A read of the entry may be served by a replica behind the leader (a
// direct get is answered by any replica that is nearly current): it may
// show an earlier version of the id than the one that refused the create,
// one a writer at an older revision replaced while the state was still
// at its revision. Same bytes in such a read prove nothing (a successor
// adopting that earlier version would otherwise name in its state an
// entry that holds other bytes), so the id is taken for this writer's
// only when the read is at least as new as the version the server named;
// otherwise the conditional replacement, which the leader decides, is
// made, and it writes the same bytes where they are already there.
func (s *Store) replace(ctx context.Context, ref streams.SessionRef, id uint64, b []byte, rev, taken uint64) error {
	key := s.names.LogKey(ref, id)
	delay := writeRetryFirst
	for range maxReplace {
		gctx, cancel := context.WithTimeout(ctx, writeAttemptTimeout)
		e, err := s.kv.Get(gctx, key)
		cancel()
		other := false
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			// Deleted since (a tombstone), or a replica behind the write
			// that took it: written below like any replacement.
		case err != nil:
			return fmt.Errorf("record: read taken entry %d of %s: %w", id, ref, err)
		case bytes.Equal(e.Value(), b):
			if taken > 0 && e.Revision() >= taken {
				return nil
			}
		default:
			other = true
		}
		st, srev, err := s.Load(ctx, ref)
		if err != nil {
			return err
		}
		switch {
		case srev > rev || st.NextEntry > id:
			return fmt.Errorf("record: entry %d of %s is taken and the state moved on from revision %d to %d: %w", id, ref, rev, srev, ErrFenced)
		case srev == rev:
			if other && s.Retried != nil {
				s.Retried(ref, "entry_replaced", fmt.Errorf("entry %d taken by an entry no state names", id))
			}
			uctx, cancel := context.WithTimeout(ctx, writeAttemptTimeout)
			err = s.send(uctx, s.replaceMsg(ref, id, b, rev))
			cancel()
			if err == nil {
				return nil
			}
			if _, retry, _ := classifyWrite(err); !IsConflict(err) && !retry {
				return fmt.Errorf("record: replace entry %d of %s: %w", id, ref, err)
			}
			// The state moved on (the next round says so), another
			// conditional write was in flight, or no answer came (the
			// next round finds the id taken by these bytes).
		}
		// Or the state was read from a replica behind revision rev.
		if err := sleep(ctx, jitter(delay)); err != nil {
			return fmt.Errorf("record: replace entry %d of %s: %w", id, ref, err)
		}
		delay = min(2*delay, writeRetryMax)
	}
	return fmt.Errorf("record: entry %d of %s: not replaced in %d rounds", id, ref, maxReplace)
}

// conflictSeq returns the sequence a refused conditional write's answer
// names as the subject's last ("wrong last sequence: N"), or 0.
func conflictSeq(err error) uint64 {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != errCodeWrongLastSeq {
		return 0
	}
	_, n, ok := strings.Cut(apiErr.Description, ": ")
	if !ok {
		return 0
	}
	seq, err := strconv.ParseUint(strings.TrimSpace(n), 10, 64)
	if err != nil {
		return 0
	}
	return seq
}

// replaceMsg is the write of an entry over whatever its id holds, stored
// only while the session's state is at revision rev.
func (s *Store) replaceMsg(ref streams.SessionRef, id uint64, b []byte, rev uint64) *nats.Msg {
	m := &nats.Msg{Subject: streams.KVSubject(s.bucket, s.names.LogKey(ref, id)), Header: nats.Header{}, Data: b}
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, streams.KVSubject(s.bucket, s.names.StateKey(ref)))
	return m
}

// Stored returns the settlement of p that is stored under its reserved
// ids, whole, or nil: the first entry at p.Entry written by a settlement
// of step p.Step (an assistant entry for a model call, the call's
// tool_result for a tool), and the Entries-1 after it written by the
// same attempt. A settlement a crash cut short, or one whose entries a
// later attempt replaced in part, is not whole.
func (s *Store) Stored(ctx context.Context, ref streams.SessionRef, p Intent) ([]Entry, error) {
	head, ok, err := s.entry(ctx, ref, p.Entry)
	if err != nil || !ok {
		return nil, err
	}
	if head.Step != p.Step || head.Entries < 1 || head.Entries > MaxToolCalls+1 {
		return nil, nil
	}
	switch p.Kind {
	case StepModel:
		// A compaction's answer is its summary, alone.
		if p.Compaction != nil && (head.Kind != KindSummary || head.Entries != 1) ||
			p.Compaction == nil && head.Kind != KindAssistant {
			return nil, nil
		}
	case StepTool:
		if head.Kind != KindToolResult || head.CallID != p.CallID || head.Entries != 1 {
			return nil, nil
		}
	default:
		return nil, nil
	}
	out := []Entry{head}
	for i := 1; i < head.Entries; i++ {
		e, ok, err := s.entry(ctx, ref, p.Entry+uint64(i))
		if err != nil || !ok {
			return nil, err
		}
		if e.Step != p.Step || e.Attempt != head.Attempt {
			return nil, nil
		}
		out = append(out, e)
	}
	return out, nil
}

// entry reads the entry stored under id from the stream's leader (a
// stream message get, never a direct get): Stored decides from it
// whether a step's settlement is stored, and the entries a crashed
// attempt created were written after the state its caller loaded, so
// no revision of that state tells a replica behind them apart from one
// that holds them. The leader holds every write it acknowledged.
//
// Only the leader answers, so while the stream elects one (its leader's
// server went down, say) no read is answered: the read is made again,
// with the writes' backoff, for up to storedRetry.
func (s *Store) entry(ctx context.Context, ref streams.SessionRef, id uint64) (Entry, bool, error) {
	what := fmt.Sprintf("entry %d of %s", id, ref)
	data, seq, ok, err := s.leaderValue(ctx, s.names.LogKey(ref, id), what)
	if err != nil || !ok {
		return Entry{}, false, err
	}
	var e Entry
	if err := json.Unmarshal(data, &e); err != nil {
		return Entry{}, false, fmt.Errorf("record: decode %s (revision %s): %w", what, strconv.FormatUint(seq, 10), err)
	}
	return e, true, nil
}

// leaderValue reads the value of key from the stream's leader (what
// names it in errors), made again while no leader answers (entry): ok
// is false when the key holds nothing.
func (s *Store) leaderValue(ctx context.Context, key, what string) (data []byte, seq uint64, ok bool, err error) {
	delay := writeRetryFirst
	deadline := time.Now().Add(storedRetry)
	for {
		data, seq, ok, err := s.leaderRead(ctx, key, what)
		if err == nil || !leaderless(err) || ctx.Err() != nil {
			return data, seq, ok, err
		}
		if time.Now().After(deadline) {
			return nil, 0, false, fmt.Errorf("%w (no leader answered for %s)", err, storedRetry)
		}
		if err := sleep(ctx, jitter(delay)); err != nil {
			return nil, 0, false, fmt.Errorf("record: read %s: %w", what, err)
		}
		delay = min(2*delay, writeRetryMax)
	}
}

// storedRetry bounds how long Stored waits for the stream to have a
// leader: about two of nats-server's election timeouts (4-9 s).
var storedRetry = 20 * time.Second

// leaderless reports whether err is what a stream message get meets
// while the stream has no leader: no answer, or the server's "JetStream
// system temporarily unavailable".
func leaderless(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.As(err, &apiErr) && apiErr.Code == 503
}

// leaderRead is one read of leaderValue's.
func (s *Store) leaderRead(ctx context.Context, key, what string) ([]byte, uint64, bool, error) {
	gctx, cancel := context.WithTimeout(ctx, writeAttemptTimeout)
	defer cancel()
	subject := streams.KVSubject(s.bucket, key)
	req, err := json.Marshal(struct {
		LastBySubject string `json:"last_by_subj"`
	}{subject})
	if err != nil {
		return nil, 0, false, fmt.Errorf("record: read %s: %w", what, err)
	}
	resp, err := s.nc.RequestWithContext(gctx, "$JS.API.STREAM.MSG.GET."+streams.KVStream(s.bucket), req)
	if err != nil {
		return nil, 0, false, fmt.Errorf("record: read %s: %w", what, err)
	}
	var got struct {
		Message *struct {
			Seq    uint64 `json:"seq"`
			Header []byte `json:"hdrs"`
			Data   []byte `json:"data"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &got); err != nil {
		return nil, 0, false, fmt.Errorf("record: read %s: bad answer %q: %w", what, resp.Data, err)
	}
	switch {
	case got.Error != nil && got.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, 0, false, nil
	case got.Error != nil:
		return nil, 0, false, fmt.Errorf("record: read %s: %w", what, got.Error)
	case got.Message == nil:
		return nil, 0, false, fmt.Errorf("record: read %s: answer %q holds no message", what, resp.Data)
	}
	if len(got.Message.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(got.Message.Header)
		if err != nil {
			return nil, 0, false, fmt.Errorf("record: read %s (revision %d): headers: %w", what, got.Message.Seq, err)
		}
		if h.Get("KV-Operation") != "" {
			// A delete or purge marker: the key holds nothing.
			return nil, 0, false, nil
		}
	}
	return got.Message.Data, got.Message.Seq, true, nil
}
