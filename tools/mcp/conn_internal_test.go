package mcp

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"
)

// TestJitterIsFullAndCapped checks the backoff window: every wait lies in
// [0, min(max, base·2^n)), and waits are spread over the window rather
// than bunched at its end (full jitter).
func TestJitterIsFullAndCapped(t *testing.T) {
	base, max := 100*time.Millisecond, 10*time.Second
	for n, window := range map[int]time.Duration{0: 100 * time.Millisecond, 1: 200 * time.Millisecond, 3: 800 * time.Millisecond, 7: max, 40: max} {
		var low, high int
		for range 2000 {
			d := jitter(base, max, n)
			if d < 0 || d >= window {
				t.Fatalf("n=%d: wait %v outside [0, %v)", n, d, window)
			}
			if d < window/4 {
				low++
			}
			if d >= window*3/4 {
				high++
			}
		}
		// Each quarter of the window holds about 500 of 2000 draws.
		if low < 350 || high < 350 {
			t.Fatalf("n=%d: %d waits in the first quarter, %d in the last: not spread over the window", n, low, high)
		}
	}
}

// stutter answers its reads one chunk at a time, with an empty read
// (0, nil, which io.Reader allows) before each.
type stutter struct {
	chunks [][]byte
	empty  bool
}

func (s *stutter) Read(p []byte) (int, error) {
	if len(s.chunks) == 0 {
		return 0, io.EOF
	}
	if s.empty = !s.empty; s.empty {
		return 0, nil
	}
	n := copy(p, s.chunks[0])
	if s.chunks[0] = s.chunks[0][n:]; len(s.chunks[0]) == 0 {
		s.chunks = s.chunks[1:]
	}
	return n, nil
}

func (s *stutter) Close() error { return nil }

// TestBoundedBodyHoldsPastEmptyReads: a body that reaches its bound and
// then answers an empty read is not let through unbounded.
func TestBoundedBodyHoldsPastEmptyReads(t *testing.T) {
	b := &boundedBody{ReadCloser: &stutter{chunks: [][]byte{bytes.Repeat([]byte("x"), 8), bytes.Repeat([]byte("y"), 1<<20)}}, left: 8}
	got, err := io.ReadAll(b)
	if !errors.Is(err, errTooLarge) {
		t.Fatalf("read %d bytes of a body bounded to 8, err %v; want errTooLarge", len(got), err)
	}
	if len(got) > 8 {
		t.Fatalf("read %d bytes of a body bounded to 8", len(got))
	}
	exact := &boundedBody{ReadCloser: &stutter{chunks: [][]byte{[]byte("12345678")}}, left: 8}
	if got, err := io.ReadAll(exact); err != nil || string(got) != "12345678" {
		t.Fatalf("a body of exactly the bound = %q, %v", got, err)
	}
}
