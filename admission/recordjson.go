package admission

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// appendRecord appends rec as encoding/json marshals it, byte for byte:
// a record is encoded for every decision of every event, and the
// reflection of json.Marshal was most of what a record cost. It returns
// false, having appended nothing, for what it leaves to json.Marshal: a
// time not in UTC or that json.Marshal refuses (a year outside 0 to 9999).
func appendRecord(b []byte, rec *Record) ([]byte, bool) {
	if !jsonTime(rec.Time) || (!rec.At.IsZero() && !jsonTime(rec.At)) {
		return b, false
	}
	b = append(b, `{"time":`...)
	b = appendTime(b, rec.Time)
	b = append(b, `,"event":{"id":`...)
	b = appendJSONString(b, rec.Event.ID)
	b = append(b, `,"source":`...)
	b = appendJSONString(b, rec.Event.Source)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, rec.Event.Type)
	if rec.Event.Subject != "" {
		b = append(b, `,"subject":`...)
		b = appendJSONString(b, rec.Event.Subject)
	}
	b = append(b, '}')
	field := func(name, v string) {
		if v != "" {
			b = append(b, `,"`...)
			b = append(b, name...)
			b = append(b, `":`...)
			b = appendJSONString(b, v)
		}
	}
	field("agent", rec.Agent)
	field("trigger", rec.Trigger)
	b = append(b, `,"decision":`...)
	b = appendJSONString(b, string(rec.Outcome))
	field("session", rec.Session)
	field("reason", rec.Reason)
	if rec.Version != 0 {
		b = append(b, `,"version":`...)
		b = strconv.AppendUint(b, rec.Version, 10)
	}
	field("debounce_key", rec.DebounceKey)
	if !rec.At.IsZero() {
		b = append(b, `,"at":`...)
		b = appendTime(b, rec.At)
	}
	field("on_busy", rec.OnBusy)
	field("rule", rec.Rule)
	if rec.Count != 0 {
		b = append(b, `,"count":`...)
		b = strconv.AppendInt(b, int64(rec.Count), 10)
	}
	return append(b, '}'), true
}

// jsonTime reports whether t is a UTC time that time.Time's MarshalJSON
// encodes (as RFC 3339 with nanoseconds) rather than refuse: records'
// times are UTC; another zone is left to json.Marshal.
func jsonTime(t time.Time) bool {
	y := t.Year()
	return t.Location() == time.UTC && y >= 0 && y <= 9999
}

func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s quoted as encoding/json quotes a string:
// HTML's <, > and & escaped, invalid UTF-8 as U+FFFD, U+2028 and U+2029
// escaped.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
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
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
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
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
