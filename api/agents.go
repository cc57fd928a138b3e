package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jetloop/jetloop/policies"
)

// Endpoints of an agent's versions: the last token of each endpoint's
// subject, jl.api.<endpoint>.
const (
	EndpointHistory    = "history"
	EndpointDefinition = "definition"
	EndpointDiff       = "diff"
	EndpointRollback   = "rollback"
	EndpointRollout    = "rollout"
)

// MaxHistory bounds the entries a history response holds, the newest.
const MaxHistory = 1000

// HistoryRequest reads an agent's versions and rollout changes.
type HistoryRequest struct {
	Agent string `json:"agent"`
}

// HistoryEntry is one entry of an agent in jl_agents: a version (applied
// or restored by a rollback) or a change of its rollout alone.
type HistoryEntry struct {
	Version  uint64 `json:"version"`
	Revision uint64 `json:"revision"`
	// Change is apply, rollback or rollout.
	Change   string    `json:"change"`
	Hash     string    `json:"hash"`
	Source   string    `json:"source,omitempty"`
	By       string    `json:"by,omitempty"`
	At       time.Time `json:"at"`
	Restores uint64    `json:"restores,omitempty"`
	// Rollout is the rollout in force from this entry on; Ended the one
	// it ended.
	Rollout *policies.Rollout    `json:"rollout,omitempty"`
	Ended   *policies.RolloutEnd `json:"rollout_ended,omitempty"`
	Summary string               `json:"summary"`
}

// HistoryResponse holds an agent's entries, oldest first, as far as the
// bucket's history keeps them, and what serves now.
type HistoryResponse struct {
	Agent   string         `json:"agent"`
	Entries []HistoryEntry `json:"entries"`
	// Newest is the newest version; Rollout the rollout in force, with
	// Counts, the runs its guard judges.
	Newest  uint64                  `json:"newest"`
	Rollout *policies.Rollout       `json:"rollout,omitempty"`
	Counts  *policies.RolloutCounts `json:"counts,omitempty"`
}

// DefinitionRequest reads one version of an agent; Version 0 is the
// newest.
type DefinitionRequest struct {
	Agent   string `json:"agent"`
	Version uint64 `json:"version,omitempty"`
}

// DefinitionResponse is a version: its record (content and metadata)
// and its content as a definition file.
type DefinitionResponse struct {
	Record policies.Record `json:"record"`
	YAML   string          `json:"yaml"`
	// Serving says what the version serves: "every new session",
	// "canary at 10%", "stable beside canary v5", or "" for none.
	Serving string `json:"serving,omitempty"`
	// DefinitionOmitted is set when the record and the YAML would not
	// both fit a response: the record's definition then holds only the
	// name, version and revision, and YAML the content.
	DefinitionOmitted bool `json:"definition_omitted,omitempty"`
}

// DiffRequest compares two versions of an agent.
type DiffRequest struct {
	Agent string `json:"agent"`
	From  uint64 `json:"from"`
	To    uint64 `json:"to"`
}

// DiffResponse is a unified diff of the two versions' YAML; Same when
// their content is the same (Diff is then empty).
type DiffResponse struct {
	Agent    string `json:"agent"`
	From     uint64 `json:"from"`
	To       uint64 `json:"to"`
	FromHash string `json:"from_hash"`
	ToHash   string `json:"to_hash"`
	Same     bool   `json:"same,omitempty"`
	Diff     string `json:"diff"`
}

// RollbackRequest stores version To's content as the agent's next
// version. To 0 is the stable version of the rollout in force, else the
// version before the newest.
type RollbackRequest struct {
	Agent string `json:"agent"`
	To    uint64 `json:"to,omitempty"`
	// By names who asked, for the history.
	By string `json:"by,omitempty"`
}

// RolloutRequest starts, changes, promotes (percent 100) or ends (percent
// 0) the agent's rollout of a stored version.
type RolloutRequest struct {
	Agent   string   `json:"agent"`
	Version uint64   `json:"version"`
	Percent *float64 `json:"percent"`
	// Guard replaces the rollout's guard; without it the guard in force is
	// kept (none for a new rollout). ClearGuard removes it. Either with
	// percent 0 or 100, which end the rollout, is a 400.
	Guard      *policies.Guard `json:"guard,omitempty"`
	ClearGuard bool            `json:"clear_guard,omitempty"`
	By         string          `json:"by,omitempty"`
}

// ChangeResponse is what a rollback or a rollout change did: the agent's
// newest entry, whether a version was created, and a summary.
type ChangeResponse struct {
	Agent   string       `json:"agent"`
	Version uint64       `json:"version"`
	Created bool         `json:"created,omitempty"`
	Entry   HistoryEntry `json:"entry"`
}

// versionOps are the endpoints of this file.
func (s *Service) versionOps(ops map[string]op) {
	ops[EndpointHistory] = handle(s.history)
	ops[EndpointDefinition] = handle(s.definition)
	ops[EndpointDiff] = handle(s.diff)
	ops[EndpointRollback] = handle(s.rollback)
	ops[EndpointRollout] = handle(s.rollout)
}

func agentName(agent string) error {
	if agent == "" {
		return errorf(http.StatusBadRequest, "agent is required")
	}
	return nil
}

func historyEntry(r policies.Record, created bool) HistoryEntry {
	by, at := r.AppliedBy, r.AppliedAt
	if r.Change == policies.ChangeRollout {
		by, at = r.ChangedBy, r.ChangedAt
	}
	change := r.Change
	if change == "" {
		change = policies.ChangeApply
	}
	return HistoryEntry{Version: r.Version, Revision: r.Revision, Change: change, Hash: r.Hash, Source: r.Source, By: by, At: at,
		Restores: r.Restores, Rollout: r.Rollout, Ended: r.Ended, Summary: policies.Describe(r, created)}
}

func (s *Service) history(ctx context.Context, req HistoryRequest) (HistoryResponse, error) {
	if err := agentName(req.Agent); err != nil {
		return HistoryResponse{}, err
	}
	recs, err := s.agents.Entries(ctx, req.Agent)
	if err != nil {
		return HistoryResponse{}, err
	}
	out := HistoryResponse{Agent: req.Agent, Entries: []HistoryEntry{}}
	var prev uint64
	for _, r := range recs {
		out.Entries = append(out.Entries, historyEntry(r, r.Version > prev))
		prev = max(prev, r.Version)
	}
	out.Newest = prev
	if len(out.Entries) > MaxHistory {
		out.Entries = out.Entries[len(out.Entries)-MaxHistory:]
	}
	if _, head, err := s.agents.GetCompiled(ctx, req.Agent); err == nil && head.Rollout != nil {
		out.Rollout = head.Rollout
		if c, ok, err := s.agents.Counts(ctx, req.Agent); err == nil && ok {
			out.Counts = &c
		}
	}
	return out, nil
}

func (s *Service) definition(ctx context.Context, req DefinitionRequest) (DefinitionResponse, error) {
	if err := agentName(req.Agent); err != nil {
		return DefinitionResponse{}, err
	}
	_, head, err := s.agents.GetCompiled(ctx, req.Agent)
	if err != nil {
		return DefinitionResponse{}, err
	}
	rec := head
	if req.Version != 0 && req.Version != head.Version {
		if rec, err = s.agents.Version(ctx, req.Agent, req.Version); err != nil {
			return DefinitionResponse{}, err
		}
	}
	y, err := policies.YAML(rec.Definition)
	if err != nil {
		return DefinitionResponse{}, err
	}
	out := DefinitionResponse{Record: rec, YAML: string(y), Serving: serving(head, rec.Version)}
	if b, err := json.Marshal(out); err == nil && len(b) <= s.cfg.MaxResponse-1024 {
		return out, nil
	}
	// The content once, as YAML.
	d := rec.Definition
	out.Record.Definition = policies.Definition{Name: d.Name, Version: d.Version, Revision: d.Revision}
	out.DefinitionOmitted = true
	if b, err := json.Marshal(out); err != nil || len(b) > s.cfg.MaxResponse-1024 {
		return DefinitionResponse{}, errorf(http.StatusInternalServerError, "definition %s version %d: %d bytes of YAML do not fit a response of %d bytes", req.Agent, rec.Version, len(y), s.cfg.MaxResponse)
	}
	return out, nil
}

// serving says what version v serves, by the newest entry head.
func serving(head policies.Record, v uint64) string {
	r := head.Rollout
	switch {
	case r == nil && v == head.Version:
		return "every new session"
	case r == nil:
		return ""
	case v == r.Canary:
		return fmt.Sprintf("canary at %g%% of new sessions", r.Percent)
	case v == r.Stable:
		return fmt.Sprintf("stable, beside canary v%d at %g%%", r.Canary, r.Percent)
	}
	return ""
}

func (s *Service) diff(ctx context.Context, req DiffRequest) (DiffResponse, error) {
	if err := agentName(req.Agent); err != nil {
		return DiffResponse{}, err
	}
	if req.From == 0 || req.To == 0 {
		return DiffResponse{}, errorf(http.StatusBadRequest, "diff %s: from and to are required version numbers", req.Agent)
	}
	a, err := s.agents.Version(ctx, req.Agent, req.From)
	if err != nil {
		return DiffResponse{}, err
	}
	b, err := s.agents.Version(ctx, req.Agent, req.To)
	if err != nil {
		return DiffResponse{}, err
	}
	d, err := policies.Diff(a.Definition, b.Definition, fmt.Sprintf("%s v%d", req.Agent, req.From), fmt.Sprintf("%s v%d", req.Agent, req.To))
	if err != nil {
		return DiffResponse{}, err
	}
	out := DiffResponse{Agent: req.Agent, From: req.From, To: req.To, FromHash: a.Hash, ToHash: b.Hash, Same: a.Hash == b.Hash, Diff: d}
	if len(d) > s.cfg.MaxResponse-4096 {
		return DiffResponse{}, errorf(http.StatusInternalServerError, "diff %s v%d v%d: %d bytes do not fit a response of %d", req.Agent, req.From, req.To, len(d), s.cfg.MaxResponse)
	}
	return out, nil
}

func (s *Service) rollback(ctx context.Context, req RollbackRequest) (ChangeResponse, error) {
	if err := agentName(req.Agent); err != nil {
		return ChangeResponse{}, err
	}
	a, err := s.agents.Rollback(ctx, req.Agent, req.To, by(req.By))
	if err != nil {
		return ChangeResponse{}, conflict(err)
	}
	s.log.Info("agent rolled back", "agent", req.Agent, "version", a.Record.Version, "restores", a.Record.Restores, "by", by(req.By))
	return changeResponse(a), nil
}

func (s *Service) rollout(ctx context.Context, req RolloutRequest) (ChangeResponse, error) {
	if err := agentName(req.Agent); err != nil {
		return ChangeResponse{}, err
	}
	if req.Percent == nil {
		return ChangeResponse{}, errorf(http.StatusBadRequest, "rollout %s: percent is required: 0 rolls back, 100 promotes, between starts or changes a rollout", req.Agent)
	}
	a, err := s.agents.SetRollout(ctx, req.Agent, policies.RolloutChange{Version: req.Version, Percent: *req.Percent, Guard: req.Guard, ClearGuard: req.ClearGuard}, by(req.By))
	if err != nil {
		return ChangeResponse{}, conflict(err)
	}
	s.log.Info("agent rollout changed", "agent", req.Agent, "version", a.Record.Version, "canary", req.Version, "percent", *req.Percent, "by", by(req.By))
	return changeResponse(a), nil
}

func changeResponse(a policies.Applied) ChangeResponse {
	return ChangeResponse{Agent: a.Agent, Version: a.Record.Version, Created: a.Created, Entry: historyEntry(a.Record, a.Created)}
}

// by names the requester in the history: what the request says, else
// the API.
func by(who string) string {
	if who = strings.TrimSpace(who); who != "" {
		return who
	}
	return "api"
}

// conflict maps policies.ErrConflict to 409.
func conflict(err error) error {
	if errors.Is(err, policies.ErrConflict) {
		return &Error{Code: http.StatusConflict, Message: err.Error()}
	}
	return err
}

func (s *Service) listAgents(ctx context.Context, _ AgentsRequest) (AgentsResponse, error) {
	recs, err := s.agents.Records(ctx)
	if err != nil {
		return AgentsResponse{}, err
	}
	if recs == nil {
		recs = []policies.Record{}
	}
	return AgentsResponse{Agents: recs}, nil
}

func (s *Service) apply(ctx context.Context, req ApplyRequest) (ApplyResponse, error) {
	switch {
	case len(req.Files) == 0:
		return ApplyResponse{}, errorf(http.StatusBadRequest, "apply: no files")
	case len(req.Files) > MaxApplyFiles:
		return ApplyResponse{}, errorf(http.StatusBadRequest, "apply: %d files, max %d", len(req.Files), MaxApplyFiles)
	}
	// Validate every file first: nothing is stored unless all are valid.
	defs := make([]*policies.Compiled, 0, len(req.Files))
	var problems []string
	for _, f := range req.Files {
		c, err := policies.Parse(f.Name, []byte(f.Content))
		if err != nil {
			for _, p := range policies.Errors(err) {
				problems = append(problems, p.Error())
			}
			if len(policies.Errors(err)) == 0 {
				problems = append(problems, err.Error())
			}
			continue
		}
		defs = append(defs, c)
	}
	if len(problems) > 0 {
		return ApplyResponse{}, &Error{Code: http.StatusBadRequest,
			Message:  fmt.Sprintf("apply refused: %d problem(s); nothing was stored", len(problems)),
			Problems: problems}
	}
	// Record what each MCP server offers of the tools a definition admits:
	// the model is shown what was reviewed here, and nothing else.
	unadmitted := make([]bool, len(defs))
	for i, c := range defs {
		if len(c.Definition.MCPServers) == 0 {
			continue
		}
		if err := s.cfg.Catalogs.Admit(ctx, c, req.Files[i].Name); err != nil {
			unadmitted[i] = true
			for _, p := range policies.Errors(err) {
				problems = append(problems, p.Error())
			}
			if len(policies.Errors(err)) == 0 {
				problems = append(problems, err.Error())
			}
		}
	}
	// What the store would refuse as it stands (a rollout that cannot
	// start) is found before anything is stored.
	for i, c := range defs {
		if unadmitted[i] {
			continue // its catalog is missing: said above
		}
		if err := s.agents.CheckApply(ctx, c); err != nil {
			for _, p := range policies.Errors(err) {
				problems = append(problems, p.Error())
			}
			if len(policies.Errors(err)) == 0 {
				return ApplyResponse{}, err
			}
		}
	}
	if len(problems) > 0 {
		return ApplyResponse{}, &Error{Code: http.StatusBadRequest,
			Message:  fmt.Sprintf("apply refused: %d problem(s); nothing was stored", len(problems)),
			Problems: problems}
	}
	out := ApplyResponse{Applied: []Applied{}}
	for _, c := range defs {
		out.Warnings = append(out.Warnings, KeyWarnings(c.Definition, os.Getenv)...)
	}
	for i, c := range defs {
		a, err := s.agents.Apply(ctx, c, policies.WithSource(req.Files[i].Name), policies.WithAppliedBy(by(req.By)))
		if err != nil {
			if es := policies.Errors(err); len(es) > 0 {
				// Refused after the check (another apply got in between):
				// the earlier files are stored.
				e := &Error{Code: http.StatusBadRequest, Message: fmt.Sprintf("apply refused %s: %v (%d earlier file(s) stored)", req.Files[i].Name, err, i)}
				for _, p := range es {
					e.Problems = append(e.Problems, p.Error())
				}
				return out, e
			}
			return out, err
		}
		r := a.Record
		out.Applied = append(out.Applied, Applied{Agent: c.Definition.Name, Version: r.Version, Unchanged: !a.Changed, Created: a.Created,
			Source: req.Files[i].Name, Hash: r.Hash, Rollout: r.Rollout, Summary: policies.Describe(r, a.Created)})
		s.log.Info("agent applied", "agent", c.Definition.Name, "version", r.Version, "created", a.Created, "changed", a.Changed, "source", req.Files[i].Name, "by", by(req.By))
	}
	return out, nil
}

// versionNumbers finds the version number of sessions whose state
// predates per-agent numbers (a revision, no number) until their next run
// records it; one lookup per agent and revision.
type versionNumbers struct {
	agents *policies.Store
	seen   map[string]uint64
}

func newVersionNumbers(agents *policies.Store) *versionNumbers {
	return &versionNumbers{agents: agents, seen: map[string]uint64{}}
}

func (n *versionNumbers) of(ctx context.Context, agent string, version, rev uint64) uint64 {
	if version != 0 || rev == 0 {
		return version
	}
	key := fmt.Sprintf("%s@%d", agent, rev)
	if v, ok := n.seen[key]; ok {
		return v
	}
	rec, err := n.agents.GetRevision(ctx, agent, rev)
	if err != nil {
		rec.Version = 0
	}
	n.seen[key] = rec.Version
	return rec.Version
}
