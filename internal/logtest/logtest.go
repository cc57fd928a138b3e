package logtest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TB is what a handler reports failures to (testing.TB satisfies it).
type TB interface {
	Helper()
	Errorf(format string, args ...any)
}

// Handler checks every line for repeated keys and writes it as text to
// an optional io.Writer.
type Handler struct {
	tb    TB
	next  slog.Handler
	keys  []string // the keys With bound, qualified by their groups
	group string
	state *state
}

type state struct {
	mu   sync.Mutex
	done bool
}

// New returns a handler that reports a line of any level with a repeated
// key to tb and writes the lines at level and above to w (nil for none).
func New(tb TB, w io.Writer, level slog.Leveler) *Handler {
	if w == nil {
		w = io.Discard
	}
	return &Handler{tb: tb, next: slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}), state: &state{}}
}

// Logger is a logger over New(tb, w, slog.LevelDebug).
func Logger(tb TB, w io.Writer) *slog.Logger { return slog.New(New(tb, w, slog.LevelDebug)) }

// ForTest is a logger that fails t on a line with a repeated key until t
// ends, writing nothing; at debug level, so every line is checked.
func ForTest(t testing.TB) *slog.Logger {
	h := New(t, nil, slog.LevelDebug)
	t.Cleanup(h.Stop)
	return slog.New(h)
}

// Stop ends the checks: lines logged after the test ended (by goroutines
// still stopping) are not reported.
func (h *Handler) Stop() {
	h.state.mu.Lock()
	h.state.done = true
	h.state.mu.Unlock()
}

// Enabled implements slog.Handler: every level is checked, whatever the
// level of what is written.
func (h *Handler) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	keys := slices.Clone(h.keys)
	r.Attrs(func(a slog.Attr) bool {
		keys = append(keys, qualified(h.group, a)...)
		return true
	})
	seen := map[string]bool{}
	var repeated []string
	for _, k := range keys {
		if seen[k] && !slices.Contains(repeated, k) {
			repeated = append(repeated, k)
		}
		seen[k] = true
	}
	if len(repeated) > 0 {
		h.state.mu.Lock()
		done := h.state.done
		h.state.mu.Unlock()
		if !done {
			h.tb.Helper()
			h.tb.Errorf("log line %q repeats %s (keys %s)", r.Message, strings.Join(repeated, ", "), strings.Join(keys, " "))
		}
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.keys = slices.Clone(h.keys)
	for _, a := range as {
		c.keys = append(c.keys, qualified(h.group, a)...)
	}
	c.next = h.next.WithAttrs(as)
	return &c
}

// WithGroup implements slog.Handler.
func (h *Handler) WithGroup(name string) slog.Handler {
	c := *h
	c.keys = slices.Clone(h.keys)
	if name != "" {
		c.group = join(h.group, name)
	}
	c.next = h.next.WithGroup(name)
	return &c
}

// qualified returns the keys of a, a group's with their group's name.
func qualified(group string, a slog.Attr) []string {
	if a.Value.Kind() == slog.KindGroup {
		var out []string
		g := group
		if a.Key != "" {
			g = join(group, a.Key)
		}
		for _, ga := range a.Value.Group() {
			out = append(out, qualified(g, ga)...)
		}
		return out
	}
	if a.Key == "" {
		return nil
	}
	return []string{join(group, a.Key)}
}

func join(group, key string) string {
	if group == "" {
		return key
	}
	return fmt.Sprintf("%s.%s", group, key)
}
