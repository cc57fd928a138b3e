package record

import "errors"

// Sentinel errors callers branch on.
var (
	// ErrFenced: a conditional write lost: the state moved on under its
	// writer (another worker took the session over), or an entry id it
	// meant to create is taken. The writer drops the session.
	ErrFenced = errors.New("session state changed under this worker (fenced)")
	// ErrNotFound: the session has no state.
	ErrNotFound = errors.New("session not found")
	// ErrTooLarge: a value is larger than the server's max payload lets
	// a write hold; written again, it would be refused again.
	ErrTooLarge = errors.New("larger than the server's max payload")
)
