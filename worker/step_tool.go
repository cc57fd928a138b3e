package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jetloop/jetloop/tools"
)

type (
	toolsTool = tools.Tool
	toolsSpec = tools.Spec
)

// toolOutcome is what a call produced, as the model will see it.
type toolOutcome struct {
	text  string
	isErr bool
	blob  string
	block bool
}

// runTool calls tool once. A runtime error and a panic become an error
// result for the model: a bad call must not take the worker down.
func runTool(ctx context.Context, tool tools.Tool, call CallRef, args json.RawMessage, agent, session, dir string) (out toolOutcome) {
	defer func() {
		if p := recover(); p != nil {
			out = toolOutcome{text: fmt.Sprintf("tool %s panicked: %v", call.Name, p), isErr: true}
		}
	}()
	res, err := tool.Call(ctx, tools.Call{ID: call.ID, Args: args, Agent: agent, Session: session, WorkDir: dir})
	if err != nil && res.Content != "" {
		// The call ended badly but has an answer for the model (a
		// registry's result for a cancelled call, say).
		return toolOutcome{text: res.Content, isErr: true, blob: res.Blob}
	}
	if err != nil {
		switch {
		case errors.Is(err, tools.ErrInvalidArgs):
			return toolOutcome{text: fmt.Sprintf("invalid arguments for %s: %v", call.Name, err), isErr: true}
		case ctx.Err() != nil:
			return toolOutcome{text: fmt.Sprintf("tool %s stopped: %v", call.Name, ctx.Err()), isErr: true}
		}
		return toolOutcome{text: fmt.Sprintf("tool %s failed: %v", call.Name, err), isErr: true}
	}
	return toolOutcome{text: res.Content, isErr: res.IsError, blob: res.Blob, block: res.Block}
}
