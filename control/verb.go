package control

import (
	"fmt"
	"strings"
)

// Verb is what a control message asks of a session.
type Verb string

// The verbs (DESIGN §9).
const (
	// Steer queues Text into the next model call's context without
	// pausing the session.
	Steer Verb = "steer"
	// Interrupt pauses the session at its next step boundary (status
	// paused); Text, if any, is the reason.
	Interrupt Verb = "interrupt"
	// Resume continues a paused or blocked session; Text, if any, joins
	// the context as a steer does.
	Resume Verb = "resume"
	// Cancel stops the session now: the in-flight model call and tool are
	// cancelled, the step settles and the session ends as cancelled. Text,
	// if any, is the reason.
	Cancel Verb = "cancel"
	// Approve lets the tool call CallID that an approval gate stopped run;
	// Text, if any, is a note for the transcript.
	Approve Verb = "approve"
	// Deny refuses the tool call CallID: the model gets a denial result,
	// with Text as the reason if given.
	Deny Verb = "deny"
	// Fork copies the session's transcript up to Turn into a new session
	// named As, which records its parent; Text, if any, is the new
	// session's next message. The original is left untouched.
	Fork Verb = "fork"
)

var verbs = []Verb{Steer, Interrupt, Resume, Cancel, Approve, Deny, Fork}

// Verbs returns every verb, in the order of DESIGN §9.
func Verbs() []Verb { return append([]Verb(nil), verbs...) }

// ParseVerb returns the verb named s, which must be spelled exactly as one
// of Verbs (lower case).
func ParseVerb(s string) (Verb, error) {
	for _, v := range verbs {
		if string(v) == s {
			return v, nil
		}
	}
	names := make([]string, len(verbs))
	for i, v := range verbs {
		names[i] = string(v)
	}
	return "", fmt.Errorf("%w: unknown verb %q (want one of %s)", ErrInvalid, clip(s), strings.Join(names, ", "))
}

// takesCallID reports whether v answers an approval by call id.
func (v Verb) takesCallID() bool { return v == Approve || v == Deny }

// needsText reports whether v is meaningless without text.
func (v Verb) needsText() bool { return v == Steer }
