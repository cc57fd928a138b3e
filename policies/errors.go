package policies

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrInvalid marks a definition that was refused: bad YAML, a missing
	// or malformed field, or a CEL expression that does not compile.
	// Errors wrapping it are an *Error or an errors.Join of them.
	ErrInvalid = errors.New("policies: invalid definition")
	// ErrNotFound means no definition of that agent is stored.
	ErrNotFound = errors.New("policies: agent not found")
	// ErrConflict means a change does not apply to the agent as it stands:
	// a rollback to the content that already serves, a rollout of the
	// stable version, an end of a rollout that is not in force.
	ErrConflict = errors.New("policies: conflict")
)

// Error is one problem of a definition, located in its file.
type Error struct {
	// File is the file the definition came from ("" when unknown).
	File string
	// Line and Column are 1-based; 0 when the position is unknown.
	Line, Column int
	// Field is the path of the field at fault, e.g. "triggers[0].when";
	// empty for a problem with the document as a whole.
	Field string
	// Err says what is wrong.
	Err error
}

// Error renders the problem as "file:line:col: field: what".
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
	} else {
		b.WriteString("<definition>")
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns ErrInvalid and the cause.
func (e *Error) Unwrap() []error { return []error{ErrInvalid, e.Err} }

// Errors returns every *Error that err holds, in order: err itself, or the
// members of an errors.Join.
func Errors(err error) []*Error {
	var out []*Error
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		var e *Error
		if x, ok := err.(*Error); ok {
			out = append(out, x)
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, m := range j.Unwrap() {
				walk(m)
			}
			return
		}
		if errors.As(err, &e) {
			out = append(out, e)
		}
	}
	walk(err)
	return out
}
