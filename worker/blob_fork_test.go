package worker_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/worker"
)

// A fork reads the blobs its copied transcript names, its parent's: the
// worker tells read_blob which sessions it was forked from.
func TestForkReadsItsParentsBlobs(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	obs, err := e.js.ObjectStore(ctx, e.names.ObjectBlobs())
	if err != nil {
		t.Fatal(err)
	}
	content := strings.Repeat("a line of a large result\n", 1000)
	big := tools.NewFunc(tools.Spec{Name: "big", Description: "a large result", Schema: json.RawMessage(`{"type":"object"}`), ReplaySafe: true, State: tools.Stateless},
		func(context.Context, tools.Call) (tools.Result, error) { return tools.Result{Content: content}, nil })
	reg, err := tools.NewRegistry(tools.RegistryOptions{Blobs: obs}, append(tools.Builtins(tools.BuiltinConfig{Blobs: obs}), big)...)
	if err != nil {
		t.Fatal(err)
	}
	parent := e.ref(t, "forky", "s1")
	sum := sha256.Sum256([]byte(content))
	handle, err := e.names.ResultBlob(parent, "call_0_0", hex.EncodeToString(sum[:16]))
	if err != nil {
		t.Fatal(err)
	}
	def := policies.Definition{Name: "forky", Tools: []string{"big", "read_blob"}, Model: scripted(
		policies.ScriptEntry{Text: "Fetching.", ToolCalls: []policies.ScriptToolCall{{Name: "big"}}},
		policies.ScriptEntry{Text: "Stored."},
		policies.ScriptEntry{Text: "Reading.", ToolCalls: []policies.ScriptToolCall{{Name: "read_blob", Args: map[string]any{"handle": handle}}}},
		policies.ScriptEntry{Text: "Read."},
	)}
	e.start(t, worker.Config{Definitions: defs{"forky": def}, Tools: worker.RegistryTools(reg), Agents: []string{"forky"}})
	e.send(t, parent, "fetch")
	tr := e.waitStatus(t, parent, record.StatusDone)
	found := false
	for _, en := range tr.Transcript {
		if en.Kind == record.KindToolResult && en.Blob == handle {
			found = true
		}
	}
	if !found {
		t.Fatalf("the large result is not stored as %s: %s", handle, kinds(tr))
	}
	publish(t, e, parent, control.Message{Verb: control.Fork, Turn: 2, As: "s1-fork", Text: "read it"})
	fork := e.waitStatus(t, e.ref(t, "forky", "s1-fork"), record.StatusDone)
	var read record.Entry
	for _, en := range fork.Transcript {
		if en.Kind == record.KindToolResult && en.Name == "read_blob" {
			read = en
		}
	}
	if read.IsError || !strings.Contains(read.Result, "a line of a large result") {
		t.Fatalf("the fork's read of its parent's blob: %+v", read)
	}
}
