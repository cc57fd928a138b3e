package control

import "errors"

// ErrInvalid reports a control message that can never be applied: an
// unknown verb, a missing or misplaced field, a value out of bounds, or a
// message that is not a control CloudEvent for its subject. Errors that
// wrap it name the field and the input.
var ErrInvalid = errors.New("invalid control message")
