package tools

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/ghapp"
)

// Tool is one capability the model can call.
type Tool interface {
	// Spec describes the tool; it does not change while the tool lives.
	Spec() Spec
	// Call runs the tool once. ctx carries the session's cancel and the
	// call's timeout: a tool stops at once when it ends. A failure the
	// model should see is a Result with IsError, not an error; an error is
	// for the runtime (the call could not be made at all).
	Call(ctx context.Context, call Call) (Result, error)
}

// Statefulness says what a tool holds between calls.
type Statefulness string

// Statefulness classes.
const (
	// Stateless tools hold nothing between calls.
	Stateless Statefulness = "stateless"
	// Connection tools hold a connection (an MCP session, say) per session.
	Connection Statefulness = "connection"
	// Resource tools change something outside (files, a ticket, a comment).
	Resource Statefulness = "resource"
)

// Spec describes a tool to the model and to the runtime.
type Spec struct {
	Name        string
	Description string
	// Schema is the JSON schema of the arguments object.
	Schema json.RawMessage
	// ReplaySafe declares that running the call twice has the effect of
	// running it once. Recovery re-runs an interrupted call only when the
	// declaration stored in its intent and the current one both say so.
	ReplaySafe bool
	State      Statefulness
	// Timeout bounds one call; 0 uses the registry default.
	Timeout time.Duration
}

// Call is one invocation.
type Call struct {
	// ID is the call id reserved in the step's intent.
	ID   string
	Args json.RawMessage
	// Agent and Session name the session making the call.
	Agent, Session string
	// WorkDir is the session's work folder (created by the runtime).
	WorkDir string
	// Started is when the call's intent was written: a probe looks for
	// effects from then on.
	Started time.Time
	// Thread is where the run's event belongs (a repository's issue or
	// pull request, a chat thread): the default target of tools that
	// answer there. Nil when the event names none.
	Thread *events.Thread
	// GitHub are the agent's github: settings; zero: the deployment's.
	GitHub ghapp.Settings
	// MayRead, when set, reports whether the session may read what
	// another session of its agent stored (read_blob, read_event): the
	// sessions it was forked from, whose handles and events its
	// transcript holds. Nil: none but its own.
	MayRead func(ctx context.Context, session string) bool
}

// Result is what the model sees of a call.
type Result struct {
	Content string
	IsError bool
	// Blob is the jl_blobs handle when the full content was stored out of
	// band; Content then holds the first lines and the handle.
	Blob string `json:",omitempty"`
	// Block asks the runtime to park the session as blocked until a human
	// answers (ask_human); Content is the question.
	Block bool `json:",omitempty"`
	// Delegate asks the runtime to start a child session with the
	// delegation (the delegate tool) and to park the session until the
	// child answers; its answer becomes the call's result.
	Delegate *Delegation `json:",omitempty"`
}

// ErrUnknownTool reports a call to a tool that is not registered.
var ErrUnknownTool = errors.New("unknown tool")

// ErrInvalidArgs reports arguments that do not match the tool's schema.
var ErrInvalidArgs = errors.New("invalid tool arguments")
