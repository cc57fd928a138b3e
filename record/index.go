package record

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/streams"
)

// The status index (jl_status) answers "which sessions are blocked, and
// since when" without reading every state: each session has one key,
// <status>.<agent>.<session>, holding its Summary as of its last status
// change, so the sessions in one status (of one agent) are a key filter
// the server evaluates. The worker writes it right after the state write
// that changes the status (Index.Set) and heals it whenever it takes a
// session (Index.Heal). Before the state write it marks the session
// (Index.Mark, key _dirty.<agent>.<session>), and Set clears the mark: a
// mark left behind is a crash (or a failed index write) between the two
// writes, and Index.Marked lists those for a worker to heal, since a
// session that came to rest may never be taken again. Retention removes
// the entry with the session's other records. Counters
// of a working session (turns, tokens, cost) are those of its last status
// change; `jetloop show` reads the live ones.

// Bounds of an index page.
const (
	// DefaultPage is the page size of a listing without a limit.
	DefaultPage = 1000
	// MaxPage bounds a page.
	MaxPage = 10_000
)

// markerTTL is how long the marker of a removed key stays: a listing of
// a status skips markers, which otherwise pile up under each status a
// session has left.
const markerTTL = 5 * time.Minute

// indexBuilt is the key that marks an index built from the states, for
// deployments that had sessions before it existed.
const indexBuilt = "_built"

// dirtyPrefix begins the key of a session whose status is being changed:
// _dirty.<agent>.<session>. It holds nothing.
const dirtyPrefix = "_dirty."

// Index is the status index in jl_status.
type Index struct {
	kv    jetstream.KeyValue
	names streams.Names
}

// OpenIndex binds to the deployment's jl_status, which streams.Provision
// creates.
func OpenIndex(ctx context.Context, js jetstream.JetStream, names streams.Names) (*Index, error) {
	kv, err := js.KeyValue(ctx, names.BucketStatus())
	if err != nil {
		return nil, fmt.Errorf("record: open bucket %s: %w", names.BucketStatus(), err)
	}
	return &Index{kv: kv, names: names}, nil
}

// Set records st under its status, and removes the session's key under
// prev when its status changed from prev.
func (x *Index) Set(ctx context.Context, prev Status, st State) error {
	ref, err := streams.NewSessionRef(st.Agent, st.Session)
	if err != nil {
		return fmt.Errorf("record: index %s/%s: %w", st.Agent, st.Session, err)
	}
	if err := x.put(ctx, ref, st); err != nil {
		return err
	}
	if prev != "" && prev != st.Status {
		if err := x.remove(ctx, ref, prev); err != nil {
			return err
		}
	}
	return x.unmark(ctx, ref)
}

// Mark records that session ref's status is about to change: until Set
// (or Heal) clears it, Marked lists the session.
func (x *Index) Mark(ctx context.Context, ref streams.SessionRef) error {
	if _, err := x.kv.Put(ctx, dirtyPrefix+ref.Key(), nil); err != nil {
		return fmt.Errorf("record: mark %s in the status index: %w", ref, err)
	}
	return nil
}

func (x *Index) unmark(ctx context.Context, ref streams.SessionRef) error {
	if err := x.kv.Purge(ctx, dirtyPrefix+ref.Key(), jetstream.PurgeTTL(markerTTL)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("record: unmark %s in the status index: %w", ref, err)
	}
	return nil
}

// Marked returns the sessions whose mark (Mark) no Set or Heal cleared:
// those whose index entry may not say what their state says.
func (x *Index) Marked(ctx context.Context) ([]streams.SessionRef, error) {
	lister, err := x.kv.ListKeysFiltered(ctx, dirtyPrefix+">")
	if err != nil {
		return nil, fmt.Errorf("record: list the marked sessions of the status index: %w", err)
	}
	var out []streams.SessionRef
	for k := range lister.Keys() {
		if ref, err := x.names.ParseSessionKey(strings.TrimPrefix(k, dirtyPrefix)); err == nil {
			out = append(out, ref)
		}
	}
	return out, nil
}

func (x *Index) put(ctx context.Context, ref streams.SessionRef, st State) error {
	key, err := x.names.StatusKey(string(st.Status), ref)
	if err != nil {
		return fmt.Errorf("record: index %s: %w", ref, err)
	}
	b, err := marshal(summarise(st))
	if err != nil {
		return fmt.Errorf("record: index %s: %w", ref, err)
	}
	if _, err := x.kv.Put(ctx, key, b); err != nil {
		return fmt.Errorf("record: index %s as %s: %w", ref, st.Status, err)
	}
	return nil
}

func (x *Index) remove(ctx context.Context, ref streams.SessionRef, st Status) error {
	key, err := x.names.StatusKey(string(st), ref)
	if err != nil {
		return fmt.Errorf("record: index %s: %w", ref, err)
	}
	if err := x.kv.Purge(ctx, key, jetstream.PurgeTTL(markerTTL)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("record: unindex %s as %s: %w", ref, st, err)
	}
	return nil
}

// Heal makes the index say what st says: its key under st's status with
// st's summary, and none under another status.
func (x *Index) Heal(ctx context.Context, st State) error {
	ref, err := streams.NewSessionRef(st.Agent, st.Session)
	if err != nil {
		return fmt.Errorf("record: index %s/%s: %w", st.Agent, st.Session, err)
	}
	lister, err := x.kv.ListKeysFiltered(ctx, "*."+ref.Key())
	if err != nil {
		return fmt.Errorf("record: index of %s: %w", ref, err)
	}
	own, _ := x.names.StatusKey(string(st.Status), ref)
	var stale []string
	for k := range lister.Keys() {
		if k != own {
			stale = append(stale, k)
		}
	}
	if err := x.put(ctx, ref, st); err != nil {
		return err
	}
	for _, k := range stale {
		if err := x.kv.Purge(ctx, k, jetstream.PurgeTTL(markerTTL)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("record: unindex %s: %w", k, err)
		}
	}
	return nil
}

// Remove drops every key of session ref (retention).
func (x *Index) Remove(ctx context.Context, ref streams.SessionRef) error {
	lister, err := x.kv.ListKeysFiltered(ctx, "*."+ref.Key())
	if err != nil {
		return fmt.Errorf("record: index of %s: %w", ref, err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	for _, k := range keys {
		if err := x.kv.Purge(ctx, k, jetstream.PurgeTTL(markerTTL)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("record: unindex %s: %w", k, err)
		}
	}
	return nil
}

// Build indexes every session from its state, once per deployment: a
// deployment whose sessions predate the index gets them listed. A second
// call, and a call on a deployment that began with the index, do nothing.
func (x *Index) Build(ctx context.Context, js jetstream.JetStream) (int, error) {
	if _, err := x.kv.Get(ctx, indexBuilt); err == nil {
		return 0, nil
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, fmt.Errorf("record: index marker: %w", err)
	}
	kv, err := js.KeyValue(ctx, x.names.BucketSessions())
	if err != nil {
		return 0, fmt.Errorf("record: open bucket %s: %w", x.names.BucketSessions(), err)
	}
	w, err := kv.Watch(ctx, x.names.StateKeys(), jetstream.IgnoreDeletes())
	if err != nil {
		return 0, fmt.Errorf("record: build the index: %w", err)
	}
	defer w.Stop()
	n := 0
	for e := range w.Updates() {
		if e == nil {
			break
		}
		st, err := DecodeState(e.Value())
		if err != nil {
			continue
		}
		if err := x.Heal(ctx, st); err != nil {
			return n, err
		}
		n++
	}
	if _, err := x.kv.Create(ctx, indexBuilt, []byte(time.Now().UTC().Format(time.RFC3339))); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return n, fmt.Errorf("record: index marker: %w", err)
	}
	return n, nil
}

// Query selects sessions from the index.
type Query struct {
	// Status and Agent: only sessions in this status, of this agent.
	Status Status
	Agent  string
	// Since: only sessions whose status changed at or after it.
	Since time.Time
	// Limit bounds the page; default DefaultPage, at most MaxPage.
	Limit int
	// Cursor continues a listing: the Next of the previous page.
	Cursor uint64
}

// Selection is one page of a listing: sessions in the order their status
// last changed, oldest first, and the Cursor of the next page (0: this
// was the last).
type Selection struct {
	Sessions []Summary
	Next     uint64
}

// Select reads one page of the sessions q selects from the index: the
// server filters by status and agent (a key filter), Since is applied to
// what it sends. A session whose status changes while a listing pages may
// show on two pages or be missed by both; a page itself is consistent.
func Select(ctx context.Context, js jetstream.JetStream, names streams.Names, q Query) (Selection, error) {
	if q.Limit == 0 {
		q.Limit = DefaultPage
	}
	if q.Limit < 0 || q.Limit > MaxPage {
		return Selection{}, fmt.Errorf("record: page of %d: want 1 to %d", q.Limit, MaxPage)
	}
	keys, err := names.StatusKeys(string(q.Status), q.Agent)
	if err != nil {
		return Selection{}, err
	}
	bucket := names.BucketStatus()
	cfg := jetstream.OrderedConsumerConfig{}
	if q.Status != "" || q.Agent != "" {
		// Every key matches without a filter, which spares the server a
		// scan of the subjects; the marker key is no summary and skipped.
		cfg.FilterSubjects = []string{streams.KVSubject(bucket, keys)}
	}
	if q.Cursor > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, q.Cursor
	}
	cons, err := js.OrderedConsumer(ctx, streams.KVStream(bucket), cfg)
	if err != nil {
		return Selection{}, fmt.Errorf("record: read %s: %w", bucket, err)
	}
	// The server keeps an idle ordered consumer for minutes and allows a
	// stream only so many: a listing removes its own, or frequent
	// listings fill the bucket's stream until no one can list at all.
	defer streams.DropConsumer(ctx, js, streams.KVStream(bucket), cons)
	info, err := cons.Info(ctx)
	if err != nil {
		return Selection{}, fmt.Errorf("record: read %s: %w", bucket, err)
	}
	out := Selection{Sessions: []Summary{}}
	pending := info.NumPending
	for pending > 0 {
		// One more than the page holds: the first left out names the
		// next page.
		want := min(pending, uint64(q.Limit+1-len(out.Sessions)), 1000)
		batch, err := cons.Fetch(int(want), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return Selection{}, fmt.Errorf("record: read %s: %w", bucket, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			pending = md.NumPending
			if op := m.Headers().Get("KV-Operation"); op == "DEL" || op == "PURGE" {
				continue
			}
			var s Summary
			if m.Subject() == streams.KVSubject(bucket, indexBuilt) || strings.HasPrefix(m.Subject(), streams.KVSubject(bucket, dirtyPrefix)) || json.Unmarshal(m.Data(), &s) != nil || !q.Since.IsZero() && s.Since.Before(q.Since) {
				continue
			}
			if len(out.Sessions) == q.Limit {
				out.Next = md.Sequence.Stream
				return out, nil
			}
			out.Sessions = append(out.Sessions, s)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return Selection{}, fmt.Errorf("record: read %s: %w", bucket, err)
		}
		if got == 0 {
			break
		}
	}
	return out, nil
}
