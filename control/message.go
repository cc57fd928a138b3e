package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/streams"
)

// Bounds of a control message. A message over any of them is refused
// before it is published, and when it is read.
const (
	// MaxText bounds Text, in bytes.
	MaxText = 32 << 10
	// MaxCallID bounds CallID, in bytes.
	MaxCallID = 256
	// MaxTurn bounds Turn.
	MaxTurn = 1_000_000
	// MaxData bounds the JSON data of a message, in bytes: room for the
	// largest text with every character escaped, and the other fields.
	MaxData = 6*MaxText + 4<<10
	// MaxID bounds the event id, in bytes.
	MaxID = 256
)

// Message is one control message: a verb and the fields it takes (see the
// package documentation for which), and the CloudEvent envelope.
type Message struct {
	Verb Verb
	// Text is the steer or resume text, or the reason or note of the
	// other verbs.
	Text string
	// CallID names the tool call an approve or deny answers.
	CallID string
	// Turn is the last turn a fork copies; 0 copies only what came before
	// the first model call.
	Turn int
	// As names the session a fork creates, of the same agent: a name an
	// event can carry (valid UTF-8 without control characters).
	As string

	// ID is the event id. JetStream drops a second message with the same
	// ID and Source on the same session inside JL_CTL's duplicate window,
	// so a sender that retries with one ID is applied once. Empty: Publish
	// picks a new one.
	ID string
	// Source names the sender as a URI reference, such as /jetloop/cli or
	// /chat/slack/T0123. Empty: Publish uses DefaultSource.
	Source string
	// Time is when the message was sent. Zero: Publish uses the clock.
	Time time.Time

	// Ref is the session the message is for; Parse sets it from the
	// subject.
	Ref streams.SessionRef
	// Seq is the message's sequence in JL_CTL when it was read from the
	// stream (ParseJS); 0 when not known.
	Seq uint64
}

// DefaultSource is the Source of a message published without one.
const DefaultSource = "/jetloop"

// Validate reports the first field of m that its verb cannot take: an
// unknown verb, steer without text, approve or deny without a call id,
// fork without a session to create or as a name no event can carry, a
// field the verb does not use, or a value out of bounds.
func (m Message) Validate() error {
	if _, err := ParseVerb(string(m.Verb)); err != nil {
		return err
	}
	if err := checkText(m.Verb, m.Text); err != nil {
		return err
	}
	if m.Verb.takesCallID() {
		if m.CallID == "" {
			return fmt.Errorf("%w: %s needs call_id, the id of the tool call it answers", ErrInvalid, m.Verb)
		}
		if err := checkCallID(m.CallID); err != nil {
			return err
		}
	} else if m.CallID != "" {
		return fmt.Errorf("%w: %s does not take call_id (only approve and deny do)", ErrInvalid, m.Verb)
	}
	if m.Verb == Fork {
		if m.Turn < 0 || m.Turn > MaxTurn {
			return fmt.Errorf("%w: fork turn %d: want 0 to %d", ErrInvalid, m.Turn, MaxTurn)
		}
		if m.As == "" {
			return fmt.Errorf("%w: fork needs as, the name of the session to create", ErrInvalid)
		}
		if _, err := events.EncodeToken(m.As); err != nil {
			return fmt.Errorf("%w: fork as %q: %w", ErrInvalid, clip(m.As), err)
		}
		// The new session is started with a resume that names it: a name
		// no event can carry (a control character) is no session to make.
		if err := events.CheckString(m.As); err != nil {
			return fmt.Errorf("%w: fork as %q: session name: %w", ErrInvalid, clip(m.As), err)
		}
	} else {
		if m.Turn != 0 {
			return fmt.Errorf("%w: %s does not take turn (only fork does)", ErrInvalid, m.Verb)
		}
		if m.As != "" {
			return fmt.Errorf("%w: %s does not take as (only fork does)", ErrInvalid, m.Verb)
		}
	}
	if len(m.ID) > MaxID || strings.ContainsFunc(m.ID, notPrintable) {
		return fmt.Errorf("%w: id %q: at most %d printable characters", ErrInvalid, clip(m.ID), MaxID)
	}
	return nil
}

// validateFor validates m as a message for session ref.
func (m Message) validateFor(ref streams.SessionRef) error {
	if err := m.Validate(); err != nil {
		return err
	}
	if m.Verb == Fork && m.As == ref.Session {
		return fmt.Errorf("%w: fork as %q: that is the session being forked", ErrInvalid, clip(m.As))
	}
	return nil
}

func checkText(v Verb, text string) error {
	if len(text) > MaxText {
		return fmt.Errorf("%w: %s text is %d bytes, max %d", ErrInvalid, v, len(text), MaxText)
	}
	if !utf8.ValidString(text) {
		return fmt.Errorf("%w: %s text is not valid UTF-8", ErrInvalid, v)
	}
	if strings.ContainsRune(text, 0) {
		return fmt.Errorf("%w: %s text contains a NUL character", ErrInvalid, v)
	}
	if v.needsText() && strings.TrimSpace(text) == "" {
		return fmt.Errorf("%w: %s needs text, what to tell the model", ErrInvalid, v)
	}
	return nil
}

func checkCallID(id string) error {
	if len(id) > MaxCallID {
		return fmt.Errorf("%w: call_id is %d bytes, max %d", ErrInvalid, len(id), MaxCallID)
	}
	if !utf8.ValidString(id) || strings.ContainsFunc(id, func(r rune) bool { return notPrintable(r) || unicode.IsSpace(r) }) {
		return fmt.Errorf("%w: call_id %q: want printable characters without spaces", ErrInvalid, clip(id))
	}
	return nil
}

func notPrintable(r rune) bool { return r == utf8.RuneError || !unicode.IsPrint(r) && r != ' ' }

// data is the JSON body of a control message. Turn is a pointer so that a
// fork without a turn is told apart from a fork at turn 0.
type data struct {
	Text   string `json:"text,omitempty"`
	CallID string `json:"call_id,omitempty"`
	Turn   *int   `json:"turn,omitempty"`
	As     string `json:"as,omitempty"`
}

// encodeData renders the fields m's verb uses; Validate has passed.
func encodeData(m Message) ([]byte, error) {
	d := data{Text: m.Text, CallID: m.CallID, As: m.As}
	if m.Verb == Fork {
		d.Turn = &m.Turn
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		return nil, fmt.Errorf("control: encode %s data: %w", m.Verb, err)
	}
	out := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	if len(out) > MaxData {
		return nil, fmt.Errorf("%w: %s data is %d bytes, max %d", ErrInvalid, m.Verb, len(out), MaxData)
	}
	return out, nil
}

// decodeData reads the data of a message with verb v into m, strictly:
// one JSON object, no unknown fields, a turn exactly when the verb is
// fork. Empty data is an empty object.
func decodeData(v Verb, b []byte, m *Message) error {
	if len(b) > MaxData {
		return fmt.Errorf("%w: %s data is %d bytes, max %d", ErrInvalid, v, len(b), MaxData)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		b = []byte("{}")
	}
	if b[0] != '{' {
		return fmt.Errorf(`%w: %s data must be a JSON object such as {"text": "..."}`, ErrInvalid, v)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var d data
	if err := dec.Decode(&d); err != nil {
		return fmt.Errorf("%w: %s data: %w", ErrInvalid, v, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %s data: more than one JSON value", ErrInvalid, v)
	}
	switch {
	case v == Fork && d.Turn == nil:
		return fmt.Errorf("%w: fork needs turn, the last turn to copy", ErrInvalid)
	case v != Fork && d.Turn != nil:
		return fmt.Errorf("%w: %s does not take turn (only fork does)", ErrInvalid, v)
	}
	m.Text, m.CallID, m.As = d.Text, d.CallID, d.As
	if d.Turn != nil {
		m.Turn = *d.Turn
	}
	return nil
}

// clip shortens s for an error message.
func clip(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	for i := n; i > n-4; i-- {
		if utf8.RuneStart(s[i]) {
			return s[:i] + "…"
		}
	}
	return s[:n] + "…"
}
