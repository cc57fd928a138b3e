package policies

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Bounds of prompts.
const (
	// MaxPromptLen bounds a rendered trigger prompt, in bytes. The prompt
	// travels base64-encoded in one header of the admitted event, and a
	// header value holds at most events.MaxHeaderValueLen (8 KiB) bytes: 6
	// KiB of prompt encode to exactly that.
	MaxPromptLen = 6 << 10
	// MaxPromptExprs bounds the {{ }} interpolations of one prompt.
	MaxPromptExprs = 64
)

// Prompt is a trigger's prompt compiled: literal text with {{ expr }}
// interpolations, each a CEL expression over `event` (the same language,
// variables and field checks as `when`, `session` and `payload`). A value
// renders as text: a string as it is, a number or a bool as written, a
// list or a map as JSON, null as nothing, and a field the event lacks as
// nothing.
type Prompt struct {
	src   string
	parts []promptPart
}

type promptPart struct {
	lit  string
	expr *Expr
}

// String returns the prompt's source.
func (p *Prompt) String() string { return p.src }

// compilePrompt splits src into text and {{ }} interpolations and
// compiles each. A compile error is an *exprError positioned within src.
func compilePrompt(src string) (*Prompt, error) {
	p := &Prompt{src: src}
	rest, off := src, 0
	for {
		i := strings.Index(rest, "{{")
		if i < 0 {
			if rest != "" {
				p.parts = append(p.parts, promptPart{lit: rest})
			}
			return p, nil
		}
		if i > 0 {
			p.parts = append(p.parts, promptPart{lit: rest[:i]})
		}
		start := off + i + 2
		n, ok := exprEnd(src[start:])
		if !ok {
			line, col := lineCol(src, off+i)
			return nil, &exprError{line: line, col: col, msg: "{{ without its closing }}"}
		}
		inner := src[start : start+n]
		if len(p.parts) >= 2*MaxPromptExprs {
			line, col := lineCol(src, off+i)
			return nil, &exprError{line: line, col: col, msg: fmt.Sprintf("more than %d {{ }} interpolations", MaxPromptExprs)}
		}
		if t := strings.TrimSpace(inner); strings.HasPrefix(t, ".") || strings.HasPrefix(t, "range ") || strings.HasPrefix(t, "if ") || t == "end" {
			line, col := lineCol(src, start)
			return nil, &exprError{line: line, col: col, msg: fmt.Sprintf(
				"{{%s}} is Go template syntax; a prompt interpolates CEL over event, as in {{ event.data.pull_request.title }} (conditions: {{ c ? a : b }}, lists: {{ l.map(x, x.name).join(\", \") }})", inner)}
		}
		x, err := compileExpr(inner, anyOverEvent)
		if err != nil {
			var xe *exprError
			if errors.As(err, &xe) {
				// Position the fault within the prompt, not the
				// interpolation.
				l, c := lineCol(src, start)
				if xe.line > 1 {
					l, c = l+xe.line-1, xe.col
				} else if xe.line == 1 {
					c += xe.col - 1
				}
				return nil, &exprError{line: l, col: c, msg: xe.msg}
			}
			return nil, err
		}
		p.parts = append(p.parts, promptPart{expr: x})
		rest = src[start+n+2:]
		off = start + n + 2
	}
}

// exprEnd returns the length of the CEL expression at the start of s that
// the first "}}" outside a string literal and outside braces the
// expression opened closes.
func exprEnd(s string) (int, bool) {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\'':
			j, ok := skipString(s, i)
			if !ok {
				return 0, false
			}
			i = j - 1
		case '{':
			depth++
		case '}':
			if depth == 0 {
				if i+1 < len(s) && s[i+1] == '}' {
					return i, true
				}
				return 0, false
			}
			depth--
		}
	}
	return 0, false
}

// skipString returns the index just past the CEL string literal that
// starts with the quote at s[i]: single or triple quoted, with backslash
// escapes (a raw string's backslashes are skipped the same way, which
// only matters for a raw string ending in a backslash).
func skipString(s string, i int) (int, bool) {
	q := s[i]
	if strings.HasPrefix(s[i:], strings.Repeat(string(q), 3)) {
		end := strings.Index(s[i+3:], strings.Repeat(string(q), 3))
		if end < 0 {
			return 0, false
		}
		return i + 3 + end + 3, true
	}
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case '\n':
			return 0, false
		case q:
			return j + 1, true
		}
	}
	return 0, false
}

// lineCol is the 1-based line and column of byte offset off in s.
func lineCol(s string, off int) (int, int) {
	line := 1 + strings.Count(s[:off], "\n")
	return line, off - strings.LastIndex(s[:off], "\n")
}

// Render evaluates the prompt over vars: at most MaxPromptLen bytes.
func (p *Prompt) Render(ctx context.Context, vars Vars) (string, error) {
	var b strings.Builder
	for _, part := range p.parts {
		if part.expr == nil {
			b.WriteString(part.lit)
		} else {
			v, err := part.expr.evalValue(ctx, vars)
			if errors.Is(err, errMissing) {
				continue
			}
			if err != nil {
				return "", err
			}
			s, err := textOf(v)
			if err != nil {
				return "", fmt.Errorf("%w: {{ %s }}: %w", ErrEval, part.expr, err)
			}
			b.WriteString(s)
		}
		if b.Len() > MaxPromptLen {
			return "", fmt.Errorf("rendered prompt exceeds %d bytes", MaxPromptLen)
		}
	}
	return b.String(), nil
}
