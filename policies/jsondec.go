package policies

import (
	"fmt"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// maxJSONDepth is the deepest nesting decodeJSON accepts, encoding/json's.
const maxJSONDepth = 10000

// decodeJSON decodes one JSON document, and nothing after it but space,
// into the values ParseJSON promises, in one pass without reflection: it
// is what admission spends most of its time on for a webhook of tens of
// kilobytes. It gives what encoding/json with UseNumber and the number
// conversion of ParseJSON would give (the fuzz test holds it to that):
// strings with invalid UTF-8 or UTF-16 get U+FFFD, duplicate keys keep
// the last value.
func decodeJSON(raw []byte) (any, error) {
	d := jsonDecoder{b: raw}
	d.space()
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	d.space()
	if d.i < len(d.b) {
		return nil, d.errorf("data after the first value")
	}
	return v, nil
}

type jsonDecoder struct {
	b []byte
	i int
}

func (d *jsonDecoder) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", d.i, fmt.Sprintf(format, args...))
}

func (d *jsonDecoder) space() {
	if d.i < len(d.b) && d.b[d.i] <= ' ' {
		d.i = skipSpace(d.b, d.i)
	}
}

func (d *jsonDecoder) value(depth int) (any, error) {
	if d.i >= len(d.b) {
		return nil, d.errorf("unexpected end of JSON input")
	}
	switch c := d.b[d.i]; {
	case c == '{':
		return d.object(depth + 1)
	case c == '[':
		return d.array(depth + 1)
	case c == '"':
		return d.string()
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	default:
		return nil, d.errorf("invalid character %q looking for a value", c)
	}
}

func (d *jsonDecoder) literal(word string) error {
	if len(d.b)-d.i < len(word) || string(d.b[d.i:d.i+len(word)]) != word {
		return d.errorf("invalid literal, want %s", word)
	}
	d.i += len(word)
	return nil
}

func (d *jsonDecoder) object(depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, d.errorf("exceeded max depth")
	}
	d.i++ // {
	m := map[string]any{}
	d.space()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return m, nil
	}
	for {
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return nil, d.errorf("want a string for an object key")
		}
		k, err := d.string()
		if err != nil {
			return nil, err
		}
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return nil, d.errorf("want ':' after an object key")
		}
		d.i++
		d.space()
		v, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		m[k] = v
		d.space()
		if d.i >= len(d.b) {
			return nil, d.errorf("unexpected end of JSON input")
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case '}':
			d.i++
			return m, nil
		default:
			return nil, d.errorf("want ',' or '}' after an object value")
		}
	}
}

func (d *jsonDecoder) array(depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, d.errorf("exceeded max depth")
	}
	d.i++ // [
	a := []any{}
	d.space()
	if d.i < len(d.b) && d.b[d.i] == ']' {
		d.i++
		return a, nil
	}
	for {
		d.space()
		v, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		d.space()
		if d.i >= len(d.b) {
			return nil, d.errorf("unexpected end of JSON input")
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case ']':
			d.i++
			return a, nil
		default:
			return nil, d.errorf("want ',' or ']' after an array element")
		}
	}
}

// string decodes the string at d.i, its quotes included.
func (d *jsonDecoder) string() (string, error) {
	d.i++ // "
	start := d.i
	// The common case: no escape, valid UTF-8, no control character.
	d.i = stringEnd(d.b, d.i, true)
	if d.i < len(d.b) && d.b[d.i] == '"' {
		s := string(d.b[start:d.i])
		d.i++
		return s, nil
	}
	buf := make([]byte, d.i-start, d.i-start+16)
	copy(buf, d.b[start:d.i])
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return string(buf), nil
		case c < 0x20:
			return "", d.errorf("invalid control character %q in a string", c)
		case c == '\\':
			if d.i+1 >= len(d.b) {
				return "", d.errorf("unexpected end of JSON input")
			}
			e := d.b[d.i+1]
			d.i += 2
			switch e {
			case '"', '\\', '/':
				buf = append(buf, e)
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				r, ok := d.hex4()
				if !ok {
					return "", d.errorf("invalid \\u escape")
				}
				if utf16.IsSurrogate(r) {
					// A pair, or U+FFFD for a lone half (as encoding/json).
					r2 := rune(-1)
					if d.i+1 < len(d.b) && d.b[d.i] == '\\' && d.b[d.i+1] == 'u' {
						save := d.i
						d.i += 2
						if x, ok := d.hex4(); ok {
							r2 = x
						} else {
							return "", d.errorf("invalid \\u escape")
						}
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							buf = utf8.AppendRune(buf, dec)
							continue
						}
						// Not a pair: the first half is U+FFFD, the second
						// is read again on its own.
						d.i = save
					}
					r = utf8.RuneError
				}
				buf = utf8.AppendRune(buf, r)
			default:
				return "", d.errorf("invalid escape \\%c", e)
			}
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			d.i++
		default:
			r, size := utf8.DecodeRune(d.b[d.i:])
			if r == utf8.RuneError && size == 1 {
				buf = utf8.AppendRune(buf, utf8.RuneError)
			} else {
				buf = append(buf, d.b[d.i:d.i+size]...)
			}
			d.i += size
		}
	}
	return "", d.errorf("unexpected end of JSON input")
}

func (d *jsonDecoder) hex4() (rune, bool) {
	if len(d.b)-d.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range d.b[d.i : d.i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r*16 + rune(c)
	}
	d.i += 4
	return r, true
}

// number decodes the number at d.i by JSON's grammar: an int64 when it
// has neither fraction nor exponent and fits, else a float64, else (out
// of a float64's range) its text.
func (d *jsonDecoder) number() (any, error) {
	start := d.i
	integer, err := d.numberGrammar()
	if err != nil {
		return nil, err
	}
	s := string(d.b[start:d.i])
	if integer {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n, nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return s, nil
	}
	return f, nil
}

// numberGrammar moves past the number at d.i by JSON's grammar, and
// reports whether it has neither fraction nor exponent.
func (d *jsonDecoder) numberGrammar() (bool, error) {
	if d.b[d.i] == '-' {
		d.i++
	}
	digits := func() int {
		n := 0
		for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	if d.i < len(d.b) && d.b[d.i] == '0' {
		d.i++
	} else if digits() == 0 {
		return false, d.errorf("invalid number")
	}
	integer := true
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		integer = false
		if digits() == 0 {
			return false, d.errorf("invalid number: no digits after '.'")
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		integer = false
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			return false, d.errorf("invalid number: no digits in the exponent")
		}
	}
	return integer, nil
}
