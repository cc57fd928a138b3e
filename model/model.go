package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Model answers one request: the next assistant message given the
// conversation so far.
type Model interface {
	Complete(ctx context.Context, req Request) (Response, error)
}

// Role is who a message is from.
type Role string

// Roles of messages.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	// RoleTool carries the results of an assistant message's tool calls.
	RoleTool Role = "tool"
)

// Request is one model call.
type Request struct {
	// Model is the provider's model name; empty uses the provider default.
	Model    string
	System   string
	Messages []Message
	Tools    []ToolSpec
	// MaxTokens bounds the response; 0 uses the provider default.
	MaxTokens   int
	Temperature *float64
	// Earlier counts the session's answers that precede Messages without
	// being in them (a compaction summarised them): a provider that
	// answers by position (scripted) adds them to the answers it counts.
	Earlier int
	// RunTurn is the call's number within its run (from 1; 0 when
	// unknown): a provider that answers by position within the run
	// (scripted, script_scope: run) reads it, since the run's first turns
	// may have been summarised.
	RunTurn int
	// Compact marks a request that asks for a summary of the conversation
	// it carries (a compaction step) rather than the agent's next turn.
	Compact bool
}

// Message is one turn of the conversation.
type Message struct {
	Role Role
	Text string
	// ToolCalls are the calls an assistant message asks for.
	ToolCalls []ToolCall
	// ToolResults answer the previous assistant message's calls (RoleTool).
	ToolResults []ToolResult
}

// ToolCall is a call the model asks for.
type ToolCall struct {
	// ID is the provider's call id (or one the worker reserved).
	ID   string
	Name string
	// Args is a JSON object.
	Args json.RawMessage
}

// ToolResult is the outcome of one tool call.
type ToolResult struct {
	CallID  string
	Content string
	IsError bool
}

// ToolSpec describes a tool to the model.
type ToolSpec struct {
	Name        string
	Description string
	// Schema is the JSON schema of the arguments object.
	Schema json.RawMessage
}

// Response is the model's answer.
type Response struct {
	Text      string
	ToolCalls []ToolCall
	Usage     Usage
	// StopReason is the provider's reason, e.g. "end_turn", "tool_use".
	StopReason string
	// Model is the model that answered.
	Model string
}

// Usage is what one call consumed.
type Usage struct {
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	CostUSD      float64 `json:"cost_usd"`
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{InputTokens: u.InputTokens + v.InputTokens, OutputTokens: u.OutputTokens + v.OutputTokens, CostUSD: u.CostUSD + v.CostUSD}
}

// Tokens is input plus output tokens.
func (u Usage) Tokens() int64 { return u.InputTokens + u.OutputTokens }

// Sentinel errors callers branch on; a provider's *Error wraps one.
var (
	// ErrRateLimited: the provider answered 429 after every retry.
	ErrRateLimited = errors.New("model rate limited")
	// ErrServer: the provider answered 5xx after every retry.
	ErrServer = errors.New("model server error")
	// ErrTimeout: the call took longer than its timeout.
	ErrTimeout = errors.New("model call timed out")
	// ErrBadRequest: the provider refused the request (4xx other than
	// 429); retrying the same request will not help.
	ErrBadRequest = errors.New("model refused the request")
	// ErrBadResponse: the response could not be parsed or was cut off.
	ErrBadResponse = errors.New("model response unusable")
)

// Error is a failed model call with the provider's details.
type Error struct {
	Provider   string
	StatusCode int
	// RetryAfter is the provider's requested pause, if it gave one.
	RetryAfter time.Duration
	Message    string
	// Kind is one of the sentinel errors above.
	Kind error
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s: %v", e.Provider, e.Kind)
	if e.StatusCode != 0 {
		s += fmt.Sprintf(" (HTTP %d)", e.StatusCode)
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Unwrap lets errors.Is match Kind.
func (e *Error) Unwrap() error { return e.Kind }
