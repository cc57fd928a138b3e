package projection

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"strings"
	"unicode/utf8"
)

// Bounds of an event's text.
const (
	// MaxText bounds the text one event puts into the context, in bytes.
	MaxText = 64 << 10
	// MaxProjected bounds the text of a projected or expressed payload:
	// the model reads the rest with read_event.
	MaxProjected = 16 << 10
)

// Event is the part of an input event its text is made of.
type Event struct {
	// Type, Source and Subject are the CloudEvents attributes.
	Type, Source, Subject string
	// Request marks a user's request: its text is the message itself.
	Request bool
	// ContentType and Data are the event's data as it came.
	ContentType string
	Data        []byte
	// Parsed is the data parsed as JSON (policies.ParseJSON), or nil.
	Parsed any
}

// Mode says which rendering Body chose.
type Mode string

// Renderings of an event's data.
const (
	// Full is the data as it came (payload: full, and events that are not
	// GitHub deliveries).
	Full Mode = "full"
	// Projected is the compact projection of a GitHub delivery.
	Projected Mode = "projected"
	// Expressed is the trigger's payload expression's value.
	Expressed Mode = "payload"
)

// Default returns the body of an event without a payload expression: the
// compact projection of a GitHub delivery, else the data as text.
func Default(ev Event) (string, Mode) {
	if !ev.Request {
		if p, ok := GitHub(ev.Type, ev.Parsed); ok {
			b, err := jsonText(p)
			if err == nil {
				return cut(b, MaxProjected), Projected
			}
		}
	}
	return DataText(ev.ContentType, ev.Data), Full
}

// Text renders an event for the model: a request's body as it is, any
// other event as its type, source and subject over its body; at most
// MaxText bytes. A projected body is followed by how to read the whole
// event when readEvent says the agent can (read_event with the event's
// JL_IN sequence).
func Text(ev Event, body string, mode Mode, seq uint64, readEvent bool) string {
	if ev.Request {
		return cut(body, MaxText)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Event %s from %s", ev.Type, ev.Source)
	if ev.Subject != "" {
		fmt.Fprintf(&b, " about %s", ev.Subject)
	}
	if body != "" {
		b.WriteString(":\n")
		b.WriteString(body)
	}
	if mode != Full && readEvent && seq > 0 {
		fmt.Fprintf(&b, "\n[this is a projection of the event (%d bytes of data); read_event {\"seq\": %d} reads all of it]", len(ev.Data), seq)
	}
	return cut(b.String(), MaxText)
}

// DataText is an event's data as text: a JSON object's "text" field when
// it has one (a request), else the data itself.
func DataText(contentType string, data []byte) string {
	mt, _, _ := mime.ParseMediaType(contentType)
	if mt == "application/json" || strings.HasSuffix(mt, "+json") || (mt == "" && json.Valid(data)) {
		var v struct {
			Text *string `json:"text"`
		}
		if json.Unmarshal(data, &v) == nil && v.Text != nil {
			return *v.Text
		}
	}
	if !utf8.Valid(data) {
		return fmt.Sprintf("[%d bytes of %s data]", len(data), contentType)
	}
	return string(data)
}

// Cut bounds s to n bytes on a rune boundary with a note of the rest.
func Cut(s string, n int) string { return cut(s, n) }

func jsonText(v any) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}
