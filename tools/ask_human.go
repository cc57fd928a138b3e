package tools

import (
	"context"
	"encoding/json"
	"fmt"
)

const askHumanSchema = `{
	"type": "object",
	"properties": {
		"question": {
			"type": "string",
			"minLength": 1,
			"maxLength": 4000,
			"description": "The question for a person, with the context they need to answer it."
		}
	},
	"required": ["question"],
	"additionalProperties": false
}`

// askHuman asks a person a question. It does not wait: its Result has
// Block set, and the runtime parks the session as blocked until a human
// resumes it with the answer, which becomes the call's result.
type askHuman struct{}

func (askHuman) Spec() Spec {
	return Spec{
		Name: "ask_human",
		Description: "Ask a person a question and wait for the answer. The session pauses, holding nothing, " +
			"until someone answers; the answer comes back as this call's result. Use it for decisions and " +
			"information only a person has, not for progress reports.",
		Schema:     json.RawMessage(askHumanSchema),
		ReplaySafe: true,
		State:      Stateless,
	}
}

func (askHuman) Call(_ context.Context, call Call) (Result, error) {
	var args struct {
		Question string `json:"question"`
	}
	if err := json.Unmarshal(call.Args, &args); err != nil {
		return Result{}, fmt.Errorf("ask_human: arguments: %w", err)
	}
	return Result{Content: args.Question, Block: true}, nil
}
