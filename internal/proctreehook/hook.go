// Package proctreehook holds what tests set to steer proctree's reapers
// into paths they take only by chance otherwise. Nothing but tests sets
// it; it owns no behaviour of its own.
package proctreehook

import (
	"sync/atomic"
	"time"
)

var startDelay atomic.Int64

// SetStartDelay makes every reaper started from now on wait d before it
// reports the start of its command, so that a command that kills its
// reaper does so first, for sure; it returns the function that undoes
// it.
func SetStartDelay(d time.Duration) (restore func()) {
	old := startDelay.Swap(int64(d))
	return func() { startDelay.Store(old) }
}

// StartDelay is the delay SetStartDelay set (0: none).
func StartDelay() time.Duration { return time.Duration(startDelay.Load()) }
