package ghapp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// maxRateLimitRetries bounds how often one request is sent again after a
// rate limit.
const maxRateLimitRetries = 3

// RateLimitError reports a request not sent, or answered 403/429, because
// GitHub's rate limit for its credentials resets only at Reset: later than
// the request may wait.
type RateLimitError struct {
	Reset time.Time
	// Status is the HTTP status that set the limit (403 or 429).
	Status int
}

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("GitHub rate limit (HTTP %d): resets at %s, in %s", e.Status, e.Reset.UTC().Format(time.RFC3339), time.Until(e.Reset).Round(time.Second))
}

// limiter is the rate limit one credential is under.
type limiter struct {
	mu     sync.Mutex
	until  time.Time
	status int
}

func (l *limiter) get() (time.Time, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until, l.status
}

func (l *limiter) set(until time.Time, status int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if until.After(l.until) {
		l.until, l.status = until, status
	}
}

// rateLimited holds requests back while their credential is rate limited
// and sends a request again after a rate-limited answer, when the limit
// resets soon enough: within max and before the request's deadline.
type rateLimited struct {
	next http.RoundTripper
	cr   *credential
	l    *limiter
	max  time.Duration
	c    *Clients
}

func (t *rateLimited) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	for attempt := 0; ; attempt++ {
		if until, status := t.l.get(); time.Now().Before(until) {
			if err := t.wait(ctx, until, status); err != nil {
				return nil, err
			}
		}
		r := req
		if attempt > 0 {
			r = req.Clone(ctx)
			if req.Body != nil && req.Body != http.NoBody {
				if req.GetBody == nil {
					return nil, fmt.Errorf("github: request to %s cannot be sent again after a rate limit", req.URL.Path)
				}
				body, err := req.GetBody()
				if err != nil {
					return nil, err
				}
				r.Body = body
			}
		}
		resp, err := t.next.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode == http.StatusUnauthorized && t.cr != nil && t.cr.installation {
			t.c.drop(t.cr)
		}
		until, limited := rateLimitReset(resp, time.Now())
		if !limited {
			return resp, nil
		}
		t.l.set(until, resp.StatusCode)
		t.c.opts.Logger.Warn("github rate limit", "status", resp.StatusCode, "path", req.URL.Path, "reset", until.UTC().Format(time.RFC3339))
		if attempt >= maxRateLimitRetries || !t.canWait(ctx, until) {
			// The caller sees GitHub's answer (go-github makes it a
			// RateLimitError or AbuseRateLimitError).
			t.c.metrics.rateLimited.WithLabelValues("failed").Inc()
			return resp, nil
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
	}
}

func (t *rateLimited) canWait(ctx context.Context, until time.Time) bool {
	if time.Until(until) > t.max {
		return false
	}
	if d, ok := ctx.Deadline(); ok && d.Before(until) {
		return false
	}
	return true
}

// wait sleeps until the limit resets, or fails at once when it resets too
// late.
func (t *rateLimited) wait(ctx context.Context, until time.Time, status int) error {
	if !t.canWait(ctx, until) {
		t.c.metrics.rateLimited.WithLabelValues("failed").Inc()
		return &RateLimitError{Reset: until, Status: status}
	}
	t.c.metrics.rateLimited.WithLabelValues("waited").Inc()
	timer := time.NewTimer(time.Until(until))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// rateLimitReset reads a rate-limited answer: 403 or 429 with
// Retry-After (a secondary limit), or with x-ratelimit-remaining 0 and
// x-ratelimit-reset (the primary one). A 403 without them is a refusal,
// not a limit.
func rateLimitReset(resp *http.Response, now time.Time) (time.Time, bool) {
	if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusTooManyRequests {
		return time.Time{}, false
	}
	if v := resp.Header.Get("Retry-After"); v != "" {
		if secs, err := strconv.Atoi(v); err == nil && secs >= 0 {
			return now.Add(time.Duration(secs) * time.Second), true
		}
		if t, err := http.ParseTime(v); err == nil {
			return t, true
		}
	}
	if resp.Header.Get("X-Ratelimit-Remaining") == "0" {
		if secs, err := strconv.ParseInt(resp.Header.Get("X-Ratelimit-Reset"), 10, 64); err == nil {
			return time.Unix(secs, 0), true
		}
		// No reset given: GitHub's advice is to wait a minute.
		return now.Add(time.Minute), true
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		return now.Add(time.Minute), true
	}
	return time.Time{}, false
}
