package integration

import (
	"testing"
	"time"
)

// TestSlackSecondBounded: one body signed again and again is back-dated
// a second at a time, never to a second it was signed at, and past
// maxSlackBackdate seconds before now it is refused, not signed stale.
func TestSlackSecondBounded(t *testing.T) {
	// A signer of its own: what other tests (or this one run before,
	// -count) signed is not in it.
	var s slackSigner
	now := time.Now().Unix()
	body := []byte(t.Name())
	seen := map[int64]bool{}
	for i := 0; i <= maxSlackBackdate; i++ {
		sec, err := s.second(now, body)
		if err != nil {
			t.Fatalf("signature %d: %v", i, err)
		}
		if seen[sec] || sec > now || now-sec > maxSlackBackdate {
			t.Fatalf("signature %d at %d s before now (seen before: %v)", i, now-sec, seen[sec])
		}
		seen[sec] = true
	}
	if sec, err := s.second(now, body); err == nil {
		t.Fatalf("signature %d of one body signed %d s before now, want an error past %d s", maxSlackBackdate+2, now-sec, maxSlackBackdate)
	}
	// Another body has its own seconds.
	if sec, err := s.second(now, []byte("another")); err != nil || sec != now {
		t.Fatalf("another body: at %d, %v; want now", now-sec, err)
	}
}
