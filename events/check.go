package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
)

// maxStackAttrs is how many attributes the callers of checkedAttributes
// hold on their stacks: the eight of the spec and the extensions an
// admitted event carries, with room to spare.
const maxStackAttrs = 24

// attr is one attribute in its canonical string form.
type attr struct {
	name   string
	value  string
	header string // value percent-encoded for a header
}

// checkedAttributes validates e as an event that ToMsg can write and
// FromMsg can read back unchanged, and returns every attribute it carries
// as its canonical string form: the required attributes first, in spec
// order, then the optional ones, then the extensions sorted by name.
//
// Beyond e.Validate() it enforces what the CloudEvents type system and the
// binding ask of every value and what this package bounds: specversion
// 1.0, strings free of control characters and noncharacters, extension
// names of lower-case letters and digits that do not shadow a reserved
// name, header values and data within MaxHeaderValueLen and MaxEventSize.
//
// The attributes are appended to buf[:0], which a caller holds on its
// stack where they fit (maxStackAttrs).
func checkedAttributes(e event.Event, buf []attr) ([]attr, error) {
	if e.Context == nil {
		return nil, &AttributeError{Attribute: "specversion", Err: errMissing}
	}
	if sv := e.SpecVersion(); sv != event.CloudEventsVersionV1 {
		return nil, &AttributeError{Attribute: "specversion", Err: fmt.Errorf("%q is not %q", sv, event.CloudEventsVersionV1)}
	}
	// Read, never written: the event's own context where it is one of
	// 1.0, not the copy AsV1 makes of it.
	ec, ok := e.Context.(*event.EventContextV1)
	if !ok {
		ec = e.Context.AsV1()
	}
	source := ec.Source.String()
	for _, a := range [...]attr{{name: "id", value: ec.ID}, {name: "source", value: source}, {name: "type", value: ec.Type}} {
		if a.value == "" {
			return nil, &AttributeError{Attribute: a.name, Err: errMissing}
		}
	}
	// What e.Validate() checks, read from ec and the source already
	// formatted: Validate builds two maps, formats the source again and
	// parses the media type, and this runs several times per event. Where
	// the check is not sure, Validate answers, with its own error.
	if !validV1(e, ec, source) {
		if err := e.Validate(); err != nil {
			return nil, validationError(err)
		}
	}
	if n := len(e.DataEncoded); n > MaxEventSize {
		return nil, fmt.Errorf("%w: %w: data is %d bytes, max %d", ErrInvalidEvent, ErrTooLarge, n, MaxEventSize)
	}

	attrs := buf[:0]
	if n := 8 + len(ec.Extensions); cap(attrs) < n {
		attrs = make([]attr, 0, n)
	}
	attrs = append(attrs,
		attr{name: "specversion", value: event.CloudEventsVersionV1},
		attr{name: "id", value: ec.ID},
		attr{name: "source", value: source},
		attr{name: "type", value: ec.Type},
	)
	if ec.DataContentType != nil {
		attrs = append(attrs, attr{name: "datacontenttype", value: *ec.DataContentType})
	}
	if ec.DataSchema != nil {
		attrs = append(attrs, attr{name: "dataschema", value: ec.DataSchema.String()})
	}
	if ec.Subject != nil {
		attrs = append(attrs, attr{name: "subject", value: *ec.Subject})
	}
	if ec.Time != nil {
		attrs = append(attrs, attr{name: "time", value: types.FormatTime(ec.Time.Time)})
	}
	// The names are sorted in an array on the stack where they fit.
	var nameBuf [16]string
	names := nameBuf[:0]
	for name := range ec.Extensions {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := checkExtensionName(name); err != nil {
			return nil, &AttributeError{Attribute: name, Err: err}
		}
		v, err := types.Format(ec.Extensions[name])
		if err != nil {
			return nil, &AttributeError{Attribute: name, Err: err}
		}
		attrs = append(attrs, attr{name: name, value: v})
	}
	for i, a := range attrs {
		if err := checkString(a.value); err != nil {
			return nil, &AttributeError{Attribute: a.name, Err: err}
		}
		attrs[i].header = encodeHeaderValue(a.value)
		if n := len(attrs[i].header); n > MaxHeaderValueLen {
			return nil, &AttributeError{Attribute: a.name, Err: fmt.Errorf("%w: %d bytes as a header value, max %d", ErrTooLarge, n, MaxHeaderValueLen)}
		}
	}
	return attrs, nil
}

// validV1 reports whether e.Validate() would return nil, for e whose
// context ec is its own *event.EventContextV1 and source ec.Source's
// string, without Validate's allocations. It answers false, so that
// Validate is called and decides, for any event it is not sure of: a
// context of another version, field errors set, a media type other than
// the few the runtime writes, a dataschema.
func validV1(e event.Event, ec *event.EventContextV1, source string) bool {
	if e.Context != event.EventContext(ec) || e.FieldErrors != nil || ec.DataSchema != nil {
		return false
	}
	if blank(ec.ID) || blank(source) || blank(ec.Type) {
		return false
	}
	if ec.Subject != nil && blank(*ec.Subject) {
		return false
	}
	if ec.DataContentType != nil {
		switch *ec.DataContentType {
		case event.ApplicationJSON, event.TextPlain, event.TextJSON:
			// Media types mime.ParseMediaType accepts.
		default:
			return false
		}
	}
	return true
}

// blank reports whether strings.TrimSpace(s) is empty, as Validate asks
// of the required attributes and the subject.
func blank(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\n', '\v', '\f', '\r':
			continue
		}
		if s[i] < utf8.RuneSelf {
			return false
		}
		// Beyond ASCII, TrimSpace's notion of space (U+0085, U+00A0 and
		// more) decides.
		return strings.TrimSpace(s[i:]) == ""
	}
	return true
}

// validationError turns sdk-go's ValidationError, a map from attribute to
// problem, into an AttributeError for the first attribute in name order
// that mentions the others, so the message stays on one line.
func validationError(err error) error {
	var ve event.ValidationError
	if !errors.As(err, &ve) || len(ve) == 0 {
		return fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	names := slices.Sorted(maps.Keys(ve))
	first := &AttributeError{Attribute: names[0], Err: ve[names[0]]}
	if len(names) == 1 {
		return first
	}
	var more strings.Builder
	for _, name := range names[1:] {
		fmt.Fprintf(&more, "; attribute %q: %v", name, ve[name])
	}
	return fmt.Errorf("%w%s", first, more.String())
}

// reservedNames cannot be extensions: the context attributes of 1.0, and
// the members the JSON format reserves for data.
var reservedNames = map[string]bool{
	"specversion": true, "id": true, "source": true, "type": true,
	"datacontenttype": true, "dataschema": true, "subject": true, "time": true,
	"data": true, "data_base64": true,
}

// checkExtensionName enforces the spec's rule for attribute names:
// lower-case ASCII letters and digits only.
func checkExtensionName(name string) error {
	if name == "" {
		return errors.New("empty extension name")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if ('a' > c || c > 'z') && ('0' > c || c > '9') {
			return fmt.Errorf("extension name %s: only lower-case letters and digits are allowed", quote(name))
		}
	}
	if reservedNames[name] {
		return fmt.Errorf("extension name %q is reserved", name)
	}
	return nil
}

// CheckString reports why s cannot be a CloudEvents String (an attribute
// such as subject, or an extension such as jlsession): invalid UTF-8, a
// control character or a noncharacter, with the byte where it is. A name
// that fails it cannot be carried by any event.
func CheckString(s string) error { return checkString(s) }

// checkString enforces the CloudEvents type system's String: valid UTF-8
// without the control characters U+0000–U+001F and U+007F–U+009F and
// without Unicode noncharacters. Surrogates cannot occur in valid UTF-8.
func checkString(s string) error {
	for i, r := range s {
		switch {
		case r == utf8.RuneError:
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return fmt.Errorf("invalid UTF-8 at byte %d", i)
			}
			// U+FFFD itself is allowed.
		case r <= 0x1f || 0x7f <= r && r <= 0x9f:
			return fmt.Errorf("control character %U at byte %d", r, i)
		case 0xfdd0 <= r && r <= 0xfdef || r&0xfffe == 0xfffe:
			return fmt.Errorf("noncharacter %U at byte %d", r, i)
		}
	}
	return nil
}

// normalise puts an event read from a message into the one form that both
// content modes produce: extensions as their canonical strings (binary
// mode cannot carry their types), no empty data, and DataBase64 set only
// where sdk-go's JSON encoding could not carry the bytes as they are
// (invalid JSON for a JSON media type, invalid UTF-8 for any other).
func normalise(e *event.Event) error {
	if ec, ok := e.Context.(*event.EventContextV1); ok && len(ec.Extensions) > 0 {
		for name, v := range ec.Extensions {
			s, err := types.Format(v)
			if err != nil {
				return &AttributeError{Attribute: name, Err: err}
			}
			ec.Extensions[name] = s
		}
	}
	if len(e.DataEncoded) == 0 {
		e.DataEncoded = nil
		e.DataBase64 = false
		return nil
	}
	if jsonMediaType(e.DataContentType()) {
		e.DataBase64 = !json.Valid(e.DataEncoded)
	} else {
		e.DataBase64 = !utf8.Valid(e.DataEncoded)
	}
	return nil
}

// jsonMediaType reports whether sdk-go's JSON encoding writes data of
// content type ct as a JSON value rather than as a string.
func jsonMediaType(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	switch strings.ToLower(strings.TrimSpace(mt)) {
	case "", event.ApplicationJSON, event.TextJSON, event.ApplicationCloudEventsJSON, event.ApplicationCloudEventsBatchJSON:
		return true
	}
	return false
}
