package events

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxHeaderValueLen bounds, in bytes, the value of each header that ToMsg
// writes and FromMsg reads, before decoding.
const MaxHeaderValueLen = 8 << 10

// headerSafe reports whether b may appear unencoded in a header value: the
// printable ASCII range U+0021–U+007E, except '"' and '%'. Space is
// encoded as well, which makes quoting unnecessary.
func headerSafe(b byte) bool {
	return 0x21 <= b && b <= 0x7e && b != '"' && b != '%'
}

// encodeHeaderValue percent-encodes an attribute's canonical string form
// for a header, as the CloudEvents NATS binding (section 3.1.3.2) asks:
// each UTF-8 byte of every character outside the printable ASCII range,
// space, '"' and '%' becomes %XY with upper-case hex digits.
func encodeHeaderValue(s string) string {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if !headerSafe(s[i]) {
			n += 2
		}
	}
	if n == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if headerSafe(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(upperHex[c>>4])
		b.WriteByte(upperHex[c&0x0f])
	}
	return b.String()
}

// decodeHeaderValue reverses encodeHeaderValue, accepting what older
// senders wrote: it first removes RFC 7230 double-quoting (with backslash
// escapes) wherever a quoted string appears, then does one round of
// percent-decoding that accepts lower-case hex and unnecessary escapes.
// The result must be valid UTF-8, so "%C0%A0" (an overlong space) fails.
func decodeHeaderValue(v string) (string, error) {
	s, err := unquoteHeaderValue(v)
	if err != nil {
		return "", err
	}
	s, err = percentDecode(s)
	if err != nil {
		return "", err
	}
	if !utf8.ValidString(s) {
		return "", errors.New("percent-decodes to invalid UTF-8")
	}
	return s, nil
}

// unquoteHeaderValue removes the quotes and backslash escapes of every
// RFC 7230 quoted-string in v and leaves the rest alone.
func unquoteHeaderValue(v string) (string, error) {
	if !strings.Contains(v, `"`) {
		return v, nil
	}
	var b strings.Builder
	b.Grow(len(v))
	quoted := false
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '"':
			quoted = !quoted
		case c == '\\' && quoted:
			if i+1 == len(v) {
				return "", errors.New("quoted string ends in a backslash")
			}
			i++
			b.WriteByte(v[i])
		default:
			b.WriteByte(c)
		}
	}
	if quoted {
		return "", errors.New("unterminated quoted string")
	}
	return b.String(), nil
}

func percentDecode(s string) (string, error) {
	i := strings.IndexByte(s, '%')
	if i < 0 {
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	b.WriteString(s[:i])
	for ; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("truncated percent-encoding %q", s[i:])
		}
		hi, ok1 := hexValue(s[i+1])
		lo, ok2 := hexValue(s[i+2])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("invalid percent-encoding %q", s[i:i+3])
		}
		b.WriteByte(hi<<4 | lo)
		i += 2
	}
	return b.String(), nil
}

func hexValue(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
