package ingest

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// marshalResult is json.Marshal(r), written directly for a result whose
// targets carry no time (none throttled), which is every result but a
// throttled one's: Marshal reflects over the result and its targets once
// per event. Anything else is Marshal's.
func marshalResult(r *Result) ([]byte, error) {
	for _, t := range r.Admitted {
		if !t.At.IsZero() {
			return json.Marshal(r)
		}
	}
	n := 64 + len(r.ID)
	for _, t := range r.Admitted {
		n += 64 + len(t.Agent) + len(t.Session)
	}
	for _, x := range r.Refused {
		n += 64 + len(x.Agent) + len(x.Session) + len(x.Reason)
	}
	b := make([]byte, 0, n)
	b = append(b, `{"id":`...)
	b = appendJSONString(b, r.ID)
	b = append(b, `,"duplicate":`...)
	b = strconv.AppendBool(b, r.Duplicate)
	b = append(b, `,"admitted":`...)
	if r.Admitted == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, t := range r.Admitted {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"agent":`...)
			b = appendJSONString(b, t.Agent)
			b = append(b, `,"session":`...)
			b = appendJSONString(b, t.Session)
			if t.Seq != 0 {
				b = append(b, `,"seq":`...)
				b = strconv.AppendUint(b, t.Seq, 10)
			}
			if t.Debounced {
				b = append(b, `,"debounced":true`...)
			}
			if t.Throttled {
				b = append(b, `,"throttled":true`...)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if len(r.Refused) > 0 {
		b = append(b, `,"refused":[`...)
		for i, x := range r.Refused {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"agent":`...)
			b = appendJSONString(b, x.Agent)
			if x.Session != "" {
				b = append(b, `,"session":`...)
				b = appendJSONString(b, x.Session)
			}
			b = append(b, `,"reason":`...)
			b = appendJSONString(b, x.Reason)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}'), nil
}

// appendJSONString appends s as encoding/json writes a string: quoted,
// with HTML's <, > and & escaped, U+2028 and U+2029 escaped, and each
// byte of invalid UTF-8 written as U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
