package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/worker"
)

// A child that reads only [diff] gets nothing more by reading the event
// that started it: read_event of its own delegate event does not hand it
// the task it does not read, nor the chain of sessions above it.
func TestDelegateReadEventKeepsReads(t *testing.T) {
	e := setup(t)
	in, err := e.js.Stream(context.Background(), e.names.StreamIn())
	if err != nil {
		t.Fatal(err)
	}
	m := worker.ToolMap{}
	for _, tool := range tools.Builtins(tools.BuiltinConfig{Events: tools.Events(e.js, in), Names: e.names, ShellGrace: time.Second}) {
		if n := tool.Spec().Name; n == "delegate" || n == "read_event" {
			m[n] = tool
		}
	}
	lead := policies.Definition{Name: "lead", Tools: []string{"delegate"},
		Model: scripted(policies.ScriptEntry{Text: "One review.", ToolCalls: []policies.ScriptToolCall{
			delegateCall("rev", "LEAD-TASK-TEXT review this", map[string]any{"diff": "-x\n+y\n"}, nil),
		}}, policies.ScriptEntry{Text: "Reviewed."})}
	var reads []policies.ScriptToolCall
	for seq := 1; seq <= 4; seq++ {
		reads = append(reads, policies.ScriptToolCall{Name: "read_event", Args: map[string]any{"seq": seq}})
	}
	rev := policies.Definition{Name: "rev", Reads: []string{"diff"}, Tools: []string{"read_event"},
		Model: scripted(policies.ScriptEntry{Text: "Reading my events.", ToolCalls: reads}, policies.ScriptEntry{Text: "Looks wrong."})}
	d := defs{"lead": lead, "rev": rev}
	e.start(t, worker.Config{Definitions: d, Tools: m, Agents: []string{"lead", "rev"}, Admit: admitWith(t, e, d)})
	ref := e.ref(t, "lead", "pr-1")
	e.send(t, ref, "LEAD-REQUEST review pull request 1")
	e.waitStatus(t, ref, record.StatusDone)
	ctr := e.waitStatus(t, childRef(t, e, "rev", ref, "call_0_0"), record.StatusDone)
	own := 0
	for _, en := range ctr.Transcript {
		if en.Kind != record.KindToolResult {
			continue
		}
		if strings.Contains(en.Result, "is the delegation that started this session") {
			own++
		}
		for _, leak := range []string{"LEAD-TASK-TEXT", "LEAD-REQUEST", "lead/pr-1"} {
			if strings.Contains(en.Result, leak) {
				t.Fatalf("read_event gave the child %q, which it does not read:\n%s", leak, en.Result)
			}
		}
	}
	if own != 1 {
		t.Fatalf("%d read_event calls were refused the delegate event, want 1: %+v", own, ctr.Transcript)
	}
}
