package integration

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/worker"
)

// TestWorkerCrashCountsTheSpendOfACallItCut kills a worker with kill -9
// after a model call answered and before its settlement: the call was
// billed, and so is the one its successor makes again, so the agent's day
// spend in jl_spend counts both, and a ceiling on it sees what was spent.
func TestWorkerCrashCountsTheSpendOfACallItCut(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess crash test")
	}
	e := newCrashEnv(t)
	// Each answer costs $2 at the definition's price.
	def := policies.Definition{Name: "spender",
		Model: policies.Model{Provider: "scripted", Name: "house-model", Price: &policies.Price{InputPerMTok: 1_000_000},
			Script: []policies.ScriptEntry{{Text: "Spent.", Usage: policies.Usage{InputTokens: 2}}}},
		Limits: &policies.Limits{AgentUSDPerDay: 100}}
	c1 := startChild(t, e.spec("w1", def, false, &crashPoint{Phase: worker.PhaseSettle, Kind: record.StepModel, Step: 1}))
	ref := e.send(t, "spender", "s1", "go")
	c1.waitPoint(t, time.Minute)
	c1.kill()
	c2 := startChild(t, e.spec("w2", def, false, nil))
	e.waitDone(t, ref, c2)
	if n := e.modelCalls(t); n != 2 {
		t.Fatalf("%d model calls, want the cut one and the one made again", n)
	}
	ctx := context.Background()
	kv, err := e.js.KeyValue(ctx, e.names.BucketSpend())
	if err != nil {
		t.Fatal(err)
	}
	key, err := e.names.SpendKey("spender", time.Now().UTC().Format("20060102"), "")
	if err != nil {
		t.Fatal(err)
	}
	ent, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatalf("the agent's day spend %s: %v", key, err)
	}
	var c struct {
		USD float64 `json:"usd"`
	}
	if err := json.Unmarshal(ent.Value(), &c); err != nil || c.USD != 4 {
		t.Fatalf("the agent's day spend is %s, want $4 for two billed calls: %v", ent.Value(), err)
	}
}
