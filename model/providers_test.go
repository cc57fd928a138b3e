package model_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
)

// httpProvider is one HTTP provider under the shared contract tests.
type httpProvider struct {
	name string
	// make builds the provider against base with opts.
	make func(t *testing.T, base string, spec policies.Model, opts ...model.Option) model.Model
	// ok is a successful response body whose text is okText.
	ok     string
	okText string
}

func httpProviders() []httpProvider {
	return []httpProvider{
		{
			name: "anthropic",
			make: func(t *testing.T, base string, spec policies.Model, opts ...model.Option) model.Model {
				return newAnthropic(t, base, spec, opts...)
			},
			ok:     anthropicText,
			okText: "LGTM.",
		},
		{
			name: "openai",
			make: func(t *testing.T, base string, spec policies.Model, opts ...model.Option) model.Model {
				return newOpenAI(t, base, spec, opts...)
			},
			ok:     openAIText,
			okText: "LGTM.",
		},
	}
}

var hello = model.Request{Messages: []model.Message{{Role: model.RoleUser, Text: "hello"}}}

// TestHTTPProviderFailures runs every failure mode against every HTTP
// provider: what is retried, what is not, and what the caller sees.
func TestHTTPProviderFailures(t *testing.T) {
	for _, p := range httpProviders() {
		t.Run(p.name, func(t *testing.T) {
			tests := []struct {
				name     string
				handlers []http.HandlerFunc
				attempts int
				wantKind error // nil: success with p.okText
				wantReqs int
				check    func(t *testing.T, err error)
			}{
				{
					name:     "429 with Retry-After then success",
					handlers: []http.HandlerFunc{reply(http.StatusTooManyRequests, `{"error":{"type":"rate_limit_error","message":"slow down"}}`, "Retry-After", "1"), reply(http.StatusOK, p.ok)},
					attempts: 3,
					wantReqs: 2,
				},
				{
					name:     "500 then success",
					handlers: []http.HandlerFunc{reply(http.StatusInternalServerError, `{"error":{"message":"oops"}}`), reply(http.StatusOK, p.ok)},
					attempts: 3,
					wantReqs: 2,
				},
				{
					name:     "overloaded 529 then success",
					handlers: []http.HandlerFunc{reply(529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`), reply(http.StatusOK, p.ok)},
					attempts: 3,
					wantReqs: 2,
				},
				{
					name:     "500 forever",
					handlers: []http.HandlerFunc{reply(http.StatusBadGateway, `upstream unavailable`)},
					attempts: 3,
					wantKind: model.ErrServer,
					wantReqs: 3,
					check: func(t *testing.T, err error) {
						if !strings.Contains(err.Error(), "after 3 attempts") || !strings.Contains(err.Error(), "upstream unavailable") {
							t.Errorf("error %q should say how many attempts and what the server said", err)
						}
						var me *model.Error
						if !errors.As(err, &me) || me.StatusCode != http.StatusBadGateway || me.Provider != p.name {
							t.Errorf("error = %#v, want *model.Error with HTTP 502 from %s", err, p.name)
						}
					},
				},
				{
					name:     "429 forever",
					handlers: []http.HandlerFunc{reply(http.StatusTooManyRequests, `{"error":{"message":"quota"}}`)},
					attempts: 2,
					wantKind: model.ErrRateLimited,
					wantReqs: 2,
				},
				{
					name:     "Retry-After beyond the cap is left to the caller",
					handlers: []http.HandlerFunc{reply(http.StatusTooManyRequests, `{}`, "Retry-After", "3600")},
					attempts: 5,
					wantKind: model.ErrRateLimited,
					wantReqs: 1,
					check: func(t *testing.T, err error) {
						var me *model.Error
						if !errors.As(err, &me) || me.RetryAfter != time.Hour {
							t.Errorf("error = %#v, want RetryAfter 1h for the caller to schedule", err)
						}
					},
				},
				{
					name:     "400 is not retried",
					handlers: []http.HandlerFunc{reply(http.StatusBadRequest, `{"error":{"type":"invalid_request_error","message":"messages: roles must alternate"}}`)},
					attempts: 3,
					wantKind: model.ErrBadRequest,
					wantReqs: 1,
					check: func(t *testing.T, err error) {
						if !strings.Contains(err.Error(), "roles must alternate") {
							t.Errorf("error %q should carry the server's message", err)
						}
					},
				},
				{
					name:     "401 is not retried",
					handlers: []http.HandlerFunc{reply(http.StatusUnauthorized, `{"error":{"message":"invalid x-api-key"}}`)},
					attempts: 3,
					wantKind: model.ErrBadRequest,
					wantReqs: 1,
				},
				{
					name:     "server asks not to retry a 500",
					handlers: []http.HandlerFunc{reply(http.StatusInternalServerError, `{}`, "X-Should-Retry", "false")},
					attempts: 3,
					wantKind: model.ErrServer,
					wantReqs: 1,
				},
				{
					name:     "body cut off mid-JSON",
					handlers: []http.HandlerFunc{cutOff(p.ok, len(p.ok)/2)},
					attempts: 2,
					wantKind: model.ErrBadResponse,
					wantReqs: 2,
					check: func(t *testing.T, err error) {
						if !strings.Contains(err.Error(), "cut off") {
							t.Errorf("error %q should say the body was cut off", err)
						}
					},
				},
				{
					name:     "body cut off once then complete",
					handlers: []http.HandlerFunc{cutOff(p.ok, 10), reply(http.StatusOK, p.ok)},
					attempts: 2,
					wantReqs: 2,
				},
				{
					name:     "body over the size bound",
					handlers: []http.HandlerFunc{reply(http.StatusOK, `{"pad":"`+strings.Repeat("x", 4096)+`"}`)},
					attempts: 3,
					wantKind: model.ErrBadResponse,
					wantReqs: 1,
				},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					f := newFake(t, tt.handlers...)
					m := p.make(t, f.URL, policies.Model{}, append(fastRetries(tt.attempts), model.WithMaxResponseBytes(4096))...)
					got, err := m.Complete(t.Context(), hello)
					switch {
					case tt.wantKind == nil && err != nil:
						t.Fatalf("Complete: %v", err)
					case tt.wantKind == nil && got.Text != p.okText:
						t.Fatalf("text = %q, want %q", got.Text, p.okText)
					case tt.wantKind != nil && !errors.Is(err, tt.wantKind):
						t.Fatalf("err = %v, want %v", err, tt.wantKind)
					}
					if n := f.requests(); n != tt.wantReqs {
						t.Errorf("server saw %d requests, want %d", n, tt.wantReqs)
					}
					if tt.check != nil {
						tt.check(t, err)
					}
				})
			}
		})
	}
}

// TestHTTPProviderCancel: a cancel while the server is slow ends the call
// at once, with context.Canceled in the chain, and the server sees its
// request cancelled.
func TestHTTPProviderCancel(t *testing.T) {
	for _, p := range httpProviders() {
		t.Run(p.name, func(t *testing.T) {
			arrived, gone := make(chan struct{}, 1), make(chan struct{}, 1)
			f := newFake(t, hang(arrived, gone))
			m := p.make(t, f.URL, policies.Model{}, fastRetries(3)...)
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() {
				_, err := m.Complete(ctx, hello)
				done <- err
			}()
			<-arrived
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled in the chain", err)
			}
			<-gone
			if n := f.requests(); n != 1 {
				t.Errorf("server saw %d requests, want 1: a cancelled call is not retried", n)
			}
		})
	}
}

// TestHTTPProviderCancelDuringBackoff: a cancel while waiting out a
// Retry-After ends the call at once.
func TestHTTPProviderCancelDuringBackoff(t *testing.T) {
	for _, p := range httpProviders() {
		t.Run(p.name, func(t *testing.T) {
			arrived := make(chan struct{}, 1)
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
				arrived <- struct{}{}
				reply(http.StatusTooManyRequests, `{}`, "Retry-After", "50")(w, r)
			})
			m := p.make(t, f.URL, policies.Model{}, fastRetries(3)...)
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() {
				_, err := m.Complete(ctx, hello)
				done <- err
			}()
			<-arrived
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled in the chain", err)
			}
			if n := f.requests(); n != 1 {
				t.Errorf("server saw %d requests, want 1", n)
			}
		})
	}
}

// TestHTTPProviderTimeout: an attempt that outlasts the definition's
// timeout is abandoned and retried; when all are, the call fails with
// ErrTimeout.
func TestHTTPProviderTimeout(t *testing.T) {
	for _, p := range httpProviders() {
		t.Run(p.name, func(t *testing.T) {
			gone := make(chan struct{}, 2)
			f := newFake(t, hang(nil, gone))
			m := p.make(t, f.URL, policies.Model{Timeout: policies.Duration(20 * time.Millisecond)}, fastRetries(2)...)
			_, err := m.Complete(t.Context(), hello)
			if !errors.Is(err, model.ErrTimeout) {
				t.Fatalf("err = %v, want ErrTimeout", err)
			}
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v: a provider timeout is not the caller's context ending", err)
			}
			<-gone
			<-gone
			if n := f.requests(); n != 2 {
				t.Errorf("server saw %d requests, want 2", n)
			}
		})
	}
}

// TestHTTPProviderTimeoutThenSuccess: a slow first attempt does not sink
// the call.
func TestHTTPProviderTimeoutThenSuccess(t *testing.T) {
	for _, p := range httpProviders() {
		t.Run(p.name, func(t *testing.T) {
			f := newFake(t, hang(nil, nil), reply(http.StatusOK, p.ok))
			m := p.make(t, f.URL, policies.Model{Timeout: policies.Duration(20 * time.Millisecond)}, fastRetries(2)...)
			got, err := m.Complete(t.Context(), hello)
			if err != nil || got.Text != p.okText {
				t.Fatalf("Complete = %q, %v; want %q", got.Text, err, p.okText)
			}
		})
	}
}

// TestHTTPProviderUnreachable: a server that refuses connections is
// retried, then reported as a server error naming the address.
func TestHTTPProviderUnreachable(t *testing.T) {
	for _, p := range httpProviders() {
		t.Run(p.name, func(t *testing.T) {
			f := newFake(t, reply(http.StatusOK, p.ok))
			base := f.URL
			f.Close()
			m := p.make(t, base, policies.Model{}, fastRetries(2)...)
			_, err := m.Complete(t.Context(), hello)
			if !errors.Is(err, model.ErrServer) || !strings.Contains(err.Error(), strings.TrimPrefix(base, "http://")) {
				t.Fatalf("err = %v, want ErrServer naming %s", err, base)
			}
		})
	}
}
