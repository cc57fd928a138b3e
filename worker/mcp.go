package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/tools/mcp"
)

// AuditMCPCatalog is the kind of the JL_AUDIT records of MCP catalog
// changes: jl.audit.mcp_catalog.<agent>, with an mcp.Change as body.
const AuditMCPCatalog = "mcp_catalog"

// Mounter wraps a tool that is not registered (an MCP server's tool) with
// the registry's rules; RegistryTools implements it.
type Mounter interface {
	Mount(t tools.Tool) (tools.Tool, error)
}

// newMCP makes the worker's pool of MCP connections, reporting catalog
// changes to JL_AUDIT.
func (w *Worker) newMCP() error {
	opts := w.cfg.MCP
	if opts.Logger == nil {
		opts.Logger = w.log
	}
	if opts.Trees == nil {
		opts.Trees = w.cfg.Trees // stdio servers are swept with the tools' processes
	}
	next := opts.OnChange
	opts.OnChange = func(c mcp.Change) {
		w.recordCatalogChange(c)
		if next != nil {
			next(c)
		}
	}
	p, err := mcp.NewPool(opts)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	w.mcp = p
	return nil
}

// recordCatalogChange writes a catalog change to JL_AUDIT. The tool is
// withheld (or, under on_change: follow, called) whether or not the record
// is written; a failure is logged.
func (w *Worker) recordCatalogChange(c mcp.Change) {
	log := w.log.With("agent", c.Agent, "session", c.Session)
	subj, err := w.names.Audit(AuditMCPCatalog, c.Agent)
	if err != nil {
		log.Warn("audit MCP catalog change", "err", err)
		return
	}
	b, err := json.Marshal(c)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := w.js.Publish(ctx, subj, b); err != nil {
		log.Warn("audit MCP catalog change", "tool", c.Mounted, "err", err)
	}
}

// mcpTools returns the MCP tools of a definition version by their mounted
// names, built once per version.
func (w *Worker) mcpTools(def *policies.Definition) map[string]tools.Tool {
	if len(def.MCPServers) == 0 {
		return nil
	}
	key := fmt.Sprintf("%s@%d#%d", def.Name, def.Version, def.Revision)
	w.modelsMu.Lock()
	defer w.modelsMu.Unlock()
	if ts, ok := w.mcpSets[key]; ok {
		return ts
	}
	mounter, _ := w.cfg.Tools.(Mounter)
	ts := map[string]tools.Tool{}
	for _, t := range w.mcp.Tools(*def) {
		name := t.Spec().Name
		if mounter != nil {
			m, err := mounter.Mount(t)
			if err != nil {
				w.log.Error("MCP tool cannot be mounted; the agent cannot call it", "agent", def.Name, "version", def.Version, "tool", name, "err", err)
				continue
			}
			t = m
		}
		ts[name] = t
	}
	if len(w.mcpSets) > 1024 {
		clear(w.mcpSets)
	}
	w.mcpSets[key] = ts
	return ts
}

// closeMCP closes a session's MCP connections once it has no presence in
// this worker.
func (w *Worker) closeMCP(agent, session string) {
	w.mcp.CloseSession(agent, session)
}
