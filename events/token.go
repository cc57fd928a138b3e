package events

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxNameLen is the longest agent or session name, in bytes, that
// EncodeToken accepts. A name escapes to at most three times its length, so
// a token stays well inside NATS and KV key limits even when every byte is
// escaped.
const MaxNameLen = 256

// maxTokenLen is the longest token DecodeToken can be handed for a name of
// at most MaxNameLen bytes.
const maxTokenLen = 3 * MaxNameLen

const upperHex = "0123456789ABCDEF"

// tokenSafe reports whether b stands for itself in a token. Everything else
// is escaped, including '.', which separates tokens in subjects and KV keys,
// and '=', the escape character.
func tokenSafe(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '_' || b == '-'
}

// EncodeToken encodes an agent or session name as one token that is valid
// both in a NATS subject and in a JetStream KV key.
//
// Bytes in [A-Za-z0-9_-] are kept, so a name made only of those is its own
// token; every other byte, '=' included, becomes '=' followed by two
// upper-case hex digits (quoted-printable style): "octo/repo#12" becomes
// "octo=2Frepo=2312". The result never contains '.', '*', '>' or
// whitespace. Names are expected to be UTF-8 but any bytes are accepted.
//
// It fails with ErrEmptyName for "" and ErrNameTooLong for a name longer
// than MaxNameLen bytes. DecodeToken is its exact inverse.
func EncodeToken(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("encode token: %w", ErrEmptyName)
	}
	if len(name) > MaxNameLen {
		return "", fmt.Errorf("encode token %s: %d bytes, max %d: %w", quote(name), len(name), MaxNameLen, ErrNameTooLong)
	}
	n := len(name)
	for i := 0; i < len(name); i++ {
		if !tokenSafe(name[i]) {
			n += 2
		}
	}
	if n == len(name) {
		return name, nil
	}
	var b strings.Builder
	b.Grow(n)
	for i := 0; i < len(name); i++ {
		c := name[i]
		if tokenSafe(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('=')
		b.WriteByte(upperHex[c>>4])
		b.WriteByte(upperHex[c&0x0f])
	}
	return b.String(), nil
}

// DecodeToken returns the name that EncodeToken encoded as tok.
//
// It accepts only tokens EncodeToken can produce, so names and tokens are in
// one-to-one correspondence: a byte outside [A-Za-z0-9_=-], a truncated
// escape, lower-case hex, or an escape of a byte that needs none (such as
// "=41" for "A") is an error wrapping ErrInvalidToken, as are the empty
// token and a token whose name would exceed MaxNameLen.
func DecodeToken(tok string) (string, error) {
	if tok == "" {
		return "", fmt.Errorf("decode token: empty: %w", ErrInvalidToken)
	}
	if len(tok) > maxTokenLen {
		return "", fmt.Errorf("decode token %s: %d bytes, longer than any encoded name: %w", quote(tok), len(tok), ErrInvalidToken)
	}
	if !strings.Contains(tok, "=") {
		for i := 0; i < len(tok); i++ {
			if !tokenSafe(tok[i]) {
				return "", invalidToken(tok, i, "byte %q is not allowed", tok[i])
			}
		}
		if len(tok) > MaxNameLen {
			return "", fmt.Errorf("decode token %s: name would be %d bytes, max %d: %w", quote(tok), len(tok), MaxNameLen, ErrInvalidToken)
		}
		return tok, nil
	}
	var b strings.Builder
	b.Grow(len(tok))
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if tokenSafe(c) {
			b.WriteByte(c)
			continue
		}
		if c != '=' {
			return "", invalidToken(tok, i, "byte %q is not allowed", c)
		}
		if i+2 >= len(tok) {
			return "", invalidToken(tok, i, "truncated escape")
		}
		hi, ok1 := upperHexValue(tok[i+1])
		lo, ok2 := upperHexValue(tok[i+2])
		if !ok1 || !ok2 {
			return "", invalidToken(tok, i, "escape %q is not two upper-case hex digits", tok[i:i+3])
		}
		v := hi<<4 | lo
		if tokenSafe(v) {
			return "", invalidToken(tok, i, "escape %q of %q, which needs none", tok[i:i+3], v)
		}
		b.WriteByte(v)
		i += 2
	}
	if b.Len() > MaxNameLen {
		return "", fmt.Errorf("decode token %s: name would be %d bytes, max %d: %w", quote(tok), b.Len(), MaxNameLen, ErrInvalidToken)
	}
	return b.String(), nil
}

// MustToken is EncodeToken for names known to be valid, such as constants
// in tests and examples. It panics if name cannot be encoded.
func MustToken(name string) string {
	tok, err := EncodeToken(name)
	if err != nil {
		panic(err)
	}
	return tok
}

func upperHexValue(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func invalidToken(tok string, at int, format string, args ...any) error {
	return fmt.Errorf("decode token %s: at byte %d: %s: %w", quote(tok), at, fmt.Sprintf(format, args...), ErrInvalidToken)
}

// quote renders untrusted input for an error message: Go-quoted, and cut
// to a readable length.
func quote(s string) string {
	const max = 64
	if len(s) <= max {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:max]) + "…"
}
