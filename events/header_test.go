package events

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEncodeHeaderValue(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  string
	}{
		{name: "spec example", input: "Euro € 😀", want: "Euro%20%E2%82%AC%20%F0%9F%98%80"},
		{name: "plain", input: "com.github.pull_request", want: "com.github.pull_request"},
		{name: "quote and percent", input: `"100%"`, want: "%22100%25%22"},
		{name: "controls", input: "a\r\nb\x7f", want: "a%0D%0Ab%7F"},
		{name: "tab", input: "a\tb", want: "a%09b"},
		{name: "empty", input: "", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := encodeHeaderValue(tt.input); got != tt.want {
				t.Fatalf("encodeHeaderValue(%q) = %q, want %q", tt.input, got, tt.want)
			}
			back, err := decodeHeaderValue(tt.want)
			if err != nil || back != tt.input {
				t.Fatalf("decodeHeaderValue(%q) = %q, %v; want %q", tt.want, back, err, tt.input)
			}
		})
	}
}

func TestDecodeHeaderValue(t *testing.T) {
	tests := []struct {
		name    string
		input   string
		want    string
		wantErr string
	}{
		{name: "quoted", input: `"a b"`, want: "a b"},
		{name: "quoted with escapes", input: `"say \"hi\" \\o/"`, want: `say "hi" \o/`},
		{name: "quoted part", input: `x="a b";y`, want: "x=a b;y"},
		{name: "quoted then percent-decoded", input: `"50%25 off"`, want: "50% off"},
		{name: "lower-case hex", input: "%e2%82%ac", want: "€"},
		{name: "unnecessary escapes", input: "%41%62c", want: "Abc"},
		{name: "raw UTF-8 accepted", input: "ü", want: "ü"},
		{name: "overlong space", input: "%C0%A0", wantErr: "UTF-8"},
		{name: "lone continuation byte", input: "%80", wantErr: "UTF-8"},
		{name: "truncated escape", input: "abc%4", wantErr: "truncated"},
		{name: "bare percent", input: "100%", wantErr: "truncated"},
		{name: "not hex", input: "%zz", wantErr: "invalid percent-encoding"},
		{name: "unterminated quote", input: `"abc`, wantErr: "unterminated"},
		{name: "trailing backslash in quote", input: `"abc\`, wantErr: "backslash"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeHeaderValue(tt.input)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("decodeHeaderValue(%q) = %q, %v; want error containing %q", tt.input, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("decodeHeaderValue(%q) = %q, %v; want %q", tt.input, got, err, tt.want)
			}
		})
	}
}

func TestCheckString(t *testing.T) {
	tests := []struct {
		name string
		s    string
		ok   bool
	}{
		{name: "ascii", s: "hello world", ok: true},
		{name: "replacement character", s: "\uFFFD", ok: true},
		{name: "emoji", s: "😀", ok: true},
		{name: "NUL", s: "a\x00"},
		{name: "newline", s: "a\nb"},
		{name: "DEL", s: "\x7f"},
		{name: "C1 control", s: "\u0085"},
		{name: "noncharacter FDD0", s: "\uFDD0"},
		{name: "noncharacter FFFE", s: "\uFFFE"},
		{name: "noncharacter 10FFFF", s: "\U0010FFFF"},
		{name: "invalid UTF-8", s: "\xff"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := checkString(tt.s); (err == nil) != tt.ok {
				t.Fatalf("checkString(%q) = %v, want ok=%v", tt.s, err, tt.ok)
			}
		})
	}
}

// quoteRFC7230 wraps s in an RFC 7230 quoted-string.
func quoteRFC7230(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(s) + `"`
}

func FuzzHeaderValue(f *testing.F) {
	f.Add("Euro € 😀")
	f.Fuzz(func(t *testing.T, s string) {
		// Decoding arbitrary input must not panic, and yields UTF-8 or fails.
		if d, err := decodeHeaderValue(s); err == nil && !utf8.ValidString(d) {
			t.Fatalf("decodeHeaderValue(%q) = %q: not UTF-8", s, d)
		}
		if !utf8.ValidString(s) {
			return
		}
		enc := encodeHeaderValue(s)
		for i := 0; i < len(enc); i++ {
			if c := enc[i]; c < 0x21 || c > 0x7e || c == '"' {
				t.Fatalf("encodeHeaderValue(%q) = %q: byte %q at %d", s, enc, c, i)
			}
		}
		for _, wire := range []string{enc, quoteRFC7230(enc)} {
			got, err := decodeHeaderValue(wire)
			if err != nil {
				t.Fatalf("decodeHeaderValue(%q): %v", wire, err)
			}
			if got != s {
				t.Fatalf("decodeHeaderValue(%q) = %q, want %q", wire, got, s)
			}
		}
	})
}
