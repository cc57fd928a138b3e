package control_test

import (
	"os"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/control"
)

// TestREADMENatsPub keeps the README's `nats pub` lines for chat bots
// valid: each, read as the nats CLI reads it, is a control message Parse
// accepts.
func TestREADMENatsPub(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "nats pub jl.ctl.") {
			lines = append(lines, l)
		}
	}
	if len(lines) < 2 {
		t.Fatalf("README has %d `nats pub jl.ctl.` lines, want the binary and the structured example", len(lines))
	}
	for _, l := range lines {
		args := shellWords(t, l)
		m := nats.NewMsg(args[2])
		if len(args) > 3 && !strings.HasPrefix(args[3], "-") {
			m.Data = []byte(args[3])
		}
		for i, a := range args {
			if a == "-H" && i+1 < len(args) {
				k, v, _ := strings.Cut(args[i+1], ":")
				m.Header.Add(k, v)
			}
		}
		got, err := control.Parse(m)
		if err != nil {
			t.Errorf("README line %q: %v", l, err)
			continue
		}
		if got.Ref.Agent != "demo" || got.Ref.Session != "main" {
			t.Errorf("README line %q: session %v", l, got.Ref)
		}
	}
}

// shellWords splits a command line with single-quoted words, as a shell
// would for the README's examples.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var out []string
	var cur strings.Builder
	inQuote, inWord := false, false
	for _, r := range line {
		switch {
		case r == '\'':
			inQuote, inWord = !inQuote, true
		case r == ' ' && !inQuote:
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inQuote {
		t.Fatalf("unbalanced quote in %q", line)
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}
