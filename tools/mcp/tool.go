package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/tools"
)

// Kinds of catalog change.
const (
	ChangeDescription = "description"
	ChangeSchema      = "schema"
	ChangeRemoved     = "removed"
)

// Change is an admitted tool that a server describes otherwise than the
// catalog recorded when the agent was applied. The tool is withheld from
// the session's calls until a definition recording the new catalog is
// applied and runs, unless the server is declared on_change: follow and
// the tool is still offered: then its calls reach the server. The model
// is shown the recorded catalog either way.
type Change struct {
	Agent   string `json:"agent"`
	Session string `json:"session"`
	// Server is the server's name in the definition, Tool the tool's name
	// on the server and Mounted its name for the model.
	Server  string `json:"server"`
	Tool    string `json:"tool"`
	Mounted string `json:"mounted"`
	// Kind is ChangeDescription, ChangeSchema or ChangeRemoved.
	Kind string `json:"kind"`
	// Recorded is what apply recorded and Now what the server says now
	// (the description, or the schema as compact JSON).
	Recorded string `json:"recorded,omitempty"`
	Now      string `json:"now,omitempty"`
	// Found is "connect" or "list_changed".
	Found string `json:"found"`
	// Withheld reports whether the tool's calls are refused (on_change:
	// withhold, or the tool is gone) or still reach the server (follow).
	Withheld bool      `json:"withheld"`
	Time     time.Time `json:"time"`
}

// tool is one admitted tool of a server, for every session of an agent.
type tool struct {
	p     *Pool
	srv   policies.MCPServer
	fp    string
	entry policies.MCPTool
}

func (t *tool) Spec() tools.Spec {
	desc := t.entry.Description
	if strings.TrimSpace(desc) == "" {
		desc = fmt.Sprintf("Tool %s of the MCP server %s.", t.entry.Name, t.srv.Name)
	}
	return tools.Spec{
		Name:        t.srv.Mount(t.entry.Name),
		Description: desc,
		Schema:      t.entry.Schema,
		ReplaySafe:  t.srv.IsReplaySafe(t.entry.Name),
		State:       tools.Connection,
		Timeout:     t.srv.Timeout.D(),
	}
}

// maxResends bounds how often one call is sent again on a new connection
// after the old one turned out to be gone.
const maxResends = 2

// Call makes the call on the session's connection to the server. A cancel
// of ctx stops the wait at once; the SDK then tells the server with
// notifications/cancelled. A call that could not reach the server is
// sent again on a new connection; one whose connection broke while the
// server had it is sent again only when it is replay-safe, and otherwise
// answered "may or may not have run".
func (t *tool) Call(ctx context.Context, call tools.Call) (tools.Result, error) {
	c, err := t.p.conn(call.Agent, call.Session, t.srv, t.fp, call.WorkDir)
	if err != nil {
		return tools.Result{}, err
	}
	name := t.srv.Mount(t.entry.Name)
	args := json.RawMessage(bytes.TrimSpace(call.Args))
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage(`{}`)
	}
	for attempt := 0; ; attempt++ {
		cs, watch, err := c.session(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return tools.Result{}, ctx.Err()
			}
			if errors.Is(err, errClosed) || errors.Is(err, errPoolClosed) {
				return tools.Result{}, err
			}
			t.p.metrics.calls.WithLabelValues(t.srv.Name, "unreachable").Inc()
			return tools.Result{IsError: true, Content: fmt.Sprintf("MCP server %s could not be reached, so %s did not run: %v", t.srv.Name, name, err)}, nil
		}
		if why, changed := c.withheld(t.entry); why != "" {
			t.p.metrics.calls.WithLabelValues(t.srv.Name, "withheld").Inc()
			if !changed {
				return tools.Result{IsError: true, Content: fmt.Sprintf("%s is withheld and did not run: %s. The list is asked for again at the next call.", name, why)}, nil
			}
			return tools.Result{IsError: true, Content: fmt.Sprintf("%s is withheld and did not run: %s. The change is recorded; the tool is available again once the agent is applied again and the new catalog recorded.", name, why)}, nil
		}
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: t.entry.Name, Arguments: args})
		if err == nil {
			t.p.metrics.calls.WithLabelValues(t.srv.Name, outcome(res)).Inc()
			return tools.Result{Content: resultText(res), IsError: res.IsError}, nil
		}
		if ctx.Err() != nil {
			// The SDK sends notifications/cancelled after this returns;
			// a close of the connection waits for it.
			watch.owe()
			t.p.metrics.calls.WithLabelValues(t.srv.Name, "cancelled").Inc()
			return tools.Result{}, ctx.Err()
		}
		var rpc *jsonrpc.Error
		if errors.As(err, &rpc) && rpc.Code != codeRejected && !errors.Is(err, sdk.ErrSessionMissing) {
			// The server answered with an error: the call reached it and
			// was refused (an unknown tool, invalid arguments …).
			t.p.metrics.calls.WithLabelValues(t.srv.Name, "error").Inc()
			return tools.Result{IsError: true, Content: fmt.Sprintf("MCP server %s refused %s: %s", t.srv.Name, name, rpc.Message)}, nil
		}
		c.broken(cs)
		unsent := notSent(err)
		switch {
		case attempt >= maxResends:
		case unsent:
			c.log.Info("MCP call did not reach the server; sending it on a new connection", "tool", name, "call", call.ID, "err", err)
			continue
		case t.srv.IsReplaySafe(t.entry.Name):
			c.log.Info("MCP connection broke during a replay-safe call; sending it again on a new connection", "tool", name, "call", call.ID, "err", err)
			continue
		}
		t.p.metrics.calls.WithLabelValues(t.srv.Name, "lost").Inc()
		if unsent {
			return tools.Result{IsError: true, Content: fmt.Sprintf("MCP server %s could not be reached, so %s did not run: %v", t.srv.Name, name, err)}, nil
		}
		c.log.Warn("MCP connection broke during a call that is not replay-safe", "tool", name, "call", call.ID, "err", err)
		return tools.Result{IsError: true, Content: fmt.Sprintf("the connection to MCP server %s broke during the call (%v); %s may or may not have run", t.srv.Name, err, name)}, nil
	}
}

// notSent reports an error that proves the server did not take the
// request: it no longer knows the session (HTTP 404, after a restart), or
// the connection could not even be opened.
func notSent(err error) bool {
	if errors.Is(err, sdk.ErrSessionMissing) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	// A proxy or the server said it would not take the request now.
	msg := err.Error()
	return strings.Contains(msg, "connection refused") ||
		strings.Contains(msg, http.StatusText(http.StatusServiceUnavailable)) ||
		strings.Contains(msg, http.StatusText(http.StatusTooManyRequests))
}

func outcome(r *sdk.CallToolResult) string {
	if r.IsError {
		return "tool_error"
	}
	return "ok"
}

// resultText renders a tool result as the model's text: text content as
// it is, other content named with its type and size, structured content as
// JSON when there is nothing else.
func resultText(r *sdk.CallToolResult) string {
	var b strings.Builder
	sep := func() {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
	}
	for _, c := range r.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			sep()
			b.WriteString(c.Text)
		case *sdk.ImageContent:
			sep()
			fmt.Fprintf(&b, "[image %s, %d bytes, not shown]", c.MIMEType, len(c.Data))
		case *sdk.AudioContent:
			sep()
			fmt.Fprintf(&b, "[audio %s, %d bytes, not shown]", c.MIMEType, len(c.Data))
		case *sdk.ResourceLink:
			sep()
			fmt.Fprintf(&b, "[resource %s: %s]", c.Name, c.URI)
		case *sdk.EmbeddedResource:
			if c.Resource == nil {
				continue
			}
			sep()
			if c.Resource.Text != "" {
				fmt.Fprintf(&b, "[resource %s]\n%s", c.Resource.URI, c.Resource.Text)
			} else {
				fmt.Fprintf(&b, "[resource %s: %s, %d bytes, not shown]", c.Resource.URI, c.Resource.MIMEType, len(c.Resource.Blob))
			}
		}
	}
	if b.Len() == 0 && r.StructuredContent != nil {
		if j, err := json.Marshal(r.StructuredContent); err == nil {
			b.Write(j)
		}
	}
	return b.String()
}
