package worker_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/tools/mcp"
	"github.com/jetloop/jetloop/tools/mcp/mcptest"
	"github.com/jetloop/jetloop/worker"
)

// TestMCPToolSteps runs MCP calls as tool steps in a worker of this
// process (for the race detector): a call with its result in the
// transcript, then a cancel of the session during a slow call, which the
// server hears as notifications/cancelled.
func TestMCPToolSteps(t *testing.T) {
	e := setup(t)
	rec := mcptest.NewRecorder()
	h := mcptest.ServeHTTP(t, func() *sdk.Server { return mcptest.NewServer(mcptest.Options{Name: "srv", Record: rec.Record}) })
	c, err := policies.Compile(policies.Definition{Name: "m", Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{
		{ToolCalls: []policies.ScriptToolCall{{Name: "srv.echo", Args: map[string]any{"text": "hello"}}, {Name: "srv.slow"}}},
		{Text: "Never."},
	}}, MCPServers: []policies.MCPServer{{Name: "srv", URL: h.URL, Tools: []string{"echo", "slow"}}}})
	if err != nil {
		t.Fatal(err)
	}
	admitter, err := mcp.NewPool(mcp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := admitter.Admit(ctx, c, "m.yaml"); err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(tools.RegistryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.start(t, worker.Config{Definitions: defs{"m": c.Definition}, Agents: []string{"m"}, Tools: worker.RegistryTools(reg)})
	ref := e.ref(t, "m", "s1")
	e.send(t, ref, "go")
	rec.Wait(t, "call", "slow", time.Minute)
	if _, err := control.Publish(ctx, e.js, e.names, ref, control.Message{Verb: control.Cancel}); err != nil {
		t.Fatal(err)
	}
	rec.Wait(t, "notifications/cancelled", "", 30*time.Second)
	tr := e.waitStatus(t, ref, record.StatusCancelled)
	var got []string
	for _, en := range tr.Transcript {
		if en.Kind == record.KindToolResult {
			got = append(got, en.Name+"="+en.Result)
		}
	}
	if len(got) != 2 || got[0] != "srv.echo=hello" {
		t.Fatalf("results %q", got)
	}
}

// TestMCPConnectionClosedWhenTheSessionRests: a session that rests holds
// no MCP connection; the server sees its MCP session ended (DELETE).
func TestMCPConnectionClosedWhenTheSessionRests(t *testing.T) {
	e := setup(t)
	deleted := make(chan string, 4)
	h := mcptest.ServeHTTP(t, func() *sdk.Server { return mcptest.NewServer(mcptest.Options{Name: "srv"}) },
		func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodDelete {
					select {
					case deleted <- r.Header.Get("Mcp-Session-Id"):
					default:
					}
				}
				next.ServeHTTP(w, r)
			})
		})
	c, err := policies.Compile(policies.Definition{Name: "m", Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{
		{ToolCalls: []policies.ScriptToolCall{{Name: "srv.echo", Args: map[string]any{"text": "hello"}}}},
		{Text: "Done."},
	}}, MCPServers: []policies.MCPServer{{Name: "srv", URL: h.URL, Tools: []string{"echo"}}}})
	if err != nil {
		t.Fatal(err)
	}
	admitter, err := mcp.NewPool(mcp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := admitter.Admit(ctx, c, "m.yaml"); err != nil {
		t.Fatal(err)
	}
	admitter.Close()
	// Admission's own connection ended with it.
	select {
	case <-deleted:
	case <-time.After(30 * time.Second):
		t.Fatal("admission's connection was not closed")
	}
	reg, err := tools.NewRegistry(tools.RegistryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.start(t, worker.Config{Definitions: defs{"m": c.Definition}, Agents: []string{"m"}, Tools: worker.RegistryTools(reg)})
	ref := e.ref(t, "m", "s1")
	e.send(t, ref, "go")
	e.waitStatus(t, ref, record.StatusDone)
	select {
	case id := <-deleted:
		if id == "" {
			t.Fatal("DELETE without Mcp-Session-Id")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the session rests and its MCP connection is still open")
	}
}
