package policies

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Bounds of mcp_servers.
const (
	// MaxMCPServers bounds the MCP servers of one agent.
	MaxMCPServers = 16
	// MaxMCPTools bounds the tools admitted from one server.
	MaxMCPTools = 64
	// MaxMCPToolDescription and MaxMCPToolSchema bound what one admitted
	// tool puts in front of the model, in bytes: its description and its
	// input schema (compact JSON).
	MaxMCPToolDescription = 4 << 10
	MaxMCPToolSchema      = 16 << 10
	// MaxMCPTimeout bounds a server's call timeout.
	MaxMCPTimeout = time.Hour
)

// MCPServer is one MCP server whose tools the agent may call, mounted as
// "<name>.<tool>". Exactly one of URL (Streamable HTTP) and Command
// (stdio: the server is started per session and stopped when the session
// rests) says how to reach it.
type MCPServer struct {
	// Name namespaces the server's tools: 1 to 32 letters, digits and '-',
	// starting with a letter.
	Name string `yaml:"name" json:"name"`
	// URL is the server's Streamable HTTP endpoint (http or https).
	URL string `yaml:"url,omitempty" json:"url,omitempty"`
	// Command is the program and its arguments of a stdio server.
	Command []string `yaml:"command,omitempty" json:"command,omitempty"`
	// HeadersEnv maps an HTTP header sent to a URL server to the name of
	// the environment variable (of the process that connects) holding its
	// value, so no secret is stored in the definition.
	HeadersEnv map[string]string `yaml:"headers_env,omitempty" json:"headers_env,omitempty"`
	// Env maps an environment variable of a stdio server to the name of
	// the worker's variable holding its value (the server gets PATH, HOME
	// and these, not the worker's environment).
	Env map[string]string `yaml:"env,omitempty" json:"env,omitempty"`
	// Tools is the admitted catalog: the server's tools the agent may
	// call, by their names on the server. Nothing else the server offers
	// reaches the model.
	Tools []string `yaml:"tools" json:"tools"`
	// ReplaySafe lists the admitted tools that may run again when a crash
	// interrupted them; the others are not replay-safe.
	ReplaySafe []string `yaml:"replay_safe,omitempty" json:"replay_safe,omitempty"`
	// Timeout bounds one call (and the connection it may need first);
	// default the worker's tool timeout.
	Timeout Duration `yaml:"timeout,omitempty" json:"timeout,omitzero"`
	// OnChange is what a call of an admitted tool does once the server
	// describes it otherwise than the catalog recorded at apply (another
	// description or schema): "withhold" (the default: it does not reach
	// the server until the definition is applied again) or "follow" (it
	// reaches the server). Either way the change is recorded and the model
	// is shown the recorded catalog; a tool the server no longer offers is
	// refused under both.
	OnChange string `yaml:"on_change,omitempty" json:"on_change,omitempty"`

	// Catalog is what the server said of each admitted tool when the
	// definition was applied: the only descriptions and schemas the model
	// is shown. It is recorded at apply, never written in YAML.
	Catalog []MCPTool `yaml:"-" json:"catalog,omitempty"`
}

// What MCPServer.OnChange takes.
const (
	MCPOnChangeWithhold = "withhold"
	MCPOnChangeFollow   = "follow"
)

// Follows reports whether the server's changed tools are still called
// (on_change: follow) rather than withheld.
func (s MCPServer) Follows() bool { return s.OnChange == MCPOnChangeFollow }

// MCPTool is one admitted tool of a server as recorded at apply.
type MCPTool struct {
	// Name is the tool's name on the server.
	Name        string `json:"name"`
	Description string `json:"description"`
	// Schema is the tool's input schema, compact JSON.
	Schema json.RawMessage `json:"schema"`
}

// Mount is the name the model calls a server's tool by.
func (s MCPServer) Mount(tool string) string { return s.Name + "." + tool }

// IsReplaySafe reports whether the server's tool is declared replay-safe.
func (s MCPServer) IsReplaySafe(tool string) bool {
	for _, t := range s.ReplaySafe {
		if t == tool {
			return true
		}
	}
	return false
}

// CatalogTool returns the recorded catalog entry of a tool.
func (s MCPServer) CatalogTool(tool string) (MCPTool, bool) {
	for _, t := range s.Catalog {
		if t.Name == tool {
			return t, true
		}
	}
	return MCPTool{}, false
}

// MCPTool finds the server and tool a mounted name ("server.tool") refers
// to among the definition's admitted MCP tools.
func (d Definition) MCPTool(mounted string) (MCPServer, string, bool) {
	srv, tool, ok := strings.Cut(mounted, ".")
	if !ok {
		return MCPServer{}, "", false
	}
	for _, s := range d.MCPServers {
		if s.Name != srv {
			continue
		}
		for _, t := range s.Tools {
			if t == tool {
				return s, tool, true
			}
		}
	}
	return MCPServer{}, "", false
}

// ToolNames lists every tool the agent may call: those of tools, then the
// mounted names of the admitted MCP tools, without repeats.
func (d Definition) ToolNames() []string {
	out := make([]string, 0, len(d.Tools))
	seen := map[string]bool{}
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	for _, t := range d.Tools {
		add(t)
	}
	for _, s := range d.MCPServers {
		for _, t := range s.Tools {
			add(s.Mount(t))
		}
	}
	return out
}

var (
	mcpServerRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9-]{0,31}$`)
	// Model APIs accept tool names of [A-Za-z0-9_-] only; the mounted name
	// travels with its '.' spelled "__" (see model.WireName), which is
	// unambiguous because server names have no '_'.
	mcpToolRE   = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	headerRE    = regexp.MustCompile(`^[A-Za-z0-9!#$%&'*+.^_|~-]{1,128}$`)
	envNameRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	maxMountLen = 63

	mcpOnChanges = []string{"", MCPOnChangeWithhold, MCPOnChangeFollow}
)

// checkMCP validates mcp_servers, and tools that name an MCP tool.
func checkMCP(c *checker, d Definition) {
	if len(d.MCPServers) > MaxMCPServers {
		c.addf("mcp_servers", "%d servers, at most %d", len(d.MCPServers), MaxMCPServers)
	}
	names := map[string]bool{}
	for i, s := range d.MCPServers {
		f := fmt.Sprintf("mcp_servers[%d]", i)
		switch {
		case s.Name == "":
			c.addf(f+".name", "required: the namespace of the server's tools")
		case !mcpServerRE.MatchString(s.Name):
			c.addf(f+".name", "%q: want 1 to 32 letters, digits and '-', starting with a letter", s.Name)
		case names[s.Name]:
			c.addf(f+".name", "server %q declared twice", s.Name)
		}
		names[s.Name] = true
		switch {
		case s.URL == "" && len(s.Command) == 0:
			c.addf(f, "want url (Streamable HTTP) or command (stdio)")
		case s.URL != "" && len(s.Command) > 0:
			c.addf(f+".command", "want url or command, not both")
		case s.URL != "":
			u, err := url.Parse(s.URL)
			switch {
			case err != nil:
				c.addf(f+".url", "%q: %v", s.URL, err)
			case u.Scheme != "http" && u.Scheme != "https":
				c.addf(f+".url", "%q: want an http or https URL", s.URL)
			case u.Host == "":
				c.addf(f+".url", "%q: no host", s.URL)
			case u.User != nil:
				c.addf(f+".url", "credentials in the URL are not stored: send them with headers_env")
			}
		default:
			if strings.TrimSpace(s.Command[0]) == "" {
				c.addf(f+".command[0]", "empty program")
			}
			if len(s.HeadersEnv) > 0 {
				c.addf(f+".headers_env", "only a url server takes headers")
			}
		}
		if len(s.Env) > 0 && s.URL != "" {
			c.addf(f+".env", "only a command server takes an environment (a url server takes headers_env)")
		}
		for name, env := range s.Env {
			ef := f + ".env." + name
			switch {
			case !envNameRE.MatchString(name):
				c.addf(ef, "%q is not an environment variable name", name)
			case name == "PATH" || name == "HOME" || name == "PWD" || strings.HasPrefix(name, "JETLOOP_"):
				c.addf(ef, "%s is set by the runtime", name)
			}
			if !envNameRE.MatchString(env) {
				c.addf(ef, "%q: want the name of the worker's environment variable holding the value", env)
			}
		}
		for h, env := range s.HeadersEnv {
			hf := f + ".headers_env." + h
			switch {
			case !headerRE.MatchString(h):
				c.addf(hf, "%q is not an HTTP header name", h)
			case strings.EqualFold(h, "Mcp-Session-Id") || strings.EqualFold(h, "Mcp-Protocol-Version") || strings.EqualFold(h, "Last-Event-ID"):
				c.addf(hf, "%s is set by the MCP transport", h)
			}
			if !envNameRE.MatchString(env) {
				c.addf(hf, "%q: want the name of an environment variable holding the value", env)
			}
		}
		checkMCPTools(c, f, s)
		if !oneOf(s.OnChange, mcpOnChanges) {
			c.addf(f+".on_change", "%q: want withhold (the default) or follow", s.OnChange)
		}
		if s.Timeout.D() > MaxMCPTimeout {
			c.addf(f+".timeout", "%s: at most %s", s.Timeout.D(), MaxMCPTimeout)
		}
	}
	// A name in tools that looks like a mounted MCP tool must be one.
	for i, t := range d.Tools {
		if !strings.Contains(t, ".") {
			continue
		}
		if _, _, ok := d.MCPTool(t); !ok {
			srv, _, _ := strings.Cut(t, ".")
			if names[srv] {
				c.addf(fmt.Sprintf("tools[%d]", i), "%q: server %s does not admit that tool (add it to its tools)", t, srv)
			} else {
				c.addf(fmt.Sprintf("tools[%d]", i), "%q: no MCP server %q in mcp_servers", t, srv)
			}
		}
	}
}

func checkMCPTools(c *checker, f string, s MCPServer) {
	switch {
	case len(s.Tools) == 0:
		c.addf(f+".tools", "required: the server's tools to admit, by name (nothing is admitted unless listed)")
	case len(s.Tools) > MaxMCPTools:
		c.addf(f+".tools", "%d tools, at most %d", len(s.Tools), MaxMCPTools)
	}
	seen := map[string]bool{}
	for j, t := range s.Tools {
		tf := fmt.Sprintf("%s.tools[%d]", f, j)
		switch {
		case !mcpToolRE.MatchString(t):
			c.addf(tf, "%q: want 1 to 64 letters, digits, '_' and '-' (what model APIs accept)", t)
		case seen[t]:
			c.addf(tf, "tool %q listed twice", t)
		case len(s.Mount(t)) > maxMountLen:
			c.addf(tf, "%q: the mounted name %s is longer than %d characters", t, s.Mount(t), maxMountLen)
		}
		seen[t] = true
	}
	for j, t := range s.ReplaySafe {
		if !seen[t] {
			c.addf(fmt.Sprintf("%s.replay_safe[%d]", f, j), "%q is not in tools", t)
		}
	}
}

// CheckCatalogs reports an MCP server of d without a recorded catalog
// entry for each tool it admits: such a definition has not been through
// apply's admission, and storing it would show the model nothing or what
// no one reviewed.
func CheckCatalogs(d Definition) error {
	c := &checker{}
	for i, s := range d.MCPServers {
		for j, t := range s.Tools {
			if _, ok := s.CatalogTool(t); !ok {
				c.addf(fmt.Sprintf("mcp_servers[%d].tools[%d]", i, j), "%s: no catalog entry recorded; apply admits the tool from the server", s.Mount(t))
			}
		}
		for k, e := range s.Catalog {
			switch {
			case len(e.Description) > MaxMCPToolDescription:
				c.addf(fmt.Sprintf("mcp_servers[%d].catalog[%d]", i, k), "%s: description of %d bytes, at most %d", s.Mount(e.Name), len(e.Description), MaxMCPToolDescription)
			case len(e.Schema) > MaxMCPToolSchema:
				c.addf(fmt.Sprintf("mcp_servers[%d].catalog[%d]", i, k), "%s: schema of %d bytes, at most %d", s.Mount(e.Name), len(e.Schema), MaxMCPToolSchema)
			}
		}
	}
	if len(c.errs) == 0 {
		return nil
	}
	return errors.Join(c.errs...)
}
