package tools

import (
	"context"
	"errors"
	"strings"
)

// ReplayClass is what recovery may do with a call interrupted between its
// intent and its settlement: run it again (safe), ask the tool whether its
// effect happened (probe), or settle it as "may or may not have run"
// (unsafe). The intent stores the class the call was made under; recovery
// acts on it only when the tool still declares the same.
type ReplayClass string

// Replay classes.
const (
	ClassSafe   ReplayClass = "safe"
	ClassUnsafe ReplayClass = "unsafe"
	ClassProbe  ReplayClass = "probe"
)

// Prober is a tool whose effect can be looked up. Each effect carries a
// mark of the call that made it (see Marker), so that after a crash
// between the call and its settlement recovery asks Probe instead of
// guessing: found, the call is settled with the real result; not found,
// it is made once.
type Prober interface {
	Tool
	// Probe looks for the effect of call, made earlier under the same id
	// and arguments no sooner than call.Started. found reports whether it
	// happened, with the Result the call would have answered. An error
	// means the lookup could not be made (recovery tries again later,
	// counting an attempt unless the error wraps ErrProbeLater); it is
	// never "not found". A probe should also count only the effects the
	// tool made itself (its own account's), since anyone may copy a
	// marker.
	Probe(ctx context.Context, call Call) (res Result, found bool, err error)
}

// ErrProbeLater marks a probe's error that says the lookup can be made
// later, not now: the service's rate limit holds it back. Recovery asks
// again without counting an attempt, so a limit never ends a call as "may
// or may not have run" when a lookup after the reset could settle it.
var ErrProbeLater = errors.New("the lookup waits for a rate limit")

// ClassOf is the replay class t declares: safe when Spec.ReplaySafe,
// probe when it implements Prober, else unsafe.
func ClassOf(t Tool) ReplayClass {
	switch {
	case t == nil:
		return ClassUnsafe
	case t.Spec().ReplaySafe:
		return ClassSafe
	}
	if _, ok := t.(Prober); ok {
		return ClassProbe
	}
	return ClassUnsafe
}

// Marker names one call: "jetloop:<agent>/<session>/<call id>". Tools
// write it into what they create (an HTML comment in a GitHub comment's
// body, a check run's external_id, a chat message's metadata) and their
// probes look for it. Characters that could end an HTML comment or break
// a line are percent-encoded.
func Marker(c Call) string {
	return "jetloop:" + markerPart(c.Agent) + "/" + markerPart(c.Session) + "/" + markerPart(c.ID)
}

// MarkerComment is Marker as an HTML comment, invisible where Markdown is
// rendered.
func MarkerComment(c Call) string { return "<!-- " + Marker(c) + " -->" }

func markerPart(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		ch := s[i]
		safe := ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' ||
			strings.IndexByte("_.#/@:+=~", ch) >= 0 || ch == '-' && (i+1 == len(s) || s[i+1] != '-')
		if safe {
			b.WriteByte(ch)
			continue
		}
		const hex = "0123456789ABCDEF"
		b.WriteByte('%')
		b.WriteByte(hex[ch>>4])
		b.WriteByte(hex[ch&15])
	}
	return b.String()
}
