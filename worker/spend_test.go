package worker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/worker"
)

// dollars is a scripted model whose every answer costs usd, priced by the
// definition (a model the price table does not know).
func dollars(usd int64, texts ...string) policies.Model {
	m := policies.Model{Provider: "scripted", Name: "house-model", Price: &policies.Price{InputPerMTok: 1e6}}
	for _, t := range texts {
		m.Script = append(m.Script, policies.ScriptEntry{Text: t, Usage: policies.Usage{InputTokens: usd}})
	}
	return m
}

// waitRuns waits until the session has handled n events (its transcript
// holds n event or user entries) and rests.
func (e *env) waitRuns(t *testing.T, ref streams.SessionRef, n int) record.Transcript {
	t.Helper()
	var tr record.Transcript
	natstest.WaitFor(t, 30*time.Second, func() error {
		var err error
		if tr, err = record.Show(context.Background(), e.js, e.names, ref); err != nil {
			return err
		}
		got := 0
		for _, en := range tr.Transcript {
			if en.Kind == record.KindUser || en.Kind == record.KindEvent {
				got++
			}
		}
		if got != n || !tr.Status.Resting() {
			return fmt.Errorf("%d events handled, status %s; want %d at rest", got, tr.Status, n)
		}
		return nil
	})
	return tr
}

// limits.session_usd: runs go on while the session's lifetime spend is
// under the ceiling; the run after it is reached does not start, its
// event recorded with the reason, the status saying it, and the decision
// in JL_AUDIT.
func TestSessionSpendCeilingStopsTheNextRun(t *testing.T) {
	e := setup(t)
	def := policies.Definition{Name: "spender", Model: dollars(3, "One.", "Two.", "Three."),
		Limits: &policies.Limits{SessionUSD: 5}}
	e.start(t, worker.Config{Definitions: defs{"spender": def}, Agents: []string{"spender"}})
	ref := e.ref(t, "spender", "s1")
	for i := 1; i <= 2; i++ {
		e.send(t, ref, fmt.Sprint("run ", i))
		tr := e.waitRuns(t, ref, i)
		if tr.Status != record.StatusDone {
			t.Fatalf("run %d: %s (%s)", i, tr.Status, tr.Reason)
		}
	}
	e.send(t, ref, "run 3")
	tr := e.waitRuns(t, ref, 3)
	if tr.Status != record.StatusBudgetExceeded || !strings.Contains(tr.Reason, "limits.session_usd 5.0000 reached (6.0000 spent") {
		t.Fatalf("third run: %s (%s)", tr.Status, tr.Reason)
	}
	if got, want := kinds(tr), "user,assistant,user,assistant,user,system"; got != want {
		t.Fatalf("transcript %s, want %s", got, want)
	}
	waitAudit(t, e, func(r admission.Record) bool {
		return r.Outcome == admission.LimitReached && r.Agent == "spender" && strings.Contains(r.Reason, "session_usd")
	})
}

// limits.agent_usd_per_day and key_usd_per_day count every session's
// spend on counters in jl_spend that workers share: once a key's ceiling
// is reached, a new session of that key does not run, while one of
// another key does; once the agent's is reached, none does.
func TestDaySpendCeilingsAreShared(t *testing.T) {
	e := setup(t)
	def := policies.Definition{Name: "team", Model: dollars(2, "Done."),
		Limits: &policies.Limits{AgentUSDPerDay: 6, KeyUSDPerDay: 3, Key: "event.subject.split('-')[0]"}}
	for _, id := range []string{"w1", "w2"} {
		e.start(t, worker.Config{ID: id, Definitions: defs{"team": def}, Agents: []string{"team"}})
	}
	run := func(session string, want record.Status, reason string) {
		t.Helper()
		ref := e.ref(t, "team", session)
		e.send(t, ref, "go")
		tr := e.waitRuns(t, ref, 1)
		if tr.Status != want || !strings.Contains(tr.Reason, reason) {
			t.Fatalf("%s: %s (%s), want %s (%s)", session, tr.Status, tr.Reason, want, reason)
		}
	}
	run("a-1", record.StatusDone, "")
	run("a-2", record.StatusDone, "") // key a: $4 ≥ 3 now
	run("a-3", record.StatusBudgetExceeded, `limits.key_usd_per_day 3.0000 reached for key "a"`)
	run("b-1", record.StatusDone, "") // agent: $6 ≥ 6 now
	run("c-1", record.StatusBudgetExceeded, "limits.agent_usd_per_day 6.0000 reached (6.0000 spent by agent team today")
}

// A worker that cannot build a definition's model (its API key variable
// is not set there) fails the run with the reason in the status, rather
// than leave the session idle; the event is a dead letter, to be
// redriven once the worker has its key.
func TestMissingModelKeyFailsTheRun(t *testing.T) {
	e := setup(t)
	def := policies.Definition{Name: "keyed", Model: policies.Model{Provider: "anthropic", Name: "claude-sonnet-4-5"}}
	models := func(spec policies.Model) (model.Model, error) {
		return model.New(spec, model.WithGetenv(func(string) string { return "" }))
	}
	e.start(t, worker.Config{Definitions: defs{"keyed": def}, Agents: []string{"keyed"}, Models: models})
	ref := e.ref(t, "keyed", "s1")
	e.send(t, ref, "hello")
	tr := e.waitStatus(t, ref, record.StatusFailed)
	if !strings.Contains(tr.Reason, "ANTHROPIC_API_KEY") || !strings.Contains(tr.Reason, "on worker w1") {
		t.Fatalf("reason %q", tr.Reason)
	}
	if got, want := kinds(tr), "system"; got != want {
		t.Fatalf("transcript %s, want %s", got, want)
	}
}

// budget.max_cost_usd ends the run whose spend reaches it before its next
// step: the call the model asked for is answered "not run".
func TestRunCostBudget(t *testing.T) {
	e := setup(t)
	led := &ledger{path: t.TempDir() + "/ledger"}
	m := dollars(3, "Noting.", "Noting again.", "Noted.")
	for i := range 2 {
		m.Script[i].ToolCalls = []policies.ScriptToolCall{{Name: "ledger"}}
	}
	def := policies.Definition{Name: "costly", Tools: []string{"ledger"}, Model: m, Budget: policies.Budget{MaxCostUSD: 5}}
	e.start(t, worker.Config{Definitions: defs{"costly": def}, Agents: []string{"costly"}, Tools: worker.ToolMap{"ledger": led}})
	ref := e.ref(t, "costly", "s1")
	e.send(t, ref, "go")
	tr := e.waitStatus(t, ref, record.StatusBudgetExceeded)
	if !strings.Contains(tr.Reason, "max_cost_usd 5.0000 reached in this run (6.0000 spent)") {
		t.Fatalf("reason %q", tr.Reason)
	}
	if got, want := kinds(tr), "user,assistant,tool_call,tool_result,assistant,tool_call,system,tool_result"; got != want {
		t.Fatalf("transcript %s, want %s", got, want)
	}
}
