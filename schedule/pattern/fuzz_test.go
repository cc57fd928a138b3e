package pattern_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jetloop/jetloop/schedule/pattern"
)

// FuzzParse feeds arbitrary patterns and time zones, as an agent
// definition carries them, to Parse: it never panics, refuses with
// ErrBad, and a pattern it accepts parses again to itself and
// answers Next and Slot.
func FuzzParse(f *testing.F) {
	f.Add("*/5 * * * *", "")
	f.Add("0 0 9 * * MON-FRI", "Europe/Berlin")
	f.Add("@every 90s", "")
	f.Add("@hourly", "America/New_York")
	f.Add("0 0 0 30 2 *", "")
	f.Add("@at 2030-01-01T00:00:00Z", "")
	f.Fuzz(func(t *testing.T, expr, tz string) {
		p, err := pattern.Parse(expr, tz, "agent/sched")
		if err != nil {
			if !errors.Is(err, pattern.ErrBad) {
				t.Fatalf("error %v is not ErrBad", err)
			}
			return
		}
		again, err := pattern.Parse(p.Expr, p.TimeZone, "agent/sched")
		if err != nil {
			t.Fatalf("accepted %q as %q, which does not parse again: %v", expr, p.Expr, err)
		}
		if again.Expr != p.Expr {
			t.Fatalf("accepted %q as %q, which parses again as %q", expr, p.Expr, again.Expr)
		}
		now := time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC)
		if next := p.Next(now); !next.IsZero() && !next.After(now) {
			t.Fatalf("%q: next slot %s is not after %s", p.Expr, next, now)
		}
		if slot := p.Slot(now); !slot.IsZero() && !slot.Before(now) {
			t.Fatalf("%q: slot %s before next %s is not before it", p.Expr, slot, now)
		}
	})
}
