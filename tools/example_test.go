package tools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/jetloop/jetloop/tools"
)

// A worker builds one registry of every tool it can run, gives the model
// the specs an agent declares, and runs the calls the model makes.
func Example() {
	reg, err := tools.NewRegistry(tools.RegistryOptions{}, tools.Builtins(tools.BuiltinConfig{})...)
	if err != nil {
		fmt.Println(err)
		return
	}
	specs, err := reg.Specs([]string{"shell", "ask_human"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range specs {
		fmt.Printf("%s replay-safe=%v %s\n", s.Name, s.ReplaySafe, s.State)
	}

	dir, err := os.MkdirTemp("", "jetloop-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	call := tools.Call{
		ID: "call-1", Agent: "pr-reviewer", Session: "octo/repo#12",
		WorkDir: filepath.Join(dir, "session"),
		Args:    json.RawMessage(`{"command": "echo reviewed >> ledger.txt && cat ledger.txt"}`),
	}
	res, err := reg.Run(ctx, "shell", call)
	fmt.Printf("%q error=%v %v\n", res.Content, res.IsError, err)

	// A bad call is an error result for the model, naming the field.
	call.Args = json.RawMessage(`{"cmd": "ls"}`)
	res, _ = reg.Run(ctx, "shell", call)
	fmt.Println(res.IsError, res.Content)

	// ask_human does not wait: the runtime parks the session.
	res, _ = reg.Run(ctx, "ask_human", tools.Call{ID: "call-2", Args: json.RawMessage(`{"question": "Ship it?"}`)})
	fmt.Println(res.Block, res.Content)
	// Output:
	// shell replay-safe=false resource
	// ask_human replay-safe=true stateless
	// "reviewed\n[exit code 0]" error=false <nil>
	// true invalid arguments for tool "shell": arguments: missing property 'command'; arguments: additional properties 'cmd' not allowed
	// true Ship it?
}
