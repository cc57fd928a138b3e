package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/ledger"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/tools"
)

// A child's budget is what it asks for, or what the run has left, and
// never more than that; a limit the run does not have is the child's ask.
func TestCarve(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	limits := policies.Budget{MaxTurns: 10, MaxCostUSD: 1}
	used := ledger.Usage{Turns: 4, CostUSD: 0.25}
	tests := []struct {
		name     string
		limits   policies.Budget
		ask      tools.DelegatedBudget
		deadline time.Time
		want     string // a refusal, or "" with wantTurns and wantCost
		turns    int
		cost     float64
		tokens   int64
		at       time.Time
	}{
		{name: "what is left", limits: limits, turns: 6, cost: 0.75},
		{name: "less than left", limits: limits, ask: tools.DelegatedBudget{MaxTurns: 2, MaxCostUSD: 0.5, MaxTokens: 100}, turns: 2, cost: 0.5, tokens: 100},
		{name: "more turns", limits: limits, ask: tools.DelegatedBudget{MaxTurns: 7}, want: "budget.max_turns 7 is more than the 6 turns this run has left"},
		{name: "more cost", limits: limits, ask: tools.DelegatedBudget{MaxCostUSD: 0.8}, want: "budget.max_cost_usd 0.8000 is more than the 0.7500 this run has left"},
		{name: "nothing left", limits: policies.Budget{MaxTurns: 4}, want: "no turns are left of this run's max_turns 4"},
		{name: "no limits", ask: tools.DelegatedBudget{MaxTokens: 50}, tokens: 50},
		{name: "deadline carried", limits: limits, deadline: now.Add(time.Minute), turns: 6, cost: 0.75, at: now.Add(time.Minute)},
		{name: "sooner deadline", limits: limits, deadline: now.Add(time.Hour), ask: tools.DelegatedBudget{Deadline: time.Minute}, turns: 6, cost: 0.75, at: now.Add(time.Minute)},
		{name: "later deadline", limits: limits, deadline: now.Add(time.Minute), ask: tools.DelegatedBudget{Deadline: time.Hour}, want: "budget.deadline 1h0m0s is later than this run's deadline, 1m0s from now"},
		{name: "deadline passed", limits: limits, deadline: now.Add(-time.Second), want: "this run's deadline has passed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, why := carve(tt.limits, used, tt.ask, tt.deadline, now)
			if tt.want != "" {
				if !strings.Contains(why, tt.want) {
					t.Fatalf("carve = %+v, %q; want a refusal saying %q", b, why, tt.want)
				}
				return
			}
			if why != "" || b.MaxTurns != tt.turns || b.MaxCostUSD != tt.cost || b.MaxTokens != tt.tokens || !b.DeadlineAt.Equal(tt.at) {
				t.Fatalf("carve = %+v, %q", b, why)
			}
		})
	}
}
