package events

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"strings"
	"time"
)

// Delegation is the data of a dev.jetloop.delegate event (TypeDelegate):
// what a delegate call gives the child session it starts.
type Delegation struct {
	// Parent is the delegating session, "agent/session", and CallID the
	// call the child answers.
	Parent string `json:"parent"`
	CallID string `json:"call_id"`
	// Task is what the child is to do.
	Task string `json:"task"`
	// Inputs are what the child receives beside the task, by name.
	Inputs []Input `json:"inputs,omitempty"`
	// Budget is the most the child may spend: carved out of what the
	// parent's run had left.
	Budget Budget `json:"budget,omitzero"`
	// Hops is the child's depth below the tree's root (1 for a root's
	// child) and MaxHops the deepest the tree may go.
	Hops    int `json:"hops"`
	MaxHops int `json:"max_hops"`
	// Path is the chain from the root down to the parent.
	Path []Hop `json:"path"`
}

// Input is one named input of a delegation: its text, or, when it is too
// large for the event, the first lines of it and the jl_blobs handle of
// the whole (stored under the child session's name).
type Input struct {
	Name string `json:"name"`
	Text string `json:"text"`
	Blob string `json:"blob,omitempty"`
	// Size is the whole input's size in bytes.
	Size int64 `json:"size"`
}

// Budget is a delegated session's limits; a zero field is no limit.
type Budget struct {
	MaxTurns   int       `json:"max_turns,omitempty"`
	MaxTokens  int64     `json:"max_tokens,omitempty"`
	MaxCostUSD float64   `json:"max_cost_usd,omitempty"`
	DeadlineAt time.Time `json:"deadline_at,omitzero"`
}

// Hop is one session on a delegation path: its name ("agent/session"),
// the digest of the task it was given (TaskDigest; for the root, of the
// input that started its run) and the run of it the ledger counts.
type Hop struct {
	Session string `json:"session"`
	Task    string `json:"task,omitempty"`
	Run     string `json:"run"`
}

// Agent is the agent part of the hop's session.
func (h Hop) Agent() string {
	agent, _, _ := strings.Cut(h.Session, "/")
	return agent
}

// DelegationResult is the data of a dev.jetloop.delegate.result event
// (TypeDelegateResult): a child session's answer to the call that started
// it, with what its run and everything below it consumed.
type DelegationResult struct {
	// CallID is the parent's call, Child the answering session
	// ("agent/session").
	CallID string `json:"call_id"`
	Child  string `json:"child"`
	// Status is how the child's run ended: done, failed, budget_exceeded
	// or cancelled; Reason why, when not done.
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	// Text is the child's last answer; IsError marks a run that did not
	// end with one.
	Text    string `json:"text"`
	IsError bool   `json:"is_error,omitempty"`
	// Usage is what the child's run consumed, its own and its
	// descendants', and Sessions how many sessions that counts (the
	// child's included).
	Usage    TreeUsage `json:"usage"`
	Sessions int       `json:"sessions"`
}

// TreeUsage is the usage of a delegated run and its descendants.
type TreeUsage struct {
	Turns        int     `json:"turns"`
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	CostUSD      float64 `json:"cost_usd"`
}

// TaskDigest names a task for the cycle rule: the same task, however it
// is spaced or capitalised, has the same digest.
func TaskDigest(task string) string {
	norm := strings.ToLower(strings.Join(strings.Fields(task), " "))
	h := sha256.Sum256([]byte(norm))
	return hex.EncodeToString(h[:12])
}

// DelegationSource is the source of the delegate events of a session:
// with the call id as the event id, it names each call's child once.
func DelegationSource(agent, session string) string {
	return "/agents/" + url.PathEscape(agent) + "/sessions/" + url.PathEscape(session) + "/calls"
}

// ResultSource is the source of a child session's result events.
func ResultSource(agent, session string) string {
	return "/agents/" + url.PathEscape(agent) + "/sessions/" + url.PathEscape(session) + "/result"
}

// ChildSession names the session a delegate call starts: the parent's
// agent, session and call id, so the same call always names the same
// child. A name that would be longer than MaxNameLen is a digest of it.
func ChildSession(parentAgent, parentSession, callID string) string {
	name := parentAgent + "/" + parentSession + "/" + callID
	if len(name) <= MaxNameLen {
		return name
	}
	h := sha256.Sum256([]byte(parentAgent + "\x00" + parentSession + "\x00" + callID))
	return "delegated-" + hex.EncodeToString(h[:16])
}
