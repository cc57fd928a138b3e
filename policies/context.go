package policies

import (
	"context"
	"fmt"
	"time"
)

// PayloadFull is the payload that gives the model an event's whole data,
// as it came.
const PayloadFull = "full"

// MaxPayloadLen bounds the text a trigger's payload puts into the
// context, in bytes; the rest is cut with a note (the whole event stays
// readable with read_event).
const MaxPayloadLen = 16 << 10

// ContextPolicy is what of a session's history each model call receives
// (DESIGN §8, Context). Zero fields turn their part off.
type ContextPolicy struct {
	// MaskAfterTurns replaces the results of tool calls made more than this
	// many turns before the next call by a placeholder naming the result's
	// handle for read_blob; 0 never masks.
	MaskAfterTurns int `yaml:"mask_after_turns,omitempty" json:"mask_after_turns,omitempty"`
	// CompactAtTokens compacts the context first when the next call's
	// input would pass this many tokens: the agent's own model summarises
	// the turns between the first KeepFirstTurns and the last
	// KeepLastTurns into a summary entry; 0 never compacts.
	CompactAtTokens int64 `yaml:"compact_at_tokens,omitempty" json:"compact_at_tokens,omitempty"`
	// KeepFirstTurns are the first turns compaction leaves as they are
	// (default DefaultKeepFirstTurns): the task and the early decisions.
	KeepFirstTurns *int `yaml:"keep_first_turns,omitempty" json:"keep_first_turns,omitempty"`
	// KeepLastTurns are the last turns compaction leaves as they are
	// (default DefaultKeepLastTurns): the current state.
	KeepLastTurns *int `yaml:"keep_last_turns,omitempty" json:"keep_last_turns,omitempty"`
	// Notes gives the agent notes_read and notes_write and puts its notes
	// into every call's context.
	Notes bool `yaml:"notes,omitempty" json:"notes,omitempty"`
}

// Defaults and bounds of a context policy.
const (
	DefaultKeepFirstTurns = 1
	DefaultKeepLastTurns  = 4
	// MinCompactAtTokens is the smallest compaction threshold: below it a
	// summary and the kept turns alone would pass it.
	MinCompactAtTokens = 1000
	// MaxCompactAtTokens is beyond every model's window.
	MaxCompactAtTokens = 10_000_000
	// MaxKeepTurns bounds keep_first_turns, keep_last_turns and
	// mask_after_turns.
	MaxKeepTurns = 1000
)

// KeepFirst is KeepFirstTurns with its default.
func (c ContextPolicy) KeepFirst() int {
	if c.KeepFirstTurns == nil {
		return DefaultKeepFirstTurns
	}
	return *c.KeepFirstTurns
}

// KeepLast is KeepLastTurns with its default.
func (c ContextPolicy) KeepLast() int {
	if c.KeepLastTurns == nil {
		return DefaultKeepLastTurns
	}
	return *c.KeepLastTurns
}

// Retention removes an agent's sessions at rest, with every record they
// have (state, transcript, notes, blobs, lease), once they are older or
// more numerous than it allows. A session that is working, blocked or
// paused, or has input it has not consumed, is never removed.
type Retention struct {
	// MaxAge removes a session whose last run ended (or, for one that never
	// ran, that was last written) longer ago than this.
	MaxAge Duration `yaml:"max_age,omitempty" json:"max_age,omitzero"`
	// MaxCount keeps at most this many sessions at rest, removing those
	// that rested longest first.
	MaxCount int `yaml:"max_count,omitempty" json:"max_count,omitempty"`
	// Sessions says which sessions it applies to: "all" (default) or
	// "ephemeral" (only those an ephemeral schedule started, one per
	// tick).
	Sessions string `yaml:"sessions,omitempty" json:"sessions,omitempty"`
}

// Retention scopes.
const (
	RetainAll       = "all"
	RetainEphemeral = "ephemeral"
)

// Bounds of a retention policy.
const (
	// MinRetentionAge is the shortest max_age: a session at rest is given
	// time for the events and control messages that follow its run.
	MinRetentionAge = time.Minute
	// MaxRetentionCount bounds max_count.
	MaxRetentionCount = 1_000_000
)

// Scope is Sessions with its default.
func (r Retention) Scope() string {
	if r.Sessions == "" {
		return RetainAll
	}
	return r.Sessions
}

func checkContext(c *checker, d Definition) {
	if p := d.Context; p != nil {
		if p.MaskAfterTurns < 0 || p.MaskAfterTurns > MaxKeepTurns {
			c.addf("context.mask_after_turns", "%d: want 0 (never) to %d", p.MaskAfterTurns, MaxKeepTurns)
		}
		if p.CompactAtTokens != 0 && (p.CompactAtTokens < MinCompactAtTokens || p.CompactAtTokens > MaxCompactAtTokens) {
			c.addf("context.compact_at_tokens", "%d: want 0 (never) or %d to %d", p.CompactAtTokens, MinCompactAtTokens, MaxCompactAtTokens)
		}
		if k := p.KeepFirstTurns; k != nil && (*k < 0 || *k > MaxKeepTurns) {
			c.addf("context.keep_first_turns", "%d: want 0 to %d", *k, MaxKeepTurns)
		}
		if k := p.KeepLastTurns; k != nil && (*k < 1 || *k > MaxKeepTurns) {
			c.addf("context.keep_last_turns", "%d: want 1 (the turn in progress) to %d", *k, MaxKeepTurns)
		}
		if p.CompactAtTokens == 0 && (p.KeepFirstTurns != nil || p.KeepLastTurns != nil) {
			f := "context.keep_first_turns"
			if p.KeepFirstTurns == nil {
				f = "context.keep_last_turns"
			}
			c.addf(f, "only compaction keeps turns: set compact_at_tokens too")
		}
	}
	for i, t := range d.Tools {
		if t == "notes_read" || t == "notes_write" {
			c.addf(fmt.Sprintf("tools[%d]", i), "%s comes with context: {notes: true}; do not list it", t)
		}
	}
	if r := d.Retention; r != nil {
		if r.MaxAge.IsZero() && r.MaxCount == 0 {
			c.addf("retention", "set max_age, max_count or both")
		}
		if !r.MaxAge.IsZero() && r.MaxAge.D() < MinRetentionAge {
			c.addf("retention.max_age", "%s: want at least %s", r.MaxAge.D(), MinRetentionAge)
		}
		if r.MaxCount < 0 || r.MaxCount > MaxRetentionCount {
			c.addf("retention.max_count", "%d: want 0 (no count limit) to %d", r.MaxCount, MaxRetentionCount)
		}
		if r.Sessions != "" && r.Sessions != RetainAll && r.Sessions != RetainEphemeral {
			c.addf("retention.sessions", "%q: want %s or %s", r.Sessions, RetainAll, RetainEphemeral)
		}
	}
}

// HasPayload reports whether the trigger declares a payload expression
// (not the default projection, not full).
func (t *CompiledTrigger) HasPayload() bool { return t.payload != nil }

// PayloadOf evaluates the trigger's payload expression over vars: a
// string, or a map the caller renders. It is nil with no error for a
// trigger without an expression (the default projection, or
// Payload == PayloadFull). A field the event lacks is an error here: a
// payload that cannot be computed is reported, not silently empty.
func (t *CompiledTrigger) PayloadOf(ctx context.Context, vars Vars) (any, error) {
	if t.payload == nil {
		return nil, nil
	}
	v, err := t.payload.evalValue(ctx, vars)
	if err != nil {
		return nil, fmt.Errorf("payload of trigger %s: %w", t.Name, err)
	}
	switch v.(type) {
	case nil, string, map[string]any:
		return v, nil
	}
	return nil, fmt.Errorf("%w: payload of trigger %s: result is %T, want a map or a string", ErrEval, t.Name, v)
}

// PayloadText renders a payload value as the model sees it: a string as
// it is, a map as JSON; at most MaxPayloadLen bytes.
func PayloadText(v any) (string, error) {
	s, err := textOf(v)
	if err != nil {
		return "", err
	}
	return s, nil
}
