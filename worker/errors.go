package worker

import "errors"

// Sentinel errors callers branch on.
var (
	// ErrFenced: the session's state moved on under this worker (its lease
	// lapsed and another worker took the session over); the worker drops
	// the session without writing.
	ErrFenced = errors.New("session state changed under this worker (fenced)")
	// ErrLeased: another worker holds the session's lease.
	ErrLeased = errors.New("session leased by another worker")
	// ErrLeaseLost: the lease could not be renewed before it lapsed.
	ErrLeaseLost = errors.New("session lease lost")
	// ErrNotFound: the session has no state.
	ErrNotFound = errors.New("session not found")
	// ErrBudgetExceeded: a budget ran out before a step.
	ErrBudgetExceeded = errors.New("budget exceeded")
)
