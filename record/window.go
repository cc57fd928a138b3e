package record

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/streams"
)

// Window is where a session's live context lives in its transcript: the
// head (the first turns, which every compaction keeps), the latest
// summary, and the tail from From on. A worker rebuilds the context from
// these entries alone, so what it reads per event does not grow with
// the session's age. Before the first compaction the context is the
// whole transcript.
type Window struct {
	// HeadEnd is the first id past the head: entries below it are kept by
	// every compaction. 0 before the first compaction.
	HeadEnd uint64 `json:"head_end,omitempty"`
	// Summary is the id of the latest summary entry; 0 before the first
	// compaction.
	Summary uint64 `json:"summary,omitempty"`
	// From is the first id of the tail that follows the summary (the
	// summary's own id is among the tail's: it is skipped there).
	From uint64 `json:"context_from,omitempty"`
	// Summarised counts the answers (assistant entries) the summary
	// stands for.
	Summarised int `json:"summarised_answers,omitempty"`
	// CalBytes and CalTokens calibrate the token estimate: the size of
	// the last request whose input tokens the provider reported, and
	// those tokens.
	CalBytes  int64 `json:"cal_bytes,omitempty"`
	CalTokens int64 `json:"cal_tokens,omitempty"`
}

// Span is a range of entry ids, both ends included.
type Span struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
}

// Compaction is what a compaction step summarises: every entry from
// HeadEnd to Keep-1 (earlier summaries among them) becomes one summary
// entry; the head (ids below HeadEnd) and the tail from Keep on stay as
// they are.
type Compaction struct {
	HeadEnd uint64 `json:"head_end"`
	Keep    uint64 `json:"keep"`
	// Answers counts the answers the new summary stands for (those of the
	// previous summary included).
	Answers int `json:"answers"`
}

// Live returns the spans of entry ids the live context is made of, in
// order: the whole transcript before a compaction; after one, the head,
// the summary and the tail.
func (s State) Live() []Span {
	if s.NextEntry <= 1 {
		return nil
	}
	if s.Summary == 0 {
		return []Span{{From: 1, To: s.NextEntry - 1}}
	}
	var out []Span
	if s.HeadEnd > 1 {
		out = append(out, Span{From: 1, To: s.HeadEnd - 1})
	}
	out = append(out, Span{From: s.Summary, To: s.Summary})
	// The summary's id was reserved when the tail already existed: it
	// sits among the tail's ids, and the tail goes around it.
	if s.From < s.Summary {
		out = append(out, Span{From: s.From, To: s.Summary - 1})
	}
	if s.Summary+1 < s.NextEntry {
		out = append(out, Span{From: max(s.Summary+1, s.From), To: s.NextEntry - 1})
	}
	return out
}

// maxMultiGet is the most messages the server returns for one batched
// direct get (maxAllowedResponses in nats-server's stream.go).
const maxMultiGet = 1024

// multiGetBytes bounds the bytes one batched direct get returns (its
// max_bytes): the server stops after the message that reaches it and
// says in its end-of-batch status how many it did not send, and the
// rest is asked for again. An entry may be near the server's max
// payload, so without it a batch of 1023 could be a gigabyte, past what
// a subscription holds (nats: slow consumer) or the server queues for
// the connection before it cuts it. A batch of small entries stays one
// request.
var multiGetBytes = 8 << 20

// ReadSpans reads the entries of spans by their keys, in the spans'
// order: one batched direct get per 1023 entries (a multi_last request
// for the entries' subjects), or more where the entries' bytes pass
// multiGetBytes, so reading the live context costs what it holds, not
// what the transcript holds. A missing entry is an error.
//
// rev is the revision of the state that names the spans (0: none). A
// batched direct get may be answered by a replica behind the leader,
// which lacks the latest entries or holds an earlier version of an id (a
// leftover its settlement replaced); the state's key is read in the same
// batch, and the server says how far the replica answering holds the
// stream. Until it holds the state at rev or later (a replica applies
// the bucket's writes in order, so it then holds every entry that state
// names as it was named) the batch is read again, for up to
// spansCatchUp.
func (s *Store) ReadSpans(ctx context.Context, ref streams.SessionRef, spans []Span, rev uint64) ([]Entry, error) {
	var ids []uint64
	for _, sp := range spans {
		for id := sp.From; id <= sp.To && id != 0; id++ {
			ids = append(ids, id)
		}
	}
	out := make([]Entry, 0, len(ids))
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), maxMultiGet-1)]
		ids = ids[len(chunk):]
		got, err := s.readChunk(ctx, ref, chunk, rev)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}

// spansCatchUp bounds how long ReadSpans waits for a replica behind the
// state it reads for.
var spansCatchUp = entriesCatchUp

// readChunk reads ids in batched direct gets: one, or more when the
// server cuts a batch at multiGetBytes (each asks for the ids not
// answered yet). A batch the replica answering holds behind revision
// rev of the state is read again.
func (s *Store) readChunk(ctx context.Context, ref streams.SessionRef, ids []uint64, rev uint64) ([]Entry, error) {
	out := make([]Entry, len(ids))
	pending := make([]int, len(ids))
	for i := range pending {
		pending[i] = i
	}
	delay := time.Millisecond
	var deadline time.Time
	for len(pending) > 0 {
		asked := make([]uint64, len(pending))
		for j, i := range pending {
			asked[j] = ids[i]
		}
		b, err := s.multiGet(ctx, ref, asked, rev > 0)
		if err != nil {
			return nil, err
		}
		if max(b.state, b.upTo) < rev {
			if deadline.IsZero() {
				deadline = time.Now().Add(spansCatchUp)
			} else if time.Now().After(deadline) {
				return nil, fmt.Errorf("record: read entries of %s: the replica answering holds its state at revision %d, behind %d, after %s", ref, b.state, rev, spansCatchUp)
			}
			if err := sleep(ctx, delay); err != nil {
				return nil, fmt.Errorf("record: read entries of %s: %w", ref, err)
			}
			delay = min(2*delay, 100*time.Millisecond)
			continue
		}
		if !b.cut {
			for j, i := range pending {
				out[i] = b.entries[j]
			}
			break
		}
		// Cut at multiGetBytes: keep what came, ask again for the rest.
		left := pending[:0]
		for j, i := range pending {
			if b.answered[j] {
				out[i] = b.entries[j]
			} else {
				left = append(left, i)
			}
		}
		if len(left) == len(pending) {
			return nil, fmt.Errorf("record: read %d entries of %s: a batch cut at %d bytes answered none of them", len(asked), ref, multiGetBytes)
		}
		pending = left
	}
	for i, e := range out {
		if e.ID != ids[i] {
			return nil, fmt.Errorf("record: transcript of %s lacks entry %d (%d of %d read)", ref, ids[i], len(ids)-countMissing(out, ids), len(ids))
		}
	}
	return out, nil
}

func countMissing(got []Entry, ids []uint64) int {
	n := 0
	for i, e := range got {
		if e.ID != ids[i] {
			n++
		}
	}
	return n
}

// multiBatch is what one batched direct get answered.
type multiBatch struct {
	// entries holds the entries asked for (a missing one left zero);
	// answered says which the server sent (a delete marker among them).
	entries  []Entry
	answered []bool
	// state is the state's revision as the replica answering holds it
	// (0 if it holds none, it was not asked, or the batch was cut before
	// it); upTo is the last sequence of the bucket the replica held when
	// it answered (0 if it did not say). Either at rev or later means the
	// replica holds the state at rev.
	state, upTo uint64
	// cut is set when the server stopped at the batch's max_bytes with
	// messages left to send.
	cut bool
}

// multiGet reads up to maxMultiGet-1 entries in one batched direct get
// of at most multiGetBytes (past the message that reaches it), and with
// withState the session's state key beside them.
func (s *Store) multiGet(ctx context.Context, ref streams.SessionRef, ids []uint64, withState bool) (multiBatch, error) {
	subjects := make([]string, len(ids), len(ids)+1)
	want := make(map[string]int, len(ids))
	for i, id := range ids {
		subjects[i] = streams.KVSubject(s.bucket, s.names.LogKey(ref, id))
		want[subjects[i]] = i
	}
	stateSubject := ""
	if withState {
		stateSubject = streams.KVSubject(s.bucket, s.names.StateKey(ref))
		subjects = append(subjects, stateSubject)
	}
	body, err := json.Marshal(struct {
		MultiLast []string `json:"multi_last"`
		MaxBytes  int      `json:"max_bytes"`
	}{subjects, multiGetBytes})
	if err != nil {
		return multiBatch{}, fmt.Errorf("record: read entries of %s: %w", ref, err)
	}
	inbox := s.nc.NewRespInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return multiBatch{}, fmt.Errorf("record: read entries of %s: %w", ref, err)
	}
	defer sub.Unsubscribe()
	if err := s.nc.PublishRequest("$JS.API.DIRECT.GET."+streams.KVStream(s.bucket), inbox, body); err != nil {
		return multiBatch{}, fmt.Errorf("record: read entries of %s: %w", ref, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, writeAttemptTimeout)
		defer cancel()
	}
	b := multiBatch{entries: make([]Entry, len(ids)), answered: make([]bool, len(ids))}
	found := 0
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return multiBatch{}, fmt.Errorf("record: read %d entries of %s (%d answered): %w", len(ids), ref, found, err)
		}
		if status := m.Header.Get("Status"); status != "" {
			// 204 ends the batch, saying how many messages it left
			// unsent and up to which sequence it read; 404 answers a
			// batch none of whose subjects has a message.
			if status == "204" {
				pending, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
				b.upTo, _ = strconv.ParseUint(m.Header.Get("Nats-UpTo-Sequence"), 10, 64)
				b.cut = pending > 0
				break
			}
			if status == "404" {
				break
			}
			return multiBatch{}, fmt.Errorf("record: read %d entries of %s: status %s %s", len(ids), ref, status, m.Header.Get("Description"))
		}
		subject := m.Header.Get(jetstream.SubjectHeader)
		if withState && subject == stateSubject {
			b.state, _ = strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
			continue
		}
		i, ok := want[subject]
		if !ok {
			continue
		}
		b.answered[i] = true
		found++
		if m.Header.Get("KV-Operation") != "" {
			// A delete marker: the entry is missing.
			continue
		}
		if err := json.Unmarshal(m.Data, &b.entries[i]); err != nil {
			return multiBatch{}, fmt.Errorf("record: decode %s: %w", subject, err)
		}
	}
	return b, nil
}
