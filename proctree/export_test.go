//go:build linux

package proctree

import "time"

// SetStartDelay makes reapers wait d before they report their command's
// start, until the returned function is called.
func SetStartDelay(d time.Duration) (restore func()) {
	old := startDelay
	startDelay = d
	return func() { startDelay = old }
}
