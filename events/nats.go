package events

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/nats-io/nats.go"
)

// MaxEventSize bounds, in bytes, the data ToMsg writes and the message
// body FromMsg reads.
const MaxEventSize = 8 << 20

const (
	// headerPrefix prefixes every attribute header (binding §3.1.3.1).
	headerPrefix = "ce-"
	// contentTypeHeader marks structured mode and, in binary mode,
	// repeats datacontenttype for consumers that do not read ce-*.
	contentTypeHeader = "Content-Type"
	// structuredPrefix starts the content type of every CloudEvents event
	// format; on a message it means structured mode (binding §3).
	structuredPrefix = "application/cloudevents"
)

// MsgID returns the Nats-Msg-Id that ToMsg sets on the message for e: the
// first 32 hex digits of the SHA-256 of source, a NUL byte, and id. Source
// and id identify an event (the spec requires the pair to be unique), so
// JetStream's duplicate window drops a redelivery of the same event
// whatever its other attributes; hashing keeps the header short and free of
// characters that need encoding.
func MsgID(e event.Event) string {
	return hashID(nil, e.Source(), e.ID())
}

// SubjectMsgID is the Nats-Msg-Id of e published on subject: the first 32
// hex digits of the SHA-256 of subject, source and id, NUL-separated.
// JetStream deduplicates per stream, not per subject, so the subject is
// part of the key: the same event admitted for two sessions is two
// messages, while a redelivery to the same session is one.
func SubjectMsgID(subject string, e event.Event) string {
	return hashID([]string{subject}, e.Source(), e.ID())
}

// hashID is the first 32 hex digits of the SHA-256 of prefix's strings,
// source and id, each followed by a NUL but the last. The input is
// hashed from one buffer on the stack where it fits, and only the
// returned string is allocated.
func hashID(prefix []string, source, id string) string {
	var buf [512]byte
	b := buf[:0]
	for _, p := range prefix {
		b = append(b, p...)
		b = append(b, 0)
	}
	b = append(b, source...)
	b = append(b, 0)
	b = append(b, id...)
	sum := sha256.Sum256(b)
	var digits [32]byte
	hex.Encode(digits[:], sum[:16])
	return string(digits[:])
}

// ToMsg renders e as a binary-mode message on subject, following the
// CloudEvents NATS protocol binding: each attribute, extensions included,
// becomes a header named "ce-" plus the attribute name whose value is the
// attribute's canonical string form, percent-encoded; the data is the body.
// The datacontenttype is also written as Content-Type, unless it is itself
// a CloudEvents format (which would mark the message as structured) or not
// plain ASCII. Nats-Msg-Id is set to SubjectMsgID(subject, e).
//
// It fails with ErrInvalidSubject for a subject that cannot be published
// to, and with an error wrapping ErrInvalidEvent, usually an
// *AttributeError, where e would not come back from FromMsg as the same
// event: e fails e.Validate(), its specversion is not 1.0, a string holds
// invalid UTF-8, control characters or noncharacters, an extension name is
// not lower-case letters and digits, an encoded value is longer than
// MaxHeaderValueLen, or the data is larger than MaxEventSize (these two
// also wrap ErrTooLarge). The message shares no memory with e.
func ToMsg(subject string, e event.Event) (*nats.Msg, error) {
	if err := checkSubject(subject); err != nil {
		return nil, err
	}
	var buf [maxStackAttrs]attr
	attrs, err := checkedAttributes(e, buf[:])
	if err != nil {
		return nil, fmt.Errorf("to message on %s: %w", quote(subject), err)
	}
	// Room for every attribute, Content-Type, Nats-Msg-Id and a header a
	// caller adds: the map is made once, not grown.
	// The values of all headers share one array, each a slice of one
	// whose capacity ends at its value, so an Add to one header copies it
	// rather than writing over the next.
	m := &nats.Msg{Subject: subject, Header: make(nats.Header, len(attrs)+3)}
	values := make([]string, 0, len(attrs)+2)
	set := func(key, v string) {
		i := len(values)
		values = append(values, v)
		m.Header[key] = values[i : i+1 : i+1]
	}
	for _, a := range attrs {
		set(headerKey(a.name), a.header)
	}
	if ct := e.DataContentType(); ct != "" && !isStructured(ct) && plainHeaderValue(ct) {
		set(contentTypeHeader, ct)
	}
	// SubjectMsgID(subject, e), of the id and source read already.
	set(nats.MsgIdHdr, hashID([]string{subject}, attrs[2].value, attrs[1].value))
	m.Data = bytes.Clone(e.DataEncoded)
	return m, nil
}

// headerKey is the header of attribute name, headerPrefix and the name:
// those of the attributes every event has, and of the extensions the
// runtime stamps, without building the string again.
func headerKey(name string) string {
	switch name {
	case "specversion":
		return "ce-specversion"
	case "id":
		return "ce-id"
	case "source":
		return "ce-source"
	case "type":
		return "ce-type"
	case "datacontenttype":
		return "ce-datacontenttype"
	case "subject":
		return "ce-subject"
	case "time":
		return "ce-time"
	case ExtAgent:
		return "ce-" + ExtAgent
	case ExtSession:
		return "ce-" + ExtSession
	case "jltrigger":
		return "ce-jltrigger"
	case "traceparent":
		return "ce-traceparent"
	}
	return headerPrefix + name
}

// CheckMsg reports what ToMsg would: nil when e can be rendered as a
// message on subject, else ToMsg's error. It builds no message: for a
// check made before the message is (admission's, once per session).
func CheckMsg(subject string, e event.Event) error {
	if err := checkSubject(subject); err != nil {
		return err
	}
	var buf [maxStackAttrs]attr
	if _, err := checkedAttributes(e, buf[:]); err != nil {
		return fmt.Errorf("to message on %s: %w", quote(subject), err)
	}
	return nil
}

// ToMsgSharing is ToMsg with e's data as the message's body, not a copy
// of it: for a caller that writes neither while the message is in use
// (a publish of a webhook's tens of kilobytes, once per session).
func ToMsgSharing(subject string, e event.Event) (*nats.Msg, error) {
	data := e.DataEncoded
	if n := len(data); n > MaxEventSize {
		return nil, fmt.Errorf("to message on %s: %w: %w: data is %d bytes, max %d", quote(subject), ErrInvalidEvent, ErrTooLarge, n, MaxEventSize)
	}
	e.DataEncoded = nil
	m, err := ToMsg(subject, e)
	if err != nil {
		return nil, err
	}
	m.Data = data
	return m, nil
}

// FromMsg reads the CloudEvent carried by m.
//
// A Content-Type header starting with "application/cloudevents" (in any
// case) marks structured mode: the body is the JSON event format, and any
// ce- headers are ignored. Of the structured formats only JSON
// ("application/cloudevents" or "application/cloudevents+json") is
// supported; batch mode is an error. Anything else is binary mode: the attributes are the "ce-" headers (names in any
// case), each value first unquoted per RFC 7230 and then percent-decoded
// once, lower-case hex and needless escapes accepted; any header that is
// not a context attribute is an extension. datacontenttype comes from
// ce-datacontenttype, else from Content-Type. The body is the data, byte
// for byte.
//
// Both modes give the same event for the same content: extension values
// are their canonical strings, as binary mode carries no types; an empty
// optional attribute is absent, as in sdk-go's JSON decoding; and
// DataBase64 is set only when the data could not be written as a JSON
// value (for a JSON media type) or string (otherwise). Every event FromMsg
// returns is one ToMsg accepts.
//
// Errors wrap ErrInvalidEvent and, where an attribute is at fault, are an
// *AttributeError naming it: a missing id, source or type, a specversion
// other than "1.0", a value that does not decode to a valid string, an
// extension name that is not lower-case letters and digits, a header given
// twice. A body over MaxEventSize or a header value over MaxHeaderValueLen
// also wraps ErrTooLarge.
func FromMsg(m *nats.Msg) (event.Event, error) {
	if m == nil {
		return event.Event{}, fmt.Errorf("%w: nil message", ErrInvalidEvent)
	}
	e, err := fromMsg(m)
	if err != nil {
		return event.Event{}, fmt.Errorf("from message on %s: %w", quote(m.Subject), err)
	}
	return e, nil
}

func fromMsg(m *nats.Msg) (event.Event, error) {
	if n := len(m.Data); n > MaxEventSize {
		return event.Event{}, fmt.Errorf("%w: %w: body is %d bytes, max %d", ErrInvalidEvent, ErrTooLarge, n, MaxEventSize)
	}
	ct, ctKey, err := contentType(m.Header)
	if err != nil {
		return event.Event{}, err
	}
	var e event.Event
	switch {
	case isStructured(ct):
		e, err = fromStructured(ct, m.Data)
	case ct == "" && !hasCEHeaders(m.Header) && looksStructured(m.Data):
		// A structured event sent without a Content-Type (older producers,
		// `nats pub` with a JSON body): read it as sdk-go's reader does.
		e, err = fromStructured(structuredPrefix+"+json", m.Data)
	default:
		e, err = fromBinary(m, ct, ctKey)
	}
	if err != nil {
		return event.Event{}, err
	}
	if err := normalise(&e); err != nil {
		return event.Event{}, err
	}
	var buf [maxStackAttrs]attr
	if _, err := checkedAttributes(e, buf[:]); err != nil {
		return event.Event{}, err
	}
	return e, nil
}

// contentType returns the message's Content-Type, found in any case, and
// the header key it was under.
func contentType(h nats.Header) (value, key string, err error) {
	for _, k := range slices.Sorted(maps.Keys(h)) {
		if !strings.EqualFold(k, contentTypeHeader) || len(h[k]) == 0 {
			continue
		}
		if key != "" {
			return "", "", fmt.Errorf("%w: header %q given twice, as %q and %q", ErrInvalidEvent, contentTypeHeader, key, k)
		}
		if len(h[k]) > 1 {
			return "", "", fmt.Errorf("%w: header %q has %d values", ErrInvalidEvent, k, len(h[k]))
		}
		key, value = k, h[k][0]
		if len(value) > MaxHeaderValueLen {
			return "", "", fmt.Errorf("%w: %w: header %q is %d bytes, max %d", ErrInvalidEvent, ErrTooLarge, k, len(value), MaxHeaderValueLen)
		}
	}
	return strings.TrimSpace(value), key, nil
}

// isStructured reports whether content type ct names a CloudEvents event
// format, which marks a structured-mode message.
func isStructured(ct string) bool {
	return len(ct) >= len(structuredPrefix) && strings.EqualFold(ct[:len(structuredPrefix)], structuredPrefix)
}

func fromStructured(ct string, body []byte) (event.Event, error) {
	mt, _, _ := strings.Cut(ct, ";")
	switch strings.ToLower(strings.TrimSpace(mt)) {
	case structuredPrefix, event.ApplicationCloudEventsJSON:
	default:
		return event.Event{}, fmt.Errorf("%w: structured mode with content type %s: only the JSON event format is supported", ErrInvalidEvent, quote(ct))
	}
	var e event.Event
	if err := json.Unmarshal(body, &e); err != nil {
		var ve event.ValidationError
		if errors.As(err, &ve) {
			return event.Event{}, validationError(err)
		}
		return event.Event{}, fmt.Errorf("%w: structured mode: %w", ErrInvalidEvent, err)
	}
	return e, nil
}

// Attribute reads one attribute of a binary-mode message from its
// headers alone, without decoding the event: for a worker that must tell
// what a delivery asks of it (its trigger's on_busy, say) before it reads
// the event. ok is false when the header is absent, given twice or does
// not decode.
func Attribute(h nats.Header, name string) (value string, ok bool) {
	found := false
	for key, values := range h {
		if len(key) != len(headerPrefix)+len(name) || !strings.EqualFold(key[:len(headerPrefix)], headerPrefix) ||
			!strings.EqualFold(key[len(headerPrefix):], name) || len(values) == 0 {
			continue
		}
		if found || len(values) > 1 || len(values[0]) > MaxHeaderValueLen {
			return "", false
		}
		v, err := decodeHeaderValue(values[0])
		if err != nil {
			return "", false
		}
		value, found = v, true
	}
	return value, found
}

func fromBinary(m *nats.Msg, ct, ctKey string) (event.Event, error) {
	ec := &event.EventContextV1{}
	var specversion string
	seen := make(map[string]string) // attribute name -> header key
	for _, key := range slices.Sorted(maps.Keys(m.Header)) {
		values := m.Header[key]
		if len(key) < len(headerPrefix) || !strings.EqualFold(key[:len(headerPrefix)], headerPrefix) || len(values) == 0 {
			continue
		}
		name := strings.ToLower(key[len(headerPrefix):])
		if prev, ok := seen[name]; ok {
			return event.Event{}, &AttributeError{Attribute: name, Header: key, Err: fmt.Errorf("given twice, also as header %q", prev)}
		}
		seen[name] = key
		if len(values) > 1 {
			return event.Event{}, &AttributeError{Attribute: name, Header: key, Err: fmt.Errorf("%d values", len(values))}
		}
		if len(values[0]) > MaxHeaderValueLen {
			return event.Event{}, &AttributeError{Attribute: name, Header: key, Err: fmt.Errorf("%w: %d bytes, max %d", ErrTooLarge, len(values[0]), MaxHeaderValueLen)}
		}
		v, err := decodeHeaderValue(values[0])
		if err != nil {
			return event.Event{}, &AttributeError{Attribute: name, Header: key, Err: fmt.Errorf("value %s: %w", quote(values[0]), err)}
		}
		if err := setAttribute(ec, name, v); err != nil {
			return event.Event{}, &AttributeError{Attribute: name, Header: key, Err: err}
		}
		if name == "specversion" {
			specversion = v
		}
	}
	switch {
	case seen["specversion"] == "":
		return event.Event{}, &AttributeError{Attribute: "specversion", Err: errMissing}
	case specversion != event.CloudEventsVersionV1:
		return event.Event{}, &AttributeError{Attribute: "specversion", Header: seen["specversion"], Err: fmt.Errorf("%s is not %q", quote(specversion), event.CloudEventsVersionV1)}
	}
	for _, name := range []string{"id", "source", "type"} {
		if seen[name] == "" {
			return event.Event{}, &AttributeError{Attribute: name, Err: errMissing}
		}
	}
	if ec.DataContentType == nil && ct != "" {
		if err := setAttribute(ec, "datacontenttype", ct); err != nil {
			return event.Event{}, &AttributeError{Attribute: "datacontenttype", Header: ctKey, Err: err}
		}
	}
	e := event.Event{Context: ec}
	if len(m.Data) > 0 {
		e.DataEncoded = bytes.Clone(m.Data)
	}
	return e, nil
}

// setAttribute sets the attribute name, decoded from a header, on ec. An
// empty optional attribute is left absent, as sdk-go's JSON decoding does.
func setAttribute(ec *event.EventContextV1, name, v string) error {
	switch name {
	case "specversion":
		// Checked by the caller once every header is read.
	case "id":
		ec.ID = v
	case "type":
		ec.Type = v
	case "source":
		u, err := url.Parse(v)
		if err != nil {
			return err
		}
		ec.Source = types.URIRef{URL: *u}
	case "subject":
		if v != "" {
			ec.Subject = &v
		}
	case "datacontenttype":
		if v != "" {
			ec.DataContentType = &v
		}
	case "dataschema":
		if v != "" {
			u, err := url.Parse(v)
			if err != nil {
				return err
			}
			ec.DataSchema = &types.URI{URL: *u}
		}
	case "time":
		if v != "" {
			t, err := types.ParseTime(v)
			if err != nil {
				return err
			}
			ec.Time = &types.Timestamp{Time: t}
		}
	default:
		if err := checkExtensionName(name); err != nil {
			return err
		}
		if ec.Extensions == nil {
			ec.Extensions = make(map[string]any)
		}
		ec.Extensions[name] = v
	}
	return nil
}

// checkSubject accepts a subject that can be published to: non-empty
// tokens separated by '.', no wildcards, no whitespace or control bytes.
func checkSubject(subject string) error {
	if subject == "" {
		return fmt.Errorf("%w: empty", ErrInvalidSubject)
	}
	for tok := range strings.SplitSeq(subject, ".") {
		if tok == "" || tok == "*" || tok == ">" {
			return fmt.Errorf("%w: %s: empty or wildcard token", ErrInvalidSubject, quote(subject))
		}
	}
	for i := 0; i < len(subject); i++ {
		if c := subject[i]; c <= ' ' || c == 0x7f {
			return fmt.Errorf("%w: %s: whitespace or control byte at %d", ErrInvalidSubject, quote(subject), i)
		}
	}
	return nil
}

// plainHeaderValue reports whether v can be written as a header value
// without encoding: printable ASCII and spaces, with nothing to trim.
func plainHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return strings.TrimSpace(v) == v
}

// hasCEHeaders reports whether h has any ce- header.
func hasCEHeaders(h nats.Header) bool {
	for k := range h {
		if len(k) >= len(headerPrefix) && strings.EqualFold(k[:len(headerPrefix)], headerPrefix) {
			return true
		}
	}
	return false
}

// looksStructured reports whether body is a JSON object with a specversion
// member: a structured-mode event.
func looksStructured(body []byte) bool {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return false
	}
	var probe struct {
		SpecVersion *json.RawMessage `json:"specversion"`
	}
	return json.Unmarshal(body, &probe) == nil && probe.SpecVersion != nil
}
