package model

import (
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		header map[string]string
		want   time.Duration
	}{
		{name: "absent", want: 0},
		{name: "seconds", header: map[string]string{"Retry-After": "7"}, want: 7 * time.Second},
		{name: "fractional seconds", header: map[string]string{"Retry-After": "0.25"}, want: 250 * time.Millisecond},
		{name: "http date", header: map[string]string{"Retry-After": now.Add(90 * time.Second).Format(http.TimeFormat)}, want: 90 * time.Second},
		{name: "http date in the past", header: map[string]string{"Retry-After": now.Add(-time.Minute).Format(http.TimeFormat)}, want: 0},
		{name: "milliseconds header wins", header: map[string]string{"Retry-After": "7", "Retry-After-Ms": "1500"}, want: 1500 * time.Millisecond},
		{name: "bad milliseconds falls back", header: map[string]string{"Retry-After": "3", "Retry-After-Ms": "soon"}, want: 3 * time.Second},
		{name: "negative", header: map[string]string{"Retry-After": "-5"}, want: 0},
		{name: "absurd", header: map[string]string{"Retry-After": "1e300"}, want: 0},
		{name: "garbage", header: map[string]string{"Retry-After": "tomorrow"}, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.header {
				h.Set(k, v)
			}
			if got := parseRetryAfter(h, now); got != tt.want {
				t.Fatalf("parseRetryAfter = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestBackoffGrowsWithJitterAndCap(t *testing.T) {
	c := &caller{baseBackoff: 100 * time.Millisecond, maxBackoff: time.Second}
	tests := []struct {
		name     string
		attempt  int
		min, max time.Duration
	}{
		{name: "first retry", attempt: 1, min: 50 * time.Millisecond, max: 100 * time.Millisecond},
		{name: "second retry doubles", attempt: 2, min: 100 * time.Millisecond, max: 200 * time.Millisecond},
		{name: "fourth retry", attempt: 4, min: 400 * time.Millisecond, max: 800 * time.Millisecond},
		{name: "capped", attempt: 30, min: 500 * time.Millisecond, max: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 100 {
				if d := c.backoff(tt.attempt); d < tt.min || d > tt.max {
					t.Fatalf("backoff(%d) = %s, want within [%s, %s]", tt.attempt, d, tt.min, tt.max)
				}
			}
		})
	}
}

func TestErrorMessage(t *testing.T) {
	tests := []struct {
		name string
		body string
		want string
	}{
		{name: "anthropic", body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, want: "overloaded_error: Overloaded"},
		{name: "openai", body: `{"error":{"message":"Invalid 'messages'","type":"invalid_request_error","param":null,"code":null}}`, want: "invalid_request_error: Invalid 'messages'"},
		{name: "ollama", body: `{"error":"model \"llama9\" not found, try pulling it first"}`, want: `model "llama9" not found, try pulling it first`},
		{name: "text", body: "  upstream connect error  ", want: "upstream connect error"},
		{name: "long text is cut on a rune", body: string(make([]byte, 511)) + "é and more", want: string(make([]byte, 511)) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errorMessage([]byte(tt.body)); got != tt.want {
				t.Fatalf("errorMessage = %q, want %q", got, tt.want)
			}
		})
	}
}
