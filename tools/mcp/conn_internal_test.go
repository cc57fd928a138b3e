package mcp

import (
	"testing"
	"time"
)

// TestJitterIsFullAndCapped checks the backoff window: every wait lies in
// [0, min(max, base·2^n)), and waits are spread over the window rather
// than bunched at its end (full jitter).
func TestJitterIsFullAndCapped(t *testing.T) {
	base, max := 100*time.Millisecond, 10*time.Second
	for n, window := range map[int]time.Duration{0: 100 * time.Millisecond, 1: 200 * time.Millisecond, 3: 800 * time.Millisecond, 7: max, 40: max} {
		var low, high int
		for range 2000 {
			d := jitter(base, max, n)
			if d < 0 || d >= window {
				t.Fatalf("n=%d: wait %v outside [0, %v)", n, d, window)
			}
			if d < window/4 {
				low++
			}
			if d >= window*3/4 {
				high++
			}
		}
		// Each quarter of the window holds about 500 of 2000 draws.
		if low < 350 || high < 350 {
			t.Fatalf("n=%d: %d waits in the first quarter, %d in the last: not spread over the window", n, low, high)
		}
	}
}
