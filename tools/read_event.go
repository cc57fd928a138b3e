package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/streams"
)

// EventStore reads admitted events by their JL_IN sequence: Events
// makes one of the JL_IN stream.
type EventStore interface {
	// Event returns the event at seq, jetstream.ErrMsgNotFound when
	// there is none.
	Event(ctx context.Context, seq uint64) (*jetstream.RawStreamMsg, error)
}

// Events is the EventStore of stream in (JL_IN), read through js with
// streams.GetMsg: an event whose sender set the headers a direct get
// adds, or a Status header, is read as the event stored where it is,
// not as what those headers say (another session's subject, another
// sequence, no message at all).
func Events(js jetstream.JetStream, in jetstream.Stream) EventStore {
	return streamEvents{js: js, in: in}
}

// streamEvents reads the events of one stream.
type streamEvents struct {
	js jetstream.JetStream
	in jetstream.Stream
}

func (s streamEvents) Event(ctx context.Context, seq uint64) (*jetstream.RawStreamMsg, error) {
	return streams.GetMsg(ctx, s.js, s.in, seq, "")
}

const readEventSchema = `{
	"type": "object",
	"properties": {
		"seq":    {"type": "integer", "minimum": 1, "maximum": 18446744073709551615, "description": "The event's sequence, as its projection names it."},
		"path":   {"type": "string", "maxLength": 512, "description": "Dotted path of the part of the event's data to read, e.g. pull_request.body or commits.0.message (default: all of it)."},
		"offset": {"type": "integer", "minimum": 0, "maximum": 1099511627776, "description": "Byte offset to start at (default 0)."},
		"limit":  {"type": "integer", "minimum": 1, "maximum": 1048576, "description": "Bytes to read (default and maximum: the page size)."}
	},
	"required": ["seq"],
	"additionalProperties": false
}`

// readEvent reads an input event of the calling session whole, or the
// part of its data a path names, one page at a time: what the model saw
// of it was a projection. A session reads only its own events, and a
// fork those of the sessions it was forked from; never a delegate event,
// whose task an agent that does not read it must not see.
type readEvent struct {
	events EventStore
	names  streams.Names
	limit  int
	// horizon is how many consumed events a session keeps (0: unknown).
	horizon int
}

func (r *readEvent) Spec() Spec {
	return Spec{
		Name: "read_event",
		Description: "Read an event this session received, whole or the part a path names: the conversation shows a " +
			fmt.Sprintf("compact projection of each event. Returns at most %d bytes from offset, and says where the next part starts.", r.limit),
		Schema:     json.RawMessage(readEventSchema),
		ReplaySafe: true,
		State:      Stateless,
	}
}

func (r *readEvent) Call(ctx context.Context, call Call) (Result, error) {
	var raw struct {
		Seq    json.Number `json:"seq"`
		Path   string      `json:"path"`
		Offset float64     `json:"offset"`
		Limit  float64     `json:"limit"`
	}
	if err := json.Unmarshal(call.Args, &raw); err != nil {
		return Result{}, fmt.Errorf("read_event: arguments: %w", err)
	}
	seq, err := strconv.ParseUint(raw.Seq.String(), 10, 64)
	if err != nil {
		return errResult("read_event: seq %s is not a sequence", raw.Seq), nil
	}
	if r.events == nil {
		return errResult("read_event: no event store is configured"), nil
	}
	ref, err := streams.NewSessionRef(call.Agent, call.Session)
	if err != nil {
		return Result{}, fmt.Errorf("read_event: %w", err)
	}
	m, err := r.events.Event(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		if r.horizon > 0 {
			return errResult("read_event: no event %d is kept: a session keeps the newest %d of the events it consumed (the read_event horizon), and older ones are removed; what the conversation shows of an older one is what remains of it", seq, r.horizon), nil
		}
		return errResult("read_event: no event %d is kept: a session keeps only its newest consumed events (the read_event horizon); what the conversation shows of an older one is what remains of it", seq), nil
	}
	if err != nil {
		return Result{}, fmt.Errorf("read_event: get %d: %w", seq, err)
	}
	if m.Subject != r.names.In(ref) && !r.forkedFrom(ctx, call, m.Subject) {
		return errResult("read_event: event %d is not an event of this session", seq), nil
	}
	ev, err := events.FromMsg(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
	if err != nil {
		return errResult("read_event: event %d does not parse: %v", seq, err), nil
	}
	if ev.Type() == events.TypeDelegate {
		// Its data holds the delegating session's task and the chain above
		// it: what the agent reads of it (its reads:) is in its context
		// already, a large input as a blob for read_blob.
		return errResult("read_event: event %d is the delegation that started this session: its task and inputs, as far as this agent reads them, are in the context (a large input as a blob: read it with read_blob)", seq), nil
	}
	content := string(ev.Data())
	what := "data"
	if raw.Path != "" {
		var data any
		dec := json.NewDecoder(bytes.NewReader(ev.Data()))
		dec.UseNumber()
		if err := dec.Decode(&data); err != nil {
			return errResult("read_event: the data of event %d is not JSON, so it has no path %q", seq, raw.Path), nil
		}
		v, err := selectPath(data, raw.Path)
		if err != nil {
			return errResult("read_event: event %d: %v", seq, err), nil
		}
		if s, ok := v.(string); ok {
			content = s
		} else {
			b, err := json.MarshalIndent(v, "", " ")
			if err != nil {
				return Result{}, fmt.Errorf("read_event: encode %q of %d: %w", raw.Path, seq, err)
			}
			content = string(b)
		}
		what = strconv.Quote(raw.Path)
	}
	offset, limit := int64(raw.Offset), int(raw.Limit)
	if limit == 0 || limit > r.limit {
		limit = r.limit
	}
	size := int64(len(content))
	if offset > size || (offset == size && size > 0) {
		return errResult("read_event: offset %d is past the end of %s of event %d (%d bytes)", offset, what, seq, size), nil
	}
	page := []byte(content[offset:min(size, offset+int64(limit))])
	if end := offset + int64(len(page)); end < size {
		page = trimPartialRune(page)
	}
	end := offset + int64(len(page))
	var b strings.Builder
	fmt.Fprintf(&b, "[event %d (%s, id %s) %s: bytes %d-%d of %d", seq, ev.Type(), ev.ID(), what, offset, end, size)
	if end < size {
		fmt.Fprintf(&b, "; next part at offset %d]\n", end)
	} else {
		b.WriteString("; end]\n")
	}
	b.Write(page)
	return Result{Content: b.String()}, nil
}

// forkedFrom reports whether subject is the input subject of a session
// the calling one was forked from (Call.MayRead): a fork's transcript
// holds that session's events, by their sequences.
func (r *readEvent) forkedFrom(ctx context.Context, call Call, subject string) bool {
	if call.MayRead == nil {
		return false
	}
	owner, err := r.names.ParseSession(subject)
	return err == nil && owner.Agent == call.Agent && r.names.In(owner) == subject && call.MayRead(ctx, owner.Session)
}

// selectPath walks a dotted path of object keys and list indexes.
func selectPath(v any, path string) (any, error) {
	done := ""
	for _, k := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			e, ok := x[k]
			if !ok {
				return nil, fmt.Errorf("%s has no field %q", orData(done), k)
			}
			v = e
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(x) {
				return nil, fmt.Errorf("%s is a list of %d: %q is not an index of it", orData(done), len(x), k)
			}
			v = x[i]
		default:
			return nil, fmt.Errorf("%s is not an object or a list", orData(done))
		}
		done = strings.TrimPrefix(done+"."+k, ".")
	}
	return v, nil
}

func orData(path string) string {
	if path == "" {
		return "the data"
	}
	return strconv.Quote(path)
}
