package admission

import "errors"

var (
	// ErrNotReady means the definitions have not been loaded yet: retry
	// later rather than treat the event as rejected.
	ErrNotReady = errors.New("admission: agent definitions not loaded yet")
	// ErrUnknownAgent means an event addressed to an agent (its jlagent
	// extension) names no stored definition.
	ErrUnknownAgent = errors.New("admission: unknown agent")
	// ErrState means the shared state admission needs (rate limit
	// buckets, debounce messages) could not be read or written: retry
	// later.
	ErrState = errors.New("admission: state unavailable")

	errWatchStopped = errors.New("admission: definition watch stopped")
)
