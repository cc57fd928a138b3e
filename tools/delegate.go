package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"time"
)

// Bounds of a delegation's arguments.
const (
	// MaxTaskBytes bounds a delegation's task.
	MaxTaskBytes = 16 << 10
	// MaxInputs bounds the inputs of one delegation.
	MaxInputs = 16
	// MaxInputText bounds an input given as text in the arguments.
	MaxInputText = 64 << 10
)

// InputName is what an input's name (and a name in an agent's reads:)
// must look like.
var InputName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

const delegateSchema = `{
	"type": "object",
	"properties": {
		"agent": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$", "description": "The agent that does the task, in a session of its own."},
		"task": {"type": "string", "minLength": 1, "maxLength": 16384, "description": "What the agent should do."},
		"inputs": {
			"type": "object",
			"maxProperties": 16,
			"propertyNames": {"pattern": "^[A-Za-z0-9_-]{1,64}$"},
			"additionalProperties": {
				"anyOf": [
					{"type": "string", "maxLength": 65536},
					{
						"type": "object",
						"properties": {
							"text": {"type": "string", "maxLength": 65536},
							"file": {"type": "string", "minLength": 1, "maxLength": 1024},
							"blob": {"type": "string", "minLength": 1, "maxLength": 1024},
							"result": {"type": "string", "minLength": 1, "maxLength": 128}
						},
						"minProperties": 1,
						"maxProperties": 1,
						"additionalProperties": false
					}
				]
			},
			"description": "Named inputs the agent receives, and nothing else of this session: a text, {\"file\": path in your work folder}, {\"blob\": handle of one of your blobs} or {\"result\": id of one of your earlier tool calls}. The agent may receive only the inputs its definition reads."
		},
		"budget": {
			"type": "object",
			"properties": {
				"max_turns": {"type": "integer", "minimum": 1, "maximum": 1000000},
				"max_tokens": {"type": "integer", "minimum": 1},
				"max_cost_usd": {"type": "number", "exclusiveMinimum": 0},
				"deadline": {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?(ms|s|m|h)$"}
			},
			"additionalProperties": false,
			"description": "At most what the agent may spend: less than this run has left, never more (default: what is left, within the agent's own budget)."
		}
	},
	"required": ["agent", "task"],
	"additionalProperties": false
}`

// Delegation is a delegate call's arguments: a child session of Agent is
// to do Task with Inputs, within Budget.
type Delegation struct {
	Agent  string           `json:"agent"`
	Task   string           `json:"task"`
	Inputs map[string]Input `json:"inputs,omitempty"`
	Budget DelegatedBudget  `json:"budget,omitzero"`
}

// Input is one named input of a delegation: exactly one of its fields.
type Input struct {
	// Text is the input itself.
	Text *string `json:"text,omitempty"`
	// File is a path in the delegating session's work folder.
	File string `json:"file,omitempty"`
	// Blob is a jl_blobs handle of the delegating session.
	Blob string `json:"blob,omitempty"`
	// Result is the call id of an earlier tool call of the delegating
	// session, whose result the input is.
	Result string `json:"result,omitempty"`
}

// UnmarshalJSON reads a plain string as a text input, else the object.
func (in *Input) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*in = Input{Text: &s}
		return nil
	}
	type plain Input
	var p plain
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return err
	}
	n := 0
	for _, set := range []bool{p.Text != nil, p.File != "", p.Blob != "", p.Result != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("an input is a text or an object with one of text, file, blob, result; this one has %d", n)
	}
	*in = Input(p)
	return nil
}

// DelegatedBudget is what a delegate call asks the child may spend; a
// zero field asks for what is left.
type DelegatedBudget struct {
	MaxTurns   int           `json:"max_turns,omitempty"`
	MaxTokens  int64         `json:"max_tokens,omitempty"`
	MaxCostUSD float64       `json:"max_cost_usd,omitempty"`
	Deadline   time.Duration `json:"-"`
}

// UnmarshalJSON reads the deadline as a duration string.
func (b *DelegatedBudget) UnmarshalJSON(raw []byte) error {
	var v struct {
		MaxTurns   int     `json:"max_turns"`
		MaxTokens  int64   `json:"max_tokens"`
		MaxCostUSD float64 `json:"max_cost_usd"`
		Deadline   string  `json:"deadline"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return err
	}
	*b = DelegatedBudget{MaxTurns: v.MaxTurns, MaxTokens: v.MaxTokens, MaxCostUSD: v.MaxCostUSD}
	if v.Deadline != "" {
		d, err := time.ParseDuration(v.Deadline)
		if err != nil || d <= 0 {
			return fmt.Errorf("budget.deadline %q: want a positive duration such as 90s or 10m", v.Deadline)
		}
		b.Deadline = d
	}
	return nil
}

// MarshalJSON writes the deadline as a duration string.
func (b DelegatedBudget) MarshalJSON() ([]byte, error) {
	v := struct {
		MaxTurns   int     `json:"max_turns,omitempty"`
		MaxTokens  int64   `json:"max_tokens,omitempty"`
		MaxCostUSD float64 `json:"max_cost_usd,omitempty"`
		Deadline   string  `json:"deadline,omitempty"`
	}{b.MaxTurns, b.MaxTokens, b.MaxCostUSD, ""}
	if b.Deadline > 0 {
		v.Deadline = b.Deadline.String()
	}
	return json.Marshal(v)
}

// delegate is the delegate tool. It only reads its arguments: its Result
// carries the Delegation for the runtime, which starts the child session
// through admission and parks the calling session (holding nothing) until
// the child's answer settles the call.
type delegate struct{}

func (delegate) Spec() Spec {
	return Spec{
		Name: "delegate",
		Description: "Give a task to another agent (or another session of this one). It runs in a session of its own, " +
			"with its own transcript and work folder, and sees the task and the inputs you name and nothing else of " +
			"this session. Several delegate calls in one answer run at once; each call's result is that agent's " +
			"final answer (or why it failed), when it is done.",
		Schema:     json.RawMessage(delegateSchema),
		ReplaySafe: true,
		State:      Resource,
	}
}

func (delegate) Call(_ context.Context, call Call) (Result, error) {
	var d Delegation
	if err := json.Unmarshal(call.Args, &d); err != nil {
		return errResult("delegate: arguments: %v", err), nil
	}
	for name := range d.Inputs {
		if !InputName.MatchString(name) {
			return errResult("delegate: input name %q: want 1 to 64 letters, digits, '-' and '_'", name), nil
		}
	}
	return Result{Content: "delegating to " + d.Agent, Delegate: &d}, nil
}
