package policies

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Changes that write an entry of an agent in jl_agents.
const (
	// ChangeApply: a definition was applied (a new version).
	ChangeApply = "apply"
	// ChangeRollback: a version's content was restored as a new version,
	// by `agents rollback`, by ending a rollout, or by its guard.
	ChangeRollback = "rollback"
	// ChangeRollout: the rollout changed; the version did not.
	ChangeRollout = "rollout"
)

// Record is one entry of an agent in jl_agents: a version of its
// definition with who applied it, when and from where, and the agent's
// rollout in force from this entry on. A version is written once; an
// entry that changes only the rollout repeats the version it serves.
type Record struct {
	// Definition is the version's content, with Version and Revision set
	// when read.
	Definition Definition `json:"definition"`
	// Version is the agent's own number: 1, 2, 3 …
	Version uint64 `json:"version,omitempty"`
	// Hash is the content's SHA-256, "sha256:<hex>": two versions with one
	// hash behave alike.
	Hash string `json:"hash,omitempty"`
	// Source is the file it was applied from, if any.
	Source string `json:"source,omitempty"`
	// AppliedBy names who applied it (user@host for the CLI).
	AppliedBy string `json:"applied_by,omitempty"`
	// AppliedAt is when the version was stored.
	AppliedAt time.Time `json:"applied_at"`
	// Change is what wrote the entry: apply, rollback or rollout.
	Change string `json:"change,omitempty"`
	// Restores is the version whose content a rollback copied.
	Restores uint64 `json:"restores,omitempty"`
	// Rollout is the rollout in force from this entry on.
	Rollout *Rollout `json:"rollout,omitempty"`
	// Ended is the rollout this entry ended, and how.
	Ended *RolloutEnd `json:"rollout_ended,omitempty"`
	// ChangedAt and ChangedBy say when and by whom the entry was written,
	// when that is not the version's own application.
	ChangedAt time.Time `json:"changed_at,omitzero"`
	ChangedBy string    `json:"changed_by,omitempty"`
	// Revision is the entry's jl_agents revision, set when read.
	Revision uint64 `json:"revision,omitempty"`
}

// content is d as stored and hashed: without what the store assigns and
// without the rollout instruction.
func content(d Definition) Definition {
	d.Version, d.Revision, d.Rollout = 0, 0, nil
	return d
}

// ContentHash is the SHA-256 of a definition's content (its canonical
// JSON, without version, revision and rollout).
func ContentHash(d Definition) string {
	b, _ := json.Marshal(content(d))
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ShortHash is the first 12 hex digits of a hash, for tables.
func ShortHash(h string) string {
	if len(h) > len("sha256:")+12 {
		return h[len("sha256:") : len("sha256:")+12]
	}
	return h
}

// decode reads a stored entry's value.
func decode(val []byte) (Record, error) {
	var rec Record
	dec := json.NewDecoder(bytes.NewReader(val))
	if err := dec.Decode(&rec); err != nil {
		return Record{}, fmt.Errorf("%w: decode stored definition: %w", ErrInvalid, err)
	}
	return rec, nil
}

// record decodes an entry and fills what the entry itself says: the
// revision, the content hash of records stored without one, and the
// canary revision of a rollout that started in this entry.
func record(e jetstream.KeyValueEntry) (Record, error) {
	rec, err := decode(e.Value())
	if err != nil {
		return Record{}, err
	}
	rec.Revision = e.Revision()
	rec.Definition = content(rec.Definition)
	if rec.Hash == "" {
		rec.Hash = ContentHash(rec.Definition)
	}
	if r := rec.Rollout; r != nil && r.CanaryRevision == 0 {
		r.CanaryRevision = e.Revision()
	}
	rec.Definition.Version, rec.Definition.Revision = rec.Version, rec.Revision
	return rec, nil
}

// history is an agent's entries in jl_agents, oldest first, as far as the
// bucket keeps them, with every record numbered.
type history struct {
	entries []jetstream.KeyValueEntry
	recs    []Record // decoded puts; deletes and undecodable entries are absent
	last    uint64   // the highest version number used
}

// loadHistory reads the agent's history. A key never written has an empty
// one.
//
// Entries written before versions were numbered per agent carry no
// number. They predate every numbered one, so they are numbered back from
// the oldest numbered entry, or from 1 at the oldest entry kept when
// there is none: the numbers stay the same as later versions are added
// and old ones leave the bucket's history.
func (s *Store) loadHistory(ctx context.Context, key string) (history, error) {
	es, err := s.kv.History(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return history{}, nil
	}
	if err != nil {
		return history{}, err
	}
	h := history{entries: es}
	for _, e := range es {
		if e.Operation() != jetstream.KeyValuePut {
			continue
		}
		rec, err := record(e)
		if err != nil {
			continue
		}
		h.recs = append(h.recs, rec)
	}
	first := -1
	for i, r := range h.recs {
		if r.Version != 0 {
			first = i
			break
		}
	}
	if first < 0 {
		for i := range h.recs {
			h.recs[i].Version = uint64(i + 1)
		}
	} else {
		for i := first - 1; i >= 0; i-- {
			n := int64(h.recs[first].Version) - int64(first-i)
			if n < 1 {
				n = 0
			}
			h.recs[i].Version = uint64(n)
		}
	}
	for i := range h.recs {
		h.recs[i].Definition.Version = h.recs[i].Version
		h.last = max(h.last, h.recs[i].Version)
	}
	return h, nil
}

// version returns the first entry that holds version n.
func (h history) version(n uint64) (Record, bool) {
	for _, r := range h.recs {
		if r.Version == n {
			return r, true
		}
	}
	return Record{}, false
}

// byRevision returns the record of entry rev.
func (h history) byRevision(rev uint64) (Record, bool) {
	for _, r := range h.recs {
		if r.Revision == rev {
			return r, true
		}
	}
	return Record{}, false
}

// ended returns the entry that ended rollout id.
func (h history) ended(id string) (RolloutEnd, bool) {
	for _, r := range h.recs {
		if r.Ended != nil && r.Ended.ID == id {
			return *r.Ended, true
		}
	}
	return RolloutEnd{}, false
}

// Versions returns one record per version of agent that the bucket's
// history still holds, oldest first: each version as it was first
// stored. Entries that only changed the rollout are folded into the
// version they repeat; Events reads what every change did.
func (s *Store) Versions(ctx context.Context, agent string) ([]Record, error) {
	key, err := s.names.AgentKey(agent)
	if err != nil {
		return nil, fmt.Errorf("policies: history of %q: %w", agent, err)
	}
	h, err := s.loadHistory(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("policies: history of %q: %w", agent, err)
	}
	if len(h.recs) == 0 {
		return nil, fmt.Errorf("policies: history of %q: %w", agent, ErrNotFound)
	}
	var out []Record
	seen := map[uint64]bool{}
	for _, r := range h.recs {
		if seen[r.Version] {
			continue
		}
		seen[r.Version] = true
		out = append(out, r)
	}
	return out, nil
}

// Entries returns every entry of agent that the bucket's history holds,
// oldest first: versions, and the rollout changes between them.
func (s *Store) Entries(ctx context.Context, agent string) ([]Record, error) {
	key, err := s.names.AgentKey(agent)
	if err != nil {
		return nil, fmt.Errorf("policies: history of %q: %w", agent, err)
	}
	h, err := s.loadHistory(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("policies: history of %q: %w", agent, err)
	}
	if len(h.recs) == 0 {
		return nil, fmt.Errorf("policies: history of %q: %w", agent, ErrNotFound)
	}
	return h.recs, nil
}

// Version returns version n of agent, as long as the bucket's history
// keeps it (ErrNotFound otherwise).
func (s *Store) Version(ctx context.Context, agent string, n uint64) (Record, error) {
	key, err := s.names.AgentKey(agent)
	if err != nil {
		return Record{}, fmt.Errorf("policies: %q version %d: %w", agent, n, err)
	}
	h, err := s.loadHistory(ctx, key)
	if err != nil {
		return Record{}, fmt.Errorf("policies: %q version %d: %w", agent, n, err)
	}
	r, ok := h.version(n)
	if !ok {
		if len(h.recs) == 0 {
			return Record{}, fmt.Errorf("policies: %q: %w", agent, ErrNotFound)
		}
		return Record{}, fmt.Errorf("policies: %q version %d: %w (the history holds versions %d to %d)", agent, n, ErrNotFound, h.recs[0].Version, h.last)
	}
	return r, nil
}
