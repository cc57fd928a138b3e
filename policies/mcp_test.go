package policies_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/policies"
)

func TestParseMCPServers(t *testing.T) {
	c, err := policies.Parse("a.yaml", []byte(`name: a
model: {provider: scripted}
tools: [shell, github.list_issues]
mcp_servers:
  - name: github
    url: https://mcp.example.com/mcp
    headers_env: {Authorization: GITHUB_MCP_AUTH}
    tools: [list_issues, create_comment]
    replay_safe: [list_issues]
    timeout: 30s
  - name: docs
    command: [docs-mcp, --stdio]
    tools: [search]
`))
	if err != nil {
		t.Fatal(err)
	}
	d := c.Definition
	if got := strings.Join(d.ToolNames(), ","); got != "shell,github.list_issues,github.create_comment,docs.search" {
		t.Fatalf("tool names %s", got)
	}
	s, tool, ok := d.MCPTool("github.list_issues")
	if !ok || tool != "list_issues" || !s.IsReplaySafe("list_issues") || s.IsReplaySafe("create_comment") || s.Timeout.D().Seconds() != 30 {
		t.Fatalf("MCPTool = %+v %s %v", s, tool, ok)
	}
	if _, _, ok := d.MCPTool("docs.nope"); ok {
		t.Fatal("a tool docs does not admit was found")
	}
	// Stored only with a catalog recorded for every admitted tool.
	err = policies.CheckCatalogs(d)
	if n := len(policies.Errors(err)); n != 3 || !errors.Is(err, policies.ErrInvalid) || !strings.Contains(err.Error(), "github.list_issues: no catalog entry recorded") {
		t.Fatalf("CheckCatalogs = %v", err)
	}
}

func TestParseMCPServerErrors(t *testing.T) {
	const head = "name: a\nmodel: {provider: scripted}\nmcp_servers:\n"
	tests := []struct {
		name  string
		yaml  string
		line  int
		field string
		says  string
	}{
		{"no name", head + "  - {url: http://h/mcp, tools: [x]}\n", 4, "mcp_servers[0].name", "required"},
		{"name with a dot", head + "  - {name: a.b, url: http://h/mcp, tools: [x]}\n", 4, "mcp_servers[0].name", "letters, digits and '-'"},
		{"name with underscore", head + "  - {name: a_b, url: http://h/mcp, tools: [x]}\n", 4, "mcp_servers[0].name", "starting with a letter"},
		{"twice", head + "  - {name: a, url: http://h/mcp, tools: [x]}\n  - {name: a, url: http://h/mcp, tools: [y]}\n", 5, "mcp_servers[1].name", "declared twice"},
		{"neither url nor command", head + "  - {name: a, tools: [x]}\n", 4, "mcp_servers[0]", "want url"},
		{"both", head + "  - {name: a, url: http://h/mcp, command: [x], tools: [x]}\n", 4, "mcp_servers[0].command", "not both"},
		{"not http", head + "  - {name: a, url: ftp://h/mcp, tools: [x]}\n", 4, "mcp_servers[0].url", "http or https"},
		{"credentials in url", head + "  - {name: a, url: 'http://u:p@h/mcp', tools: [x]}\n", 4, "mcp_servers[0].url", "headers_env"},
		{"headers on stdio", head + "  - {name: a, command: [x], headers_env: {A: B}, tools: [x]}\n", 4, "mcp_servers[0].headers_env", "only a url server"},
		{"header value not a variable", head + "  - name: a\n    url: http://h/mcp\n    headers_env: {Authorization: 'Bearer abc'}\n    tools: [x]\n", 6, "mcp_servers[0].headers_env.Authorization", "name of an environment variable"},
		{"session header", head + "  - name: a\n    url: http://h/mcp\n    headers_env: {Mcp-Session-Id: X}\n    tools: [x]\n", 6, "mcp_servers[0].headers_env.Mcp-Session-Id", "set by the MCP transport"},
		{"no tools", head + "  - {name: a, url: http://h/mcp}\n", 4, "mcp_servers[0].tools", "nothing is admitted unless listed"},
		{"tool name", head + "  - {name: a, url: http://h/mcp, tools: [a.b]}\n", 4, "mcp_servers[0].tools[0]", "what model APIs accept"},
		{"tool twice", head + "  - {name: a, url: http://h/mcp, tools: [x, x]}\n", 4, "mcp_servers[0].tools[1]", "listed twice"},
		{"replay_safe not admitted", head + "  - {name: a, url: http://h/mcp, tools: [x], replay_safe: [y]}\n", 4, "mcp_servers[0].replay_safe[0]", "not in tools"},
		{"timeout", head + "  - {name: a, url: http://h/mcp, tools: [x], timeout: 2h}\n", 4, "mcp_servers[0].timeout", "at most 1h"},
		{"mounted tool not admitted", "name: a\nmodel: {provider: scripted}\ntools: [a.y]\nmcp_servers:\n  - {name: a, url: http://h/mcp, tools: [x]}\n", 3, "tools[0]", "does not admit"},
		{"mounted tool of no server", "name: a\nmodel: {provider: scripted}\ntools: [b.y]\n", 3, "tools[0]", `no MCP server "b"`},
		{"env on url", head + "  - {name: a, url: http://h/mcp, env: {A: B}, tools: [x]}\n", 4, "mcp_servers[0].env", "only a command server"},
		{"env value not a variable", head + "  - name: a\n    command: [x]\n    env: {TOKEN: 'abc def'}\n    tools: [x]\n", 6, "mcp_servers[0].env.TOKEN", "name of the worker's environment variable"},
		{"env the runtime sets", head + "  - name: a\n    command: [x]\n    env: {PATH: P}\n    tools: [x]\n", 6, "mcp_servers[0].env.PATH", "set by the runtime"},
		{"on_change", head + "  - name: a\n    url: http://h/mcp\n    tools: [x]\n    on_change: ignore\n", 7, "mcp_servers[0].on_change", "want withhold (the default) or follow"},
		{"unknown field", head + "  - {name: a, url: http://h/mcp, tools: [x], tool: [y]}\n", 4, "", "unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policies.Parse("a.yaml", []byte(tt.yaml))
			es := policies.Errors(err)
			if len(es) == 0 || !errors.Is(err, policies.ErrInvalid) {
				t.Fatalf("Parse = %v, want a refusal", err)
			}
			e := es[0]
			if e.File != "a.yaml" || e.Line != tt.line || (tt.field != "" && e.Field != tt.field) || !strings.Contains(e.Error(), tt.says) {
				t.Fatalf("error %q (line %d, field %q), want line %d, field %q, %q", e, e.Line, e.Field, tt.line, tt.field, tt.says)
			}
		})
	}
}
