package worker_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/worker"
)

// TestMergedIntentMeetsTheDeadline lets the run's deadline pass after a
// model step's settlement carried the next tool call's intent and before
// the call begins: the budget is checked before the step, as for an
// intent written by itself, so the call does not run and its result
// says so.
func TestMergedIntentMeetsTheDeadline(t *testing.T) {
	t.Run("tool", func(t *testing.T) { testMergedIntentMeetsTheDeadline(t, record.StepModel, 1) })
	t.Run("model", func(t *testing.T) { testMergedIntentMeetsTheDeadline(t, record.StepTool, 2) })
}

// testMergedIntentMeetsTheDeadline lets the deadline pass after the
// settlement of step (of kind) that carries the next step's intent.
func testMergedIntentMeetsTheDeadline(t *testing.T, kind record.StepKind, step uint64) {
	e := setup(t)
	led := &ledger{path: filepath.Join(t.TempDir(), "ledger"), replaySafe: true}
	const deadline = time.Second
	def := policies.Definition{Name: "demo", Tools: []string{"ledger"}, Budget: policies.Budget{Deadline: policies.Duration(deadline)},
		Model: scripted(callLedger("Noting."), policies.ScriptEntry{Text: "Done."})}
	trace := func(_ context.Context, p worker.TracePoint) {
		if p.Phase == worker.PhaseSettled && p.Kind == kind && p.Step == step {
			// The deadline passes between the settlement and the next step.
			<-time.After(deadline)
		}
	}
	e.start(t, worker.Config{Definitions: defs{"demo": def}, Tools: worker.ToolMap{"ledger": led}, Agents: []string{"demo"}, Trace: trace})
	ref := e.ref(t, "demo", "s1")
	e.send(t, ref, "go")
	tr := e.waitStatus(t, ref, record.StatusBudgetExceeded)
	checkCalls(t, tr)
	if tr.Budget.Usage.UnknownUsageCalls != 0 {
		t.Errorf("%d model calls of unknown usage, want none", tr.Budget.Usage.UnknownUsageCalls)
	}
	if kind == record.StepTool {
		// The tool ran before the deadline; the model is not called again.
		if got, want := kinds(tr), "user,assistant,tool_call,tool_result,system"; got != want {
			t.Errorf("transcript %s, want %s", got, want)
		}
		return
	}
	if n := len(led.lines(t)); n != 0 {
		t.Errorf("the tool ran %d times after the deadline", n)
	}
	for _, en := range tr.Transcript {
		if en.Kind == record.KindToolResult && !strings.HasPrefix(en.Result, "not run:") {
			t.Errorf("result %q, want not run", en.Result)
		}
	}
}
