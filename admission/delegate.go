package admission

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/policies"
)

// DelegateRule is the trigger name of the host's own rule for delegate
// events (events.TypeDelegate): it is in parentheses, which no trigger
// name of a definition may contain.
const DelegateRule = "(delegate)"

// Bounds of a delegate event admission reads.
const (
	// maxPath bounds the chain a delegate event may carry.
	maxPath = policies.MaxHops + 1
)

// decideDelegation is the host's rule for a delegate event addressed to
// one agent and session: it is admitted to that session unless the
// delegation breaks a rule of the host, which refuses it, recorded with
// the reason (the delegating session's call gets the reason as its
// result):
//
//   - the hop limit: the child would be deeper than its tree allows;
//   - cycles: the chain above it gave the same agent the same task;
//   - reads: the agent is offered an input its definition does not read.
//
// The agent's triggers play no part: a delegation is addressed, like a
// reply, and its limits are the tree's.
func (a *Admitter) decideDelegation(e event.Event, c *policies.Compiled) ([]Decision, error) {
	def := c.Definition
	d := Decision{Agent: def.Name, Trigger: DelegateRule, Version: def.Version}
	session, _ := e.Extensions()[events.ExtSession].(string)
	if session == "" {
		return nil, fmt.Errorf("%w: delegate event %s names no session (extension %s)", ErrBadData, e.ID(), events.ExtSession)
	}
	d.Session = session
	var del events.Delegation
	if err := json.Unmarshal(e.Data(), &del); err != nil {
		return nil, fmt.Errorf("%w: delegate event %s: %w", ErrBadData, e.ID(), err)
	}
	if parent, _ := e.Extensions()[events.ExtParent].(string); parent != del.Parent || parent == "" {
		return nil, fmt.Errorf("%w: delegate event %s: extension %s %q does not name the parent %q", ErrBadData, e.ID(), events.ExtParent, parent, del.Parent)
	}
	if len(del.Path) == 0 || len(del.Path) > maxPath {
		return nil, fmt.Errorf("%w: delegate event %s: a path of %d sessions (want 1 to %d)", ErrBadData, e.ID(), len(del.Path), maxPath)
	}
	refuse := func(format string, args ...any) ([]Decision, error) {
		d.Outcome, d.Reason = Refused, fmt.Sprintf(format, args...)
		return []Decision{d}, nil
	}
	if del.Hops > del.MaxHops {
		return refuse("max_hops %d: %s would be %d delegations below %s", del.MaxHops, def.Name, del.Hops, del.Path[0].Session)
	}
	if own := def.Budget.MaxHops; own > 0 && del.Hops > own {
		return refuse("max_hops %d of %s: it would run %d delegations below %s", own, def.Name, del.Hops, del.Path[0].Session)
	}
	task := events.TaskDigest(del.Task)
	for i, h := range del.Path {
		if h.Agent() == def.Name && h.Task == task {
			return refuse("cycle: %s was given this task already, %d delegation(s) up the chain (%s): %s", def.Name, len(del.Path)-i, h.Session, chain(del.Path, def.Name))
		}
	}
	var unread []string
	for _, in := range del.Inputs {
		if !def.ReadsInput(in.Name) {
			unread = append(unread, in.Name)
		}
	}
	if len(unread) > 0 {
		return refuse("%s does not read %s: its definition reads %s", def.Name, strings.Join(unread, ", "), readsList(def))
	}
	ref, err := d.Ref()
	if err == nil {
		err = a.publishable(e, d, ref)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: delegate event %s: %w", ErrBadData, e.ID(), err)
	}
	d.Outcome = Admitted
	return []Decision{d}, nil
}

// chain renders a path and its next agent: "a/s → b/s/call_1 → a".
func chain(path []events.Hop, next string) string {
	parts := make([]string, 0, len(path)+1)
	for _, h := range path {
		parts = append(parts, h.Session)
	}
	return strings.Join(append(parts, next), " → ")
}

func readsList(def policies.Definition) string {
	if len(def.Reads) == 0 {
		return "everything"
	}
	names := slices.Clone(def.Reads)
	return "only [" + strings.Join(names, ", ") + "]"
}
