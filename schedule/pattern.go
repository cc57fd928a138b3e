package schedule

import "github.com/jetloop/jetloop/schedule/pattern"

// Pattern is a schedule pattern as the server takes it; see package
// pattern.
type Pattern = pattern.Pattern

// ErrBadPattern reports a schedule pattern the server would not accept.
var ErrBadPattern = pattern.ErrBad

// ParsePattern is pattern.Parse: the one parser of schedule patterns,
// which policies uses to check definitions when they are applied.
func ParsePattern(expr, tz, offsetKey string) (Pattern, error) {
	return pattern.Parse(expr, tz, offsetKey)
}
