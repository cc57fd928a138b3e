// Package pattern reads schedule patterns as the NATS server runs them
// (6-field cron with seconds, @hourly and the like, @every, with a time
// zone) and the 5-field cron of definitions, which it spreads by a stable
// per-schedule second. It is the one parser of patterns: definitions are
// checked with it when they are applied, and the reconciler builds the
// schedule messages with it, so a pattern that is accepted is one the
// reconciler installs.
package pattern

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// ErrBad reports a schedule pattern the server would not accept.
var ErrBad = errors.New("invalid schedule pattern")

// minEvery is the server's smallest @every interval.
const minEvery = time.Second

// parser reads the server's 6-field cron (seconds first) and descriptors.
var parser = cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// descriptors are the server's named patterns, as 6-field cron.
var descriptors = map[string]string{
	"@yearly":   "0 0 0 1 1 *",
	"@annually": "0 0 0 1 1 *",
	"@monthly":  "0 0 0 1 * *",
	"@weekly":   "0 0 0 * * 0",
	"@daily":    "0 0 0 * * *",
	"@midnight": "0 0 0 * * *",
	"@hourly":   "0 0 * * * *",
}

// Pattern is a schedule pattern as the server takes it, with the offset
// that spreads it applied.
type Pattern struct {
	// Expr is the server pattern: "@every 5m" or a 6-field cron.
	Expr string
	// TimeZone is the IANA zone of a cron pattern; empty is UTC.
	TimeZone string
	sched    cron.Schedule
	every    time.Duration
}

// Parse validates a definition's pattern and returns the pattern the
// schedule message carries. A 5-field cron (minute first) and the named
// patterns (@hourly, @daily …) get a seconds field equal to offsetKey's
// stable offset in [0, 60), so schedules sharing a pattern do not all fire
// in the same second; a 6-field cron is taken as written. @every takes no
// time zone (the server refuses one).
func Parse(expr, tz, offsetKey string) (Pattern, error) {
	expr = strings.Join(strings.Fields(expr), " ")
	if expr == "" {
		return Pattern{}, fmt.Errorf("%w: empty", ErrBad)
	}
	if rest, ok := strings.CutPrefix(expr, "@every "); ok {
		if tz != "" {
			return Pattern{}, fmt.Errorf("%w: %q: @every takes no time zone (got %q)", ErrBad, expr, tz)
		}
		d, err := time.ParseDuration(rest)
		if err != nil || d < minEvery {
			return Pattern{}, fmt.Errorf("%w: %q: want @every with a duration of at least 1s", ErrBad, expr)
		}
		return Pattern{Expr: "@every " + d.String(), every: d}, nil
	}
	if strings.HasPrefix(expr, "@at ") {
		return Pattern{}, fmt.Errorf("%w: %q: @at fires once; a schedule repeats", ErrBad, expr)
	}
	sixField := expr
	if d, ok := descriptors[expr]; ok {
		sixField = offsetSeconds(offsetKey) + d[1:]
	} else {
		switch n := len(strings.Fields(expr)); n {
		case 5:
			sixField = offsetSeconds(offsetKey) + " " + expr
		case 6:
		default:
			return Pattern{}, fmt.Errorf("%w: %q has %d fields; want 5 (minute first), 6 (seconds first), @every DURATION or @hourly/@daily/…", ErrBad, expr, n)
		}
	}
	loc := time.UTC
	if tz != "" {
		l, err := time.LoadLocation(tz)
		if err != nil {
			return Pattern{}, fmt.Errorf("%w: time zone %q: %w", ErrBad, tz, err)
		}
		loc = l
	}
	s, err := parser.Parse("CRON_TZ=" + loc.String() + " " + sixField)
	if err != nil {
		return Pattern{}, fmt.Errorf("%w: %q: %w", ErrBad, expr, err)
	}
	// The parser takes dates that do not exist (30 February, 31 April);
	// such a schedule would never fire.
	if s.Next(time.Now()).IsZero() {
		return Pattern{}, fmt.Errorf("%w: %q never fires (no such date)", ErrBad, expr)
	}
	return Pattern{Expr: sixField, TimeZone: tz, sched: s}, nil
}

// offsetSeconds is key's stable second of the minute.
func offsetSeconds(key string) string {
	h := fnv.New32a()
	h.Write([]byte(key))
	return fmt.Sprint(h.Sum32() % 60)
}

// Every is the interval of an @every pattern, zero for a cron pattern.
func (p Pattern) Every() time.Duration { return p.every }

// Next is the first slot after t.
func (p Pattern) Next(t time.Time) time.Time {
	if p.every > 0 {
		return t.UTC().Round(time.Second).Add(p.every)
	}
	if p.sched == nil {
		return time.Time{}
	}
	return p.sched.Next(t).UTC()
}

// Slot returns the slot that fired given the next slot the server reported
// with the tick: the latest slot before next.
func (p Pattern) Slot(next time.Time) time.Time {
	if p.every > 0 {
		return next.Add(-p.every)
	}
	if p.sched == nil {
		return time.Time{}
	}
	// Step from well before next up to the last slot before it. Intervals
	// of a cron pattern vary (weekdays, month ends), so start a generous
	// number of typical intervals back and bound the walk.
	step := p.sched.Next(next).Sub(next)
	if step <= 0 {
		step = time.Second
	}
	t := p.sched.Next(next.Add(-40 * step))
	if t.IsZero() || !t.Before(next) {
		return time.Time{}
	}
	for range 100000 {
		n := p.sched.Next(t)
		if n.IsZero() || !n.Before(next) {
			return t.UTC()
		}
		t = n
	}
	return time.Time{}
}
