package worker

import "testing"

// OnRetentionListed calls f in every retention pass of the test, after
// the pass has read the states it decides on.
func OnRetentionListed(t testing.TB, f func(agent string)) {
	retentionListed = f
	t.Cleanup(func() { retentionListed = nil })
}
