package tools

import "context"

// NewFunc makes a Tool of a spec and a function: for small tools, and for
// tests that need a tool with a given behaviour.
func NewFunc(spec Spec, call func(ctx context.Context, c Call) (Result, error)) Tool {
	return funcTool{spec: spec, call: call}
}

type funcTool struct {
	spec Spec
	call func(context.Context, Call) (Result, error)
}

func (f funcTool) Spec() Spec { return f.spec }

func (f funcTool) Call(ctx context.Context, c Call) (Result, error) { return f.call(ctx, c) }
