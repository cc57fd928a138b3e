package mcp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/tools"
)

// DefaultAdmitTimeout bounds the connection to one server at apply, when
// the server declares no timeout.
const DefaultAdmitTimeout = 30 * time.Second

// Admit records the catalog of every MCP server c declares, as the
// definition's apply does before storing it: it connects to each server
// (from this process), lists its tools and, for each tool the definition
// admits, checks that the server offers it, that its description and
// input schema are within policies.MaxMCPToolDescription and
// MaxMCPToolSchema and that the schema describes an object, and stores
// them in c.Definition's MCPServers[i].Catalog. The model is shown these
// and nothing else; a server that later says otherwise has its changed
// tools withheld until the definition is applied again.
//
// Problems are *policies.Error values naming the field, located in file
// (joined when there are several); nothing is recorded unless all
// servers answer.
func (p *Pool) Admit(ctx context.Context, c *policies.Compiled, file string) error {
	var errs []error
	fail := func(field string, err error) {
		e := &policies.Error{File: file, Field: field, Err: err}
		e.Line, e.Column = c.Position(field)
		errs = append(errs, e)
	}
	catalogs := make([][]policies.MCPTool, len(c.Definition.MCPServers))
	for i, s := range c.Definition.MCPServers {
		f := fmt.Sprintf("mcp_servers[%d]", i)
		unset := false
		for _, h := range sortedKeys(s.HeadersEnv) {
			if p.opts.Getenv(s.HeadersEnv[h]) == "" {
				fail(f+".headers_env."+h, fmt.Errorf("environment variable %s is not set in the process that applies (it connects to record the catalog)", s.HeadersEnv[h]))
				unset = true
			}
		}
		for _, name := range sortedKeys(s.Env) {
			if p.opts.Getenv(s.Env[name]) == "" {
				fail(f+".env."+name, fmt.Errorf("environment variable %s is not set in the process that applies (it starts the server to record the catalog)", s.Env[name]))
				unset = true
			}
		}
		if unset {
			continue
		}
		live, err := p.catalog(ctx, s)
		if err != nil {
			where := s.URL
			if where == "" {
				where = strings.Join(s.Command, " ")
			}
			fail(f, fmt.Errorf("server %s (%s): the catalog is recorded at apply, and the server's tools could not be listed: %w", s.Name, where, err))
			continue
		}
		for j, name := range s.Tools {
			tf := fmt.Sprintf("%s.tools[%d]", f, j)
			l, ok := live[name]
			if !ok {
				fail(tf, fmt.Errorf("server %s offers no tool %q; it offers %s", s.Name, name, offered(live)))
				continue
			}
			switch {
			case len(l.description) > policies.MaxMCPToolDescription:
				fail(tf, fmt.Errorf("%s: the server's description is %d bytes, at most %d are admitted", s.Mount(name), len(l.description), policies.MaxMCPToolDescription))
				continue
			case len(l.schema) > policies.MaxMCPToolSchema:
				fail(tf, fmt.Errorf("%s: the server's input schema is %d bytes, at most %d are admitted", s.Mount(name), len(l.schema), policies.MaxMCPToolSchema))
				continue
			}
			if err := tools.CheckSchema(s.Mount(name), []byte(l.schema)); err != nil {
				fail(tf, fmt.Errorf("%s: the server's input schema is refused: %w", s.Mount(name), err))
				continue
			}
			catalogs[i] = append(catalogs[i], policies.MCPTool{Name: name, Description: l.description, Schema: []byte(l.schema)})
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for i := range c.Definition.MCPServers {
		c.Definition.MCPServers[i].Catalog = catalogs[i]
	}
	return nil
}

// catalog lists a server's tools on a connection of its own.
func (p *Pool) catalog(ctx context.Context, s policies.MCPServer) (map[string]liveTool, error) {
	timeout := s.Timeout.D()
	if timeout <= 0 {
		timeout = DefaultAdmitTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	dir := ""
	if len(s.Command) > 0 {
		d, err := os.MkdirTemp("", "jetloop-mcp-admit-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	cs, _, err := connect(ctx, p, s, dir, "", "", nil, nil)
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	return listTools(ctx, cs)
}

func offered(live map[string]liveTool) string {
	if len(live) == 0 {
		return "no tools"
	}
	names := make([]string, 0, len(live))
	for n := range live {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) > 40 {
		return strings.Join(names[:40], ", ") + fmt.Sprintf(" and %d more", len(names)-40)
	}
	return strings.Join(names, ", ")
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
