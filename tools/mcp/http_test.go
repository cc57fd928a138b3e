package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/tools/mcp"
	"github.com/jetloop/jetloop/tools/mcp/mcptest"
)

// TestHeadersAreNotSentWhereTheServerRedirects: a declared server that
// redirects to another origin must not hand that origin the headers
// headers_env sends (a token of the worker's), at apply or at a call.
func TestHeadersAreNotSentWhereTheServerRedirects(t *testing.T) {
	leaked := make(chan string, 64)
	other := mcptest.ServeHTTP(t, func() *sdk.Server { return mcptest.NewServer(mcptest.Options{Name: "srv"}) },
		func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if v := r.Header.Get("Authorization"); v != "" {
					select {
					case leaked <- v:
					default:
					}
				}
				next.ServeHTTP(w, r)
			})
		})
	declared := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(declared.Close)
	env := map[string]string{"SRV_TOKEN": "Bearer s3cret"}
	p := newPool(t, mcp.Options{Getenv: func(k string) string { return env[k] }, MaxAttempts: 1})
	c, err := policies.Compile(policies.Definition{Name: "a", Model: policies.Model{Provider: "scripted"}, MCPServers: []policies.MCPServer{
		{Name: "srv", URL: declared.URL + "/mcp", HeadersEnv: map[string]string{"Authorization": "SRV_TOKEN"}, Tools: []string{"echo"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = p.Admit(ctx, c, "a.yaml")
	if err == nil || !strings.Contains(err.Error(), "redirected to") {
		t.Errorf("admission through a redirect to another origin = %v, want it refused", err)
	}
	select {
	case v := <-leaked:
		t.Fatalf("a server the definition does not name got the Authorization header %q", v)
	default:
	}
}

// TestMaxMessageBoundsJSONResponses: a server answering application/json
// (not an event stream) is held to MaxMessage too, so a huge answer
// cannot make the worker read it all into memory.
func TestMaxMessageBoundsJSONResponses(t *testing.T) {
	srv := mcptest.NewServer(mcptest.Options{Name: "srv"})
	h := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, &sdk.StreamableHTTPOptions{JSONResponse: true}))
	t.Cleanup(h.Close)
	p := newPool(t, mcp.Options{MaxMessage: 64 << 10, MaxAttempts: 1})
	ts := toolMap(t, p, admit(t, p, policies.MCPServer{Name: "srv", URL: h.URL, Tools: []string{"echo"}}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if res, err := call(t, ctx, ts["srv.echo"], "s1", `{"text":"small"}`); err != nil || res.IsError || res.Content != "small" {
		t.Fatalf("a small answer = %+v, %v", res, err)
	}
	big := strings.Repeat("x", 256<<10)
	res, err := call(t, ctx, ts["srv.echo"], "s1", `{"text":"`+big+`"}`)
	if err != nil || !res.IsError || !strings.Contains(res.Content, "larger than the bound") {
		t.Fatalf("an answer over a MaxMessage of %d bytes = %d bytes of content (%v), %v; want an error result saying it is too large", 64<<10, len(res.Content), res.IsError, err)
	}
}

// TestToolListIsBoundedInTotal: a server whose list pages are each within
// MaxMessage but that lists megabytes of tools the definition never
// admits is refused instead of held in memory.
func TestToolListIsBoundedInTotal(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "big", Version: "1"}, &sdk.ServerOptions{PageSize: 1})
	noop := func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{}, nil
	}
	srv.AddTool(&sdk.Tool{Name: "small", Description: "Small.", InputSchema: json.RawMessage(`{"type":"object"}`)}, noop)
	for i := range 48 {
		srv.AddTool(&sdk.Tool{Name: fmt.Sprintf("t%02d", i), Description: strings.Repeat("d", 512<<10), InputSchema: json.RawMessage(`{"type":"object"}`)}, noop)
	}
	h := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(h.Close)
	p := newPool(t, mcp.Options{MaxAttempts: 1})
	c, err := policies.Compile(policies.Definition{Name: "a", Model: policies.Model{Provider: "scripted"}, MCPServers: []policies.MCPServer{
		{Name: "big", URL: h.URL, Tools: []string{"small"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.Admit(ctx, c, "a.yaml"); err == nil || !strings.Contains(err.Error(), "tool list is larger than") {
		t.Fatalf("admission of a server listing 24 MiB of tools = %v, want it refused as too large", err)
	}
}

// cutAfterFirstWrite passes a response's first write (the stream's
// priming event) through, then drops the connection, as a proxy or a
// network failure would in the middle of a call.
type cutAfterFirstWrite struct {
	http.ResponseWriter
	cut    bool
	cancel context.CancelFunc // the request's, as the server ends it when its client goes
}

func (w *cutAfterFirstWrite) Write(b []byte) (int, error) {
	if w.cut {
		return 0, errors.New("connection cut")
	}
	n, err := w.ResponseWriter.Write(b)
	w.ResponseWriter.(http.Flusher).Flush()
	w.cut = true
	if conn, _, herr := w.ResponseWriter.(http.Hijacker).Hijack(); herr == nil {
		_ = conn.Close()
	}
	w.cancel()
	return n, err
}

func (w *cutAfterFirstWrite) Flush() {}

// TestInterruptedStreamIsResumed: the stream of a call in flight is cut;
// the SDK resumes it with Last-Event-ID from the server's event store, so
// the call's answer arrives and the call is not sent again.
func TestInterruptedStreamIsResumed(t *testing.T) {
	rec := mcptest.NewRecorder()
	gate := make(chan struct{})
	var once sync.Once
	resumed := make(chan string, 8)
	h := mcptest.ServeHTTP(t, func() *sdk.Server {
		return mcptest.NewServer(mcptest.Options{Name: "srv", Record: rec.Record, SlowGate: gate})
	}, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if id := r.Header.Get("Last-Event-ID"); r.Method == http.MethodGet && id != "" {
				select {
				case resumed <- id:
				default:
				}
			}
			if r.Method == http.MethodPost {
				body, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(body))
				if bytes.Contains(body, []byte(`"tools/call"`)) && bytes.Contains(body, []byte(`"slow"`)) {
					cut := false
					once.Do(func() { cut = true })
					if cut {
						ctx, cancel := context.WithCancel(r.Context())
						defer cancel()
						next.ServeHTTP(&cutAfterFirstWrite{ResponseWriter: w, cancel: cancel}, r.WithContext(ctx))
						return
					}
				}
			}
			next.ServeHTTP(w, r)
		})
	})
	p := newPool(t, mcp.Options{})
	ts := toolMap(t, p, admit(t, p, policies.MCPServer{Name: "srv", URL: h.URL, Tools: []string{"slow"}}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type answer struct {
		res tools.Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := call(t, ctx, ts["srv.slow"], "s1", `{}`)
		done <- answer{res, err}
	}()
	rec.Wait(t, "call", "slow", 30*time.Second)
	select {
	case <-resumed:
	case a := <-done:
		t.Fatalf("the call ended before its stream was resumed: %+v, %v", a.res, a.err)
	case <-time.After(30 * time.Second):
		t.Fatal("no GET with Last-Event-ID after the call's stream was cut")
	}
	close(gate)
	select {
	case a := <-done:
		if a.err != nil || a.res.IsError || a.res.Content != "done" {
			t.Fatalf("resumed call = %+v, %v", a.res, a.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the resumed call did not return")
	}
	if n := rec.Count("call", "slow"); n != 1 {
		t.Fatalf("slow reached the server %d times, want 1", n)
	}
}

// TestServerStderrDoesNotCarryItsSecrets: a stdio server that fails and
// prints the secret it was given leaves it out of the error (which goes
// to apply's answer, logs and transcripts).
func TestServerStderrDoesNotCarryItsSecrets(t *testing.T) {
	env := map[string]string{"SRV_TOKEN": "s3cret-value"}
	p := newPool(t, mcp.Options{Getenv: func(k string) string { return env[k] }, MaxAttempts: 1})
	c, err := policies.Compile(policies.Definition{Name: "a", Model: policies.Model{Provider: "scripted"}, MCPServers: []policies.MCPServer{
		{Name: "srv", Command: []string{"sh", "-c", `echo "bad token $TOKEN" >&2; exit 3`}, Env: map[string]string{"TOKEN": "SRV_TOKEN"}, Tools: []string{"echo"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = p.Admit(ctx, c, "a.yaml")
	if err == nil || !strings.Contains(err.Error(), "bad token") {
		t.Fatalf("admission of a failing server = %v, want its stderr in the error", err)
	}
	if strings.Contains(err.Error(), "s3cret-value") {
		t.Fatalf("the error carries the server's secret: %v", err)
	}
}
