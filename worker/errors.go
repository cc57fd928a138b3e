package worker

import (
	"errors"

	"github.com/jetloop/jetloop/record"
)

// Sentinel errors callers branch on.
var (
	// ErrLeased: another worker holds the session's lease.
	ErrLeased = errors.New("session leased by another worker")
	// ErrLeaseLost: the lease could not be renewed before it lapsed.
	ErrLeaseLost = errors.New("session lease lost")
	// ErrNotFound: the session has no state, or the agent no definition
	// (what a Definitions answers for an unknown agent). It is
	// record.ErrNotFound.
	ErrNotFound = record.ErrNotFound
	// ErrBudgetExceeded: a budget ran out before a step.
	ErrBudgetExceeded = errors.New("budget exceeded")
)
