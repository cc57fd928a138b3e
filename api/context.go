package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/window"
)

// EndpointContext answers what a session's next model call receives.
const EndpointContext = "context"

// Bounds of show pages.
const (
	// DefaultShowLimit is the entries a show request without a limit
	// reads; MaxShowLimit the most one may ask for.
	DefaultShowLimit = 1000
	MaxShowLimit     = 10_000
)

// ContextRequest asks for a session's next context.
type ContextRequest struct {
	Agent   string `json:"agent"`
	Session string `json:"session"`
}

// ContextResponse is `jetloop context --json`'s object: what the
// session's next model call receives, part by part, with the estimate of
// each part's tokens, and where the live context starts. Fields may be
// added, never renamed.
type ContextResponse struct {
	Agent   string        `json:"agent"`
	Session string        `json:"session"`
	Status  record.Status `json:"status"`
	// Turn is the turn of the call the context is for.
	Turn int `json:"turn"`
	// Tokens is the estimated input of the call; Bytes its size by the
	// estimate's measure; BytesPerToken the estimate's rate, calibrated
	// on the provider's last reported usage when Calibrated.
	Tokens        int64   `json:"tokens"`
	Bytes         int64   `json:"bytes"`
	BytesPerToken float64 `json:"bytes_per_token"`
	Calibrated    bool    `json:"calibrated"`
	// LastInputTokens is what the provider reported as the input of the
	// session's last model call in this context, 0 when none did.
	LastInputTokens int64 `json:"last_input_tokens,omitempty"`
	// CompactAtTokens is the policy's threshold (0: none) and
	// CompactionDue says the next call compacts first.
	CompactAtTokens int64 `json:"compact_at_tokens,omitempty"`
	CompactionDue   bool  `json:"compaction_due,omitempty"`
	// Masked counts the tool results the call sees as placeholders.
	Masked int `json:"masked"`
	// Window is where the live context starts, after a compaction.
	Window *record.Window `json:"window,omitempty"`
	// Model, System (the notes included) and Tools are the request's.
	Model  string   `json:"model,omitempty"`
	System string   `json:"system,omitempty"`
	Tools  []string `json:"tools"`
	// Messages counts the request's messages.
	Messages int `json:"messages"`
	// Parts are the request's parts in order, each with the text the
	// model receives of it.
	Parts []window.Part `json:"parts"`
	// Cut is set when the parts' texts were shortened to fit a response
	// (the estimates are of the whole texts).
	Cut bool `json:"cut,omitempty"`
}

// sessionContext builds what the session's next model call receives,
// from the same record the worker reads and the definition the session
// runs.
func (s *Service) sessionContext(ctx context.Context, req ContextRequest) (ContextResponse, error) {
	ref, err := sessionRef(req.Agent, req.Session)
	if err != nil {
		return ContextResponse{}, err
	}
	store, err := record.Open(ctx, s.js, s.names)
	if err != nil {
		return ContextResponse{}, err
	}
	st, rev, err := store.Load(ctx, ref)
	if err != nil {
		return ContextResponse{}, err
	}
	def, err := s.sessionDefinition(ctx, st)
	if err != nil {
		return ContextResponse{}, err
	}
	entries, err := store.ReadSpans(ctx, ref, st.Live(), rev)
	if err != nil {
		return ContextResponse{}, err
	}
	turn := st.Turns + 1
	if p := st.Pending; p != nil && p.Kind == record.StepModel && p.Compaction == nil {
		turn = p.Turn
	}
	in := window.Input{Names: s.names, Ref: ref, Def: &def, State: st, Entries: entries, Turn: turn, Tools: toolSpecs(&def)}
	if p := def.Context; p != nil && p.Notes {
		n, _, err := tools.ReadNotes(ctx, s.sessions, s.names, ref)
		if err != nil {
			return ContextResponse{}, err
		}
		in.Notes = n.Text
	}
	c := window.Build(in)
	_, due := window.Due(in, c)
	out := ContextResponse{
		Agent: st.Agent, Session: st.Session, Status: st.Status, Turn: turn,
		Tokens: c.Tokens, Bytes: c.Bytes, BytesPerToken: c.BytesPerToken, Calibrated: c.Calibrated,
		CompactionDue: due, Masked: c.Masked,
		Model: c.Request.Model, System: c.Request.System, Tools: []string{}, Messages: len(c.Request.Messages),
		Parts: c.Parts,
	}
	if def.Context != nil {
		out.CompactAtTokens = def.Context.CompactAtTokens
	}
	if st.Summary != 0 {
		w := st.Window
		out.Window = &w
	}
	for _, t := range c.Request.Tools {
		out.Tools = append(out.Tools, t.Name)
	}
	for i := len(entries) - 1; i >= 0; i-- {
		if e := entries[i]; e.Kind == record.KindAssistant && e.Usage != nil {
			out.LastInputTokens = e.Usage.InputTokens
			break
		}
	}
	return s.fitContext(out), nil
}

// fitContext shortens the parts' texts until the response fits.
func (s *Service) fitContext(out ContextResponse) ContextResponse {
	for limit := 64 << 10; limit >= 256; limit /= 4 {
		b, err := json.Marshal(out)
		if err != nil || len(b) <= s.cfg.MaxResponse-1024 {
			return out
		}
		parts := make([]window.Part, len(out.Parts))
		for i, p := range out.Parts {
			if len(p.Text) > limit {
				p.Text = p.Text[:limit] + fmt.Sprintf(" […%d bytes more]", len(p.Text)-limit)
			}
			parts[i] = p
		}
		out.Parts, out.Cut = parts, true
	}
	return out
}

// sessionDefinition is the definition version the session runs.
func (s *Service) sessionDefinition(ctx context.Context, st record.State) (policies.Definition, error) {
	if st.DefinitionRevision != 0 {
		rec, err := s.agents.GetRevision(ctx, st.Agent, st.DefinitionRevision)
		if err == nil {
			return rec.Definition, nil
		}
		if !errors.Is(err, policies.ErrNotFound) {
			return policies.Definition{}, err
		}
	}
	def, err := s.agents.Get(ctx, st.Agent)
	if errors.Is(err, policies.ErrNotFound) {
		return policies.Definition{}, errorf(http.StatusNotFound, "agent %s has no definition", st.Agent)
	}
	return def, err
}

// builtinSpecs are the specs of the tools every worker runs.
var builtinSpecs = func() map[string]tools.Spec {
	out := map[string]tools.Spec{}
	for _, t := range append(tools.Builtins(tools.BuiltinConfig{}), tools.GitHub(tools.GitHubConfig{})...) {
		out[t.Spec().Name] = t.Spec()
	}
	return out
}()

// toolSpecs are the specs of the tools a call of def offers, as the
// worker shows them: the built-in ones, and an MCP server's from the
// catalog its definition recorded.
func toolSpecs(def *policies.Definition) []model.ToolSpec {
	var out []model.ToolSpec
	for _, name := range window.EffectiveTools(def) {
		if srv, tool, ok := def.MCPTool(name); ok {
			for _, c := range srv.Catalog {
				if c.Name == tool {
					out = append(out, model.ToolSpec{Name: name, Description: c.Description, Schema: c.Schema})
				}
			}
			continue
		}
		if sp, ok := builtinSpecs[name]; ok {
			out = append(out, model.ToolSpec{Name: sp.Name, Description: sp.Description, Schema: sp.Schema})
		}
	}
	return out
}

// markMasked marks the tool results of a page that the session's next
// model call sees as placeholders.
func markMasked(tr *record.Transcript, def policies.Definition) {
	p := def.Context
	if p == nil || p.MaskAfterTurns == 0 {
		return
	}
	turn := tr.Budget.Usage.Turns + 1
	for i, e := range tr.Transcript {
		if e.Kind == record.KindToolResult && e.Context == "" && turn-e.Turn > p.MaskAfterTurns {
			tr.Transcript[i].Context = record.ContextMasked
		}
	}
}
