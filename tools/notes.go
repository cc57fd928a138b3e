package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/streams"
)

// MaxNotesBytes bounds a session's notes. They are in the context of
// every model call, so they are kept short: a write that would pass the
// bound is refused, and the model is told to condense.
const MaxNotesBytes = 8 << 10

// NotesStore holds sessions' notes: the jl_sessions bucket
// (jetstream.KeyValue) satisfies it.
type NotesStore interface {
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
	Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error)
	Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error)
}

// Notes is a session's notes as stored under streams.Names.NotesKey.
type Notes struct {
	Text string `json:"text"`
	// Call is the call that wrote them last: a replay of that call (after
	// a crash between its write and its settlement) changes nothing.
	Call string `json:"call,omitempty"`
}

// ReadNotes returns a session's notes; empty when it has none.
func ReadNotes(ctx context.Context, kv NotesStore, names streams.Names, ref streams.SessionRef) (Notes, uint64, error) {
	e, err := kv.Get(ctx, names.NotesKey(ref))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Notes{}, 0, nil
	}
	if err != nil {
		return Notes{}, 0, fmt.Errorf("tools: read notes of %s: %w", ref, err)
	}
	var n Notes
	if err := json.Unmarshal(e.Value(), &n); err != nil {
		return Notes{}, 0, fmt.Errorf("tools: decode notes of %s: %w", ref, err)
	}
	return n, e.Revision(), nil
}

const notesReadSchema = `{"type": "object", "properties": {}, "additionalProperties": false}`

const notesWriteSchema = `{
	"type": "object",
	"properties": {
		"text": {"type": "string", "maxLength": 65536, "description": "The text to write."},
		"mode": {"type": "string", "enum": ["replace", "append"], "description": "replace (default) the notes with text, or append text as a new line."}
	},
	"required": ["text"],
	"additionalProperties": false
}`

type notesRead struct {
	kv    NotesStore
	names streams.Names
}

func (n *notesRead) Spec() Spec {
	return Spec{
		Name:        "notes_read",
		Description: "Read your notes for this session: what you chose to remember across events. They are also shown to you at the start of every turn.",
		Schema:      json.RawMessage(notesReadSchema),
		ReplaySafe:  true,
		State:       Stateless,
	}
}

func (n *notesRead) Call(ctx context.Context, call Call) (Result, error) {
	if n.kv == nil {
		return errResult("notes_read: no notes store is configured"), nil
	}
	ref, err := streams.NewSessionRef(call.Agent, call.Session)
	if err != nil {
		return Result{}, fmt.Errorf("notes_read: %w", err)
	}
	notes, _, err := ReadNotes(ctx, n.kv, n.names, ref)
	if err != nil {
		return Result{}, err
	}
	if notes.Text == "" {
		return Result{Content: "[no notes yet]"}, nil
	}
	return Result{Content: notes.Text}, nil
}

type notesWrite struct {
	kv    NotesStore
	names streams.Names
}

func (n *notesWrite) Spec() Spec {
	return Spec{
		Name: "notes_write",
		Description: fmt.Sprintf("Write your notes for this session: facts, decisions and open questions you want to keep "+
			"whatever happens to the conversation (old turns are summarised or hidden as the session grows; the notes stay, "+
			"and are shown to you at the start of every turn). At most %d bytes in all: condense rather than accumulate.", MaxNotesBytes),
		Schema: json.RawMessage(notesWriteSchema),
		// A replay of the last write is recognised by its call id.
		ReplaySafe: true,
		State:      Resource,
	}
}

func (n *notesWrite) Call(ctx context.Context, call Call) (Result, error) {
	var args struct {
		Text string `json:"text"`
		Mode string `json:"mode"`
	}
	if err := json.Unmarshal(call.Args, &args); err != nil {
		return Result{}, fmt.Errorf("notes_write: arguments: %w", err)
	}
	if n.kv == nil {
		return errResult("notes_write: no notes store is configured"), nil
	}
	if !utf8.ValidString(args.Text) {
		return errResult("notes_write: text is not valid UTF-8"), nil
	}
	ref, err := streams.NewSessionRef(call.Agent, call.Session)
	if err != nil {
		return Result{}, fmt.Errorf("notes_write: %w", err)
	}
	key := n.names.NotesKey(ref)
	for attempt := 0; ; attempt++ {
		cur, rev, err := ReadNotes(ctx, n.kv, n.names, ref)
		if err != nil {
			return Result{}, err
		}
		if cur.Call == call.ID && call.ID != "" {
			return Result{Content: fmt.Sprintf("notes written (%d bytes)", len(cur.Text))}, nil
		}
		text := args.Text
		if args.Mode == "append" && cur.Text != "" {
			text = strings.TrimRight(cur.Text, "\n") + "\n" + args.Text
		}
		if len(text) > MaxNotesBytes {
			return errResult("notes_write: the notes would be %d bytes, max %d: condense them and write them whole (mode replace)", len(text), MaxNotesBytes), nil
		}
		b, err := json.Marshal(Notes{Text: text, Call: call.ID})
		if err != nil {
			return Result{}, fmt.Errorf("notes_write: encode: %w", err)
		}
		if rev == 0 {
			_, err = n.kv.Create(ctx, key, b)
		} else {
			_, err = n.kv.Update(ctx, key, b, rev)
		}
		if err == nil {
			return Result{Content: fmt.Sprintf("notes written (%d bytes)", len(text))}, nil
		}
		if (errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || isWrongLastSequence(err)) && attempt < 3 {
			continue
		}
		return Result{}, fmt.Errorf("notes_write: write notes of %s: %w", ref, err)
	}
}

// isWrongLastSequence reports a conditional write that lost its race.
func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
