package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jetloop/jetloop/policies"
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
