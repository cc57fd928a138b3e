package model

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// errAttemptTimeout is the cause of an attempt's context when its own
// timeout, not the caller's context, ended it.
var errAttemptTimeout = errors.New("attempt timed out")

// caller posts JSON to a provider with the retry policy shared by the HTTP
// providers: each attempt bounded by timeout; 408, 429, 5xx, connection
// failures and cut-off bodies retried with exponential backoff and jitter,
// or after the server's Retry-After when it gave one; every wait and every
// request ended at once by the caller's ctx.
type caller struct {
	provider      string
	client        *http.Client
	timeout       time.Duration
	maxAttempts   int
	baseBackoff   time.Duration
	maxBackoff    time.Duration
	maxRetryAfter time.Duration
	maxBody       int64
	log           *slog.Logger
	metrics       *Metrics
}

func newCaller(provider string, timeout time.Duration, o options) *caller {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &caller{
		provider:      provider,
		client:        o.client,
		timeout:       timeout,
		maxAttempts:   o.maxAttempts,
		baseBackoff:   o.baseBackoff,
		maxBackoff:    o.maxBackoff,
		maxRetryAfter: o.maxRetryAfter,
		maxBody:       o.maxResponseBytes,
		log:           o.logger,
		metrics:       o.metrics,
	}
}

// post sends body to url with header and returns the body of the first 2xx
// answer. It fails with a *Error whose Kind is one of the sentinels, or
// with ctx's error (in the chain) when ctx ended the call.
func (c *caller) post(ctx context.Context, url string, header http.Header, body []byte) ([]byte, error) {
	var last *Error
	attempt := 1
	for ; ; attempt++ {
		b, retry, err := c.attempt(ctx, url, header, body)
		if err == nil {
			return b, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: call to %s ended by the caller on attempt %d: %w", c.provider, url, attempt, ctx.Err())
		}
		last = err
		if !retry || attempt >= c.maxAttempts {
			break
		}
		wait := c.backoff(attempt)
		if err.RetryAfter > 0 {
			if err.RetryAfter > c.maxRetryAfter {
				break // the caller schedules that pause, not this call
			}
			wait = err.RetryAfter
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			break // the caller's deadline would pass during the pause
		}
		c.log.LogAttrs(ctx, slog.LevelWarn, "model call failed, retrying",
			slog.String("provider", c.provider),
			slog.Int("attempt", attempt),
			slog.Int("status", err.StatusCode),
			slog.String("error", err.Error()),
			slog.Duration("wait", wait))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%s: call to %s ended by the caller after attempt %d: %w", c.provider, url, attempt, ctx.Err())
		case <-t.C:
		}
	}
	if attempt > 1 {
		last.Message = fmt.Sprintf("after %d attempts: %s", attempt, last.Message)
	}
	return nil, last
}

// attempt makes one request. retry reports whether another attempt may
// succeed.
func (c *caller) attempt(ctx context.Context, url string, header http.Header, body []byte) (_ []byte, retry bool, _ *Error) {
	actx, cancel := context.WithTimeoutCause(ctx, c.timeout, errAttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, false, &Error{Provider: c.provider, Kind: ErrBadRequest, Message: fmt.Sprintf("request to %q: %v", url, err)}
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")

	resp, err := c.client.Do(req)
	if err != nil {
		c.metrics.observeAttempt(c.provider, 0)
		if context.Cause(actx) == errAttemptTimeout {
			return nil, true, &Error{Provider: c.provider, Kind: ErrTimeout, Message: fmt.Sprintf("no response from %s within %s", url, c.timeout)}
		}
		return nil, true, &Error{Provider: c.provider, Kind: ErrServer, Message: fmt.Sprintf("POST %s: %v", url, unwrapURLError(err))}
	}
	defer resp.Body.Close()
	c.metrics.observeAttempt(c.provider, resp.StatusCode)

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// The body of an error is best effort: its status decides.
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes))
		e := &Error{
			Provider:   c.provider,
			StatusCode: resp.StatusCode,
			RetryAfter: parseRetryAfter(resp.Header, time.Now()),
			Message:    errorMessage(b),
		}
		switch {
		case resp.StatusCode == http.StatusTooManyRequests:
			e.Kind, retry = ErrRateLimited, true
		case resp.StatusCode == http.StatusRequestTimeout:
			e.Kind, retry = ErrTimeout, true
		case resp.StatusCode >= 500:
			e.Kind, retry = ErrServer, true
		case resp.StatusCode >= 400:
			e.Kind = ErrBadRequest
		default:
			e.Kind = ErrBadResponse
		}
		// Anthropic says whether a retry may help; trust it either way.
		switch strings.ToLower(resp.Header.Get("X-Should-Retry")) {
		case "true":
			retry = true
		case "false":
			retry = false
		}
		return nil, retry, e
	}

	b, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBody+1))
	if err != nil {
		if context.Cause(actx) == errAttemptTimeout {
			return nil, true, &Error{Provider: c.provider, StatusCode: resp.StatusCode, Kind: ErrTimeout, Message: fmt.Sprintf("response from %s not complete within %s (%d bytes read)", url, c.timeout, len(b))}
		}
		return nil, true, &Error{Provider: c.provider, StatusCode: resp.StatusCode, Kind: ErrBadResponse, Message: fmt.Sprintf("response body cut off after %d bytes: %v", len(b), err)}
	}
	if int64(len(b)) > c.maxBody {
		return nil, false, &Error{Provider: c.provider, StatusCode: resp.StatusCode, Kind: ErrBadResponse, Message: fmt.Sprintf("response body larger than %d bytes", c.maxBody)}
	}
	return b, false, nil
}

// backoff is the pause after the given failed attempt: base doubled per
// retry, capped, with the upper half jittered so that clients rate
// limited together do not retry together.
func (c *caller) backoff(attempt int) time.Duration {
	d := c.baseBackoff
	for i := 1; i < attempt && d < c.maxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.maxBackoff)
	half := d / 2
	return half + rand.N(half+1)
}

// parseRetryAfter reads the pause a server asks for: retry-after-ms
// (milliseconds), or Retry-After as seconds or an HTTP date. Zero if
// absent, unparsable or in the past.
func parseRetryAfter(h http.Header, now time.Time) time.Duration {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 && ms < 1e12 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 || s > 1e9 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// errorMessage extracts the message of an error body: {"error":{"message":
// ...}} (Anthropic, OpenAI, vLLM), {"error":"..."} (Ollama), or the start
// of the body as text.
func errorMessage(b []byte) string {
	var v struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(b, &v) == nil && len(v.Error) > 0 {
		var obj struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		}
		if json.Unmarshal(v.Error, &obj) == nil && obj.Message != "" {
			if obj.Type != "" {
				return obj.Type + ": " + obj.Message
			}
			return obj.Message
		}
		var s string
		if json.Unmarshal(v.Error, &s) == nil && s != "" {
			return s
		}
	}
	return truncate(strings.TrimSpace(string(b)), 512)
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// unwrapURLError drops the *url.Error wrapper, whose text repeats the
// method and URL the message already names.
func unwrapURLError(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok && ue.Err != nil {
		return ue.Err
	}
	return err
}
