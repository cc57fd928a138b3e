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

// ReadSpans reads the entries of spans by their keys, in the spans'
// order: one batched direct get per 1023 entries (a multi_last request
// for the entries' subjects), so reading the live context costs what it
// holds, not what the transcript holds. A missing entry is an error.
//
// rev is the revision of the state that names the spans (0: none). A
// batched direct get may be answered by a replica behind the leader,
// which lacks the latest entries or holds an earlier version of an id (a
// leftover its settlement replaced); the state's key is read in the same
// batch, and until the replica answering holds the state at rev or later
// (a replica applies the bucket's writes in order, so it then holds every
// entry that state names as it was named) the read is made again, for up
// to entriesCatchUp.
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

// readChunk reads ids in one batched direct get, again while the replica
// answering is behind revision rev of the state.
func (s *Store) readChunk(ctx context.Context, ref streams.SessionRef, ids []uint64, rev uint64) ([]Entry, error) {
	delay := time.Millisecond
	var deadline time.Time
	for {
		got, seq, missing, err := s.multiGet(ctx, ref, ids, rev > 0)
		if err != nil {
			return nil, err
		}
		if seq >= rev {
			if missing != 0 {
				return nil, fmt.Errorf("record: transcript of %s lacks entry %d (%d of %d read)", ref, missing, len(ids)-countMissing(got, ids), len(ids))
			}
			return got, nil
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(spansCatchUp)
		} else if time.Now().After(deadline) {
			return nil, fmt.Errorf("record: read entries of %s: the replica answering holds its state at revision %d, behind %d, after %s", ref, seq, rev, spansCatchUp)
		}
		if err := sleep(ctx, delay); err != nil {
			return nil, fmt.Errorf("record: read entries of %s: %w", ref, err)
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
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

// multiGet reads up to maxMultiGet-1 entries in one batched direct get,
// and with withState the session's state key beside them: it returns the
// entries (a missing one left zero), the state's revision as the replica
// answering holds it (0 if it holds none, or not asked), and the first
// id missing (0 if none).
func (s *Store) multiGet(ctx context.Context, ref streams.SessionRef, ids []uint64, withState bool) ([]Entry, uint64, uint64, error) {
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
	}{subjects})
	if err != nil {
		return nil, 0, 0, fmt.Errorf("record: read entries of %s: %w", ref, err)
	}
	inbox := s.nc.NewRespInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("record: read entries of %s: %w", ref, err)
	}
	defer sub.Unsubscribe()
	if err := s.nc.PublishRequest("$JS.API.DIRECT.GET."+streams.KVStream(s.bucket), inbox, body); err != nil {
		return nil, 0, 0, fmt.Errorf("record: read entries of %s: %w", ref, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, writeAttemptTimeout)
		defer cancel()
	}
	out := make([]Entry, len(ids))
	found := 0
	var stateSeq uint64
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("record: read %d entries of %s (%d answered): %w", len(ids), ref, found, err)
		}
		if status := m.Header.Get("Status"); status != "" {
			// 204 ends the batch; 404 answers a batch none of whose
			// subjects has a message.
			if status == "204" || status == "404" {
				break
			}
			return nil, 0, 0, fmt.Errorf("record: read %d entries of %s: status %s %s", len(ids), ref, status, m.Header.Get("Description"))
		}
		subject := m.Header.Get(jetstream.SubjectHeader)
		if withState && subject == stateSubject {
			stateSeq, _ = strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
			continue
		}
		i, ok := want[subject]
		if !ok || m.Header.Get("KV-Operation") != "" {
			// Not asked for, or a delete marker: the entry is missing.
			continue
		}
		if err := json.Unmarshal(m.Data, &out[i]); err != nil {
			return nil, 0, 0, fmt.Errorf("record: decode %s: %w", subject, err)
		}
		found++
	}
	var missing uint64
	if found != len(ids) {
		for i, e := range out {
			if e.ID != ids[i] {
				missing = ids[i]
				break
			}
		}
	}
	return out, stateSeq, missing, nil
}
