package pattern_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/schedule/pattern"
)

func TestParsePattern(t *testing.T) {
	tests := []struct {
		name, expr, tz string
		wantExpr       string // "" with wantErr
		wantErr        bool
	}{
		{name: "every", expr: "@every 5m", wantExpr: "@every 5m0s"},
		{name: "every too short", expr: "@every 500ms", wantErr: true},
		{name: "every with zone", expr: "@every 1m", tz: "Europe/Berlin", wantErr: true},
		{name: "six fields kept", expr: "*/10 * * * * *", wantExpr: "*/10 * * * * *"},
		{name: "five fields get an offset", expr: "*/5 * * * *", wantExpr: " */5 * * * *"},
		{name: "hourly gets an offset", expr: "@hourly", wantExpr: " 0 * * * *"},
		{name: "zone", expr: "0 0 9 * * MON-FRI", tz: "Europe/Berlin", wantExpr: "0 0 9 * * MON-FRI"},
		{name: "bad zone", expr: "0 0 9 * * *", tz: "Mars/Olympus", wantErr: true},
		{name: "garbage", expr: "every day", wantErr: true},
		{name: "at is not a schedule", expr: "@at 2030-01-01T00:00:00Z", wantErr: true},
		{name: "empty", expr: " ", wantErr: true},
		{name: "no such date", expr: "0 0 0 30 2 *", wantErr: true},
		{name: "no such date in a zone", expr: "0 0 31 4 *", tz: "Europe/Berlin", wantErr: true},
		{name: "leap day", expr: "0 0 12 29 2 *", wantExpr: "0 0 12 29 2 *"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := pattern.Parse(tt.expr, tt.tz, "agent/sched")
			if tt.wantErr {
				if !errors.Is(err, pattern.ErrBad) {
					t.Fatalf("got %v, want ErrBadPattern", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(p.Expr, tt.wantExpr) {
				t.Fatalf("Expr = %q, want suffix %q", p.Expr, tt.wantExpr)
			}
		})
	}
}

func TestOffsetsAreStableAndSpread(t *testing.T) {
	seen := map[string]bool{}
	for _, key := range []string{"a/x", "b/x", "c/x", "d/x", "e/x", "f/x"} {
		p1, _ := pattern.Parse("*/5 * * * *", "", key)
		p2, _ := pattern.Parse("*/5 * * * *", "", key)
		if p1.Expr != p2.Expr {
			t.Fatalf("offset of %s not stable: %q vs %q", key, p1.Expr, p2.Expr)
		}
		seen[p1.Expr] = true
	}
	if len(seen) < 2 {
		t.Fatalf("six schedules sharing a pattern all got the same offset: %v", seen)
	}
}

func TestSlotIsTheSlotBeforeNext(t *testing.T) {
	base := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC) // a Friday
	tests := []struct {
		name, expr string
		next, want time.Time
	}{
		{name: "every", expr: "@every 5m", next: base.Add(10 * time.Minute), want: base.Add(5 * time.Minute)},
		{name: "each minute", expr: "0 * * * * *", next: base.Add(3 * time.Minute), want: base.Add(2 * time.Minute)},
		{name: "weekdays across a weekend", expr: "0 0 9 * * MON-FRI", next: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC), want: time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := pattern.Parse(tt.expr, "", "k")
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Slot(tt.next); !got.Equal(tt.want) {
				t.Fatalf("Slot(%s) = %s, want %s", tt.next, got, tt.want)
			}
		})
	}
}
