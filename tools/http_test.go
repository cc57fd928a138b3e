package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/tools"
)

func argsJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestHTTPTools(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /text", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Seen-Auth", r.Header.Get("Authorization"))
		io.WriteString(w, "hello from the server")
	})
	mux.HandleFunc("GET /missing", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	mux.HandleFunc("GET /big", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, strings.Repeat("b", 5000)) })
	mux.HandleFunc("GET /binary", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Write([]byte{0x89, 'P', 'N', 'G', 0, 0, 0xff})
	})
	mux.HandleFunc("GET /redirect", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/text", http.StatusFound) })
	mux.HandleFunc("GET /loop", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop", http.StatusFound) })
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, r.Method+" "+r.Header.Get("Content-Type")+" "+string(body))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	r := shellRegistry(t, tools.BuiltinConfig{HTTPAllowPrivate: true, HTTPMaxBody: 1000})
	tests := []struct {
		name, tool string
		args       map[string]any
		isError    bool
		want       []string
		not        []string
	}{
		{name: "get", tool: "http_get", args: map[string]any{"url": srv.URL + "/text", "headers": map[string]string{"Authorization": "Bearer t"}},
			want: []string{"HTTP/1.1 200 OK", "Content-Type: text/plain", "X-Seen-Auth: Bearer t", "\n\nhello from the server"}},
		{name: "status is reported, not an error", tool: "http_get", args: map[string]any{"url": srv.URL + "/missing"},
			want: []string{"404 Not Found", "404 page not found"}},
		{name: "body capped", tool: "http_get", args: map[string]any{"url": srv.URL + "/big"},
			want: []string{strings.Repeat("b", 1000) + "\n[body truncated at 1000 bytes]"}, not: []string{strings.Repeat("b", 1001)}},
		{name: "binary body not shown", tool: "http_get", args: map[string]any{"url": srv.URL + "/binary"},
			want: []string{`[binary body of 7 bytes (Content-Type "image/png") not shown]`}},
		{name: "redirect followed", tool: "http_get", args: map[string]any{"url": srv.URL + "/redirect"}, want: []string{"hello from the server"}},
		{name: "redirect loop stopped", tool: "http_get", args: map[string]any{"url": srv.URL + "/loop"}, isError: true, want: []string{"stopped after 5 redirects"}},
		{name: "file scheme refused", tool: "http_get", args: map[string]any{"url": "file:///etc/passwd"}, isError: true, want: []string{`scheme "file" is not allowed`}},
		{name: "no host", tool: "http_get", args: map[string]any{"url": "http:///x"}, isError: true, want: []string{"has no host"}},
		{name: "connection refused", tool: "http_get", args: map[string]any{"url": "http://127.0.0.1:1/"}, isError: true, want: []string{"connection refused"}},
		{name: "request with body", tool: "http_request", args: map[string]any{"method": "POST", "url": srv.URL + "/echo", "headers": map[string]string{"Content-Type": "application/json"}, "body": `{"a":1}`},
			want: []string{"201 Created", `POST application/json {"a":1}`}},
		{name: "request method checked", tool: "http_request", args: map[string]any{"method": "BREW", "url": srv.URL + "/echo"}, isError: true, want: []string{"method"}},
		{name: "get takes no method", tool: "http_get", args: map[string]any{"url": srv.URL + "/echo", "method": "POST"}, isError: true, want: []string{"method"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := r.Run(t.Context(), tt.tool, call(argsJSON(t, tt.args)))
			if err != nil {
				t.Fatal(err)
			}
			if res.IsError != tt.isError {
				t.Fatalf("IsError = %v, want %v: %s", res.IsError, tt.isError, res.Content)
			}
			for _, w := range tt.want {
				if !strings.Contains(res.Content, w) {
					t.Fatalf("content %q lacks %q", res.Content, w)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(res.Content, n) {
					t.Fatalf("content has %q", n)
				}
			}
		})
	}
}

func TestHTTPRefusesPrivateAddresses(t *testing.T) {
	hit := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hit <- struct{}{} }))
	defer srv.Close()
	r := shellRegistry(t, tools.BuiltinConfig{})
	for _, u := range []string{srv.URL, "http://169.254.169.254/latest/meta-data/", "http://[::1]:1/"} {
		res, err := r.Run(t.Context(), "http_get", call(argsJSON(t, map[string]any{"url": u})))
		if err != nil || !res.IsError || !strings.Contains(res.Content, "not a public address") {
			t.Fatalf("get %s = %+v, %v; want it refused", u, res, err)
		}
	}
	select {
	case <-hit:
		t.Fatal("the loopback server was reached")
	default:
	}
}

func TestHTTPHonoursCancel(t *testing.T) {
	arrived := make(chan struct{})
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	r := shellRegistry(t, tools.BuiltinConfig{HTTPAllowPrivate: true})
	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-arrived; cancel() }()
	res, err := r.Run(ctx, "http_get", call(argsJSON(t, map[string]any{"url": srv.URL})))
	if !errors.Is(err, context.Canceled) || !res.IsError || !strings.Contains(res.Content, "stopped") {
		t.Fatalf("Run = %+v, %v; want a cancelled error result", res, err)
	}
}

func TestHTTPTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	r := shellRegistry(t, tools.BuiltinConfig{HTTPAllowPrivate: true, HTTPTimeout: 50 * time.Millisecond})
	res, err := r.Run(t.Context(), "http_get", call(argsJSON(t, map[string]any{"url": srv.URL})))
	if err != nil || !res.IsError || !strings.Contains(res.Content, "timed out after 50ms") {
		t.Fatalf("Run = %+v, %v; want a timeout result", res, err)
	}
}
