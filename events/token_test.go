package events_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/events"
)

func TestEncodeToken(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  string
	}{
		{name: "plain", input: "reviewer", want: "reviewer"},
		{name: "safe punctuation", input: "pr-12_a", want: "pr-12_a"},
		{name: "session per PR", input: "octo/repo#12", want: "octo=2Frepo=2312"},
		{name: "dot", input: "a.b", want: "a=2Eb"},
		{name: "escape character", input: "=", want: "=3D"},
		{name: "wildcards", input: "*>", want: "=2A=3E"},
		{name: "system subject", input: "$JS.API", want: "=24JS=2EAPI"},
		{name: "space and UTF-8", input: "feature/ü x", want: "feature=2F=C3=BC=20x"},
		{name: "emoji", input: "😀", want: "=F0=9F=98=80"},
		{name: "NUL and invalid UTF-8", input: "\x00\xff", want: "=00=FF"},
		{name: "longest", input: strings.Repeat("a", events.MaxNameLen), want: strings.Repeat("a", events.MaxNameLen)},
		{name: "longest escaped", input: strings.Repeat("/", events.MaxNameLen), want: strings.Repeat("=2F", events.MaxNameLen)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := events.EncodeToken(tt.input)
			if err != nil {
				t.Fatalf("EncodeToken(%q): %v", tt.input, err)
			}
			if got != tt.want {
				t.Fatalf("EncodeToken(%q) = %q, want %q", tt.input, got, tt.want)
			}
			back, err := events.DecodeToken(got)
			if err != nil {
				t.Fatalf("DecodeToken(%q): %v", got, err)
			}
			if back != tt.input {
				t.Fatalf("DecodeToken(%q) = %q, want %q", got, back, tt.input)
			}
		})
	}
}

func TestEncodeTokenErrors(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  error
	}{
		{name: "empty", input: "", want: events.ErrEmptyName},
		{name: "too long", input: strings.Repeat("a", events.MaxNameLen+1), want: events.ErrNameTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := events.EncodeToken(tt.input)
			if !errors.Is(err, tt.want) {
				t.Fatalf("EncodeToken: err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestDecodeTokenRejectsNonCanonical(t *testing.T) {
	tests := []struct {
		name string
		tok  string
	}{
		{name: "empty", tok: ""},
		{name: "lower-case hex", tok: "a=2fb"},
		{name: "needless escape of a letter", tok: "=41"},
		{name: "needless escape of dash", tok: "=2D"},
		{name: "truncated escape", tok: "a=2"},
		{name: "bare escape character", tok: "a="},
		{name: "not hex", tok: "=G0"},
		{name: "dot", tok: "a.b"},
		{name: "wildcard", tok: "*"},
		{name: "space", tok: "a b"},
		{name: "raw UTF-8", tok: "ü"},
		{name: "name too long", tok: strings.Repeat("a", events.MaxNameLen+1)},
		{name: "escaped name too long", tok: strings.Repeat("=2F", events.MaxNameLen+1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name, err := events.DecodeToken(tt.tok)
			if !errors.Is(err, events.ErrInvalidToken) {
				t.Fatalf("DecodeToken(%q) = %q, %v; want ErrInvalidToken", tt.tok, name, err)
			}
			if tt.tok != "" && len(tt.tok) < 40 && !strings.Contains(err.Error(), tt.tok) {
				t.Errorf("error %q does not name the token %q", err, tt.tok)
			}
		})
	}
}

func TestMustTokenPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("MustToken(\"\") did not panic")
		}
	}()
	events.MustToken("")
}

// tokenByteOK is the alphabet a token may use: valid in a NATS subject
// token and in a JetStream KV key, without the '.' separator.
func tokenByteOK(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '='
}

func FuzzToken(f *testing.F) {
	f.Add("reviewer")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := events.EncodeToken(s)
		if err == nil {
			for i := 0; i < len(tok); i++ {
				if !tokenByteOK(tok[i]) {
					t.Fatalf("EncodeToken(%q) = %q: byte %q not allowed", s, tok, tok[i])
				}
			}
			back, err := events.DecodeToken(tok)
			if err != nil {
				t.Fatalf("DecodeToken(EncodeToken(%q) = %q): %v", s, tok, err)
			}
			if back != s {
				t.Fatalf("DecodeToken(EncodeToken(%q)) = %q", s, back)
			}
		} else if s != "" && len(s) <= events.MaxNameLen {
			t.Fatalf("EncodeToken(%q): %v", s, err)
		}

		name, err := events.DecodeToken(s)
		if err != nil {
			if !errors.Is(err, events.ErrInvalidToken) {
				t.Fatalf("DecodeToken(%q): error %v does not wrap ErrInvalidToken", s, err)
			}
			return
		}
		again, err := events.EncodeToken(name)
		if err != nil {
			t.Fatalf("EncodeToken(DecodeToken(%q) = %q): %v", s, name, err)
		}
		if again != s {
			t.Fatalf("EncodeToken(DecodeToken(%q)) = %q", s, again)
		}
	})
}
