package events

import (
	"errors"
	"fmt"
)

var (
	// ErrEmptyName is returned by EncodeToken for an empty name.
	ErrEmptyName = errors.New("events: empty name")

	// ErrNameTooLong is returned by EncodeToken for a name longer than
	// MaxNameLen bytes.
	ErrNameTooLong = errors.New("events: name too long")

	// ErrInvalidToken is returned by DecodeToken for a token that
	// EncodeToken cannot have produced.
	ErrInvalidToken = errors.New("events: invalid subject token")

	// ErrInvalidEvent means an event, or a message meant to carry one, does
	// not hold a valid CloudEvent. Retrying cannot fix it: a consumer
	// should dead-letter the message with the error as the reason.
	ErrInvalidEvent = errors.New("events: invalid event")

	// ErrTooLarge means a body or a header value exceeds MaxEventSize or
	// MaxHeaderValueLen. Errors wrapping it also wrap ErrInvalidEvent.
	ErrTooLarge = errors.New("events: too large")

	// ErrInvalidSubject is returned by ToMsg for a subject that cannot be
	// published to.
	ErrInvalidSubject = errors.New("events: invalid subject")
)

// AttributeError reports a CloudEvents attribute that is missing or
// malformed, in an event or in the message carrying it. It matches
// ErrInvalidEvent with errors.Is.
type AttributeError struct {
	// Attribute is the attribute's name, such as "id" or an extension's
	// name.
	Attribute string
	// Header is the message header it was read from, if any.
	Header string
	// Err says what is wrong with it.
	Err error
}

// Error names the attribute, the header it came from, and the problem.
func (e *AttributeError) Error() string {
	if e.Header != "" {
		return fmt.Sprintf("events: attribute %q (header %q): %v", e.Attribute, e.Header, e.Err)
	}
	return fmt.Sprintf("events: attribute %q: %v", e.Attribute, e.Err)
}

// Unwrap returns ErrInvalidEvent and the underlying cause.
func (e *AttributeError) Unwrap() []error { return []error{ErrInvalidEvent, e.Err} }

var errMissing = errors.New("missing")
