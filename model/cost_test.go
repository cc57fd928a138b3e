package model_test

import (
	"math"
	"testing"

	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
)

func TestCost(t *testing.T) {
	million := model.Usage{InputTokens: 1_000_000, OutputTokens: 1_000_000}
	tests := []struct {
		name   string
		model  string
		usage  model.Usage
		want   float64
		wantOK bool
	}{
		{name: "base name", model: "claude-sonnet-4-5", usage: million, want: 18, wantOK: true},
		{name: "dated snapshot", model: "claude-sonnet-4-5-20250929", usage: million, want: 18, wantOK: true},
		{name: "latest alias", model: "claude-3-5-haiku-latest", usage: million, want: 4.8, wantOK: true},
		{name: "openai dashed date", model: "gpt-4o-2024-08-06", usage: million, want: 12.5, wantOK: true},
		{name: "longer name is not its prefix", model: "gpt-4o-mini", usage: million, want: 0.75, wantOK: true},
		{name: "router prefix and case", model: "OpenAI/GPT-4.1", usage: million, want: 10, wantOK: true},
		{name: "small usage", model: "claude-haiku-4-5", usage: model.Usage{InputTokens: 1200, OutputTokens: 40}, want: 0.0012 + 0.0002, wantOK: true},
		{name: "unknown newer model is not priced as an older one", model: "claude-opus-4-9", usage: million, want: 0, wantOK: false},
		{name: "point release is not its base", model: "gpt-5.9", usage: million, want: 0, wantOK: false},
		{name: "local model", model: "llama3.1:8b", usage: million, want: 0, wantOK: false},
		{name: "empty", model: "", usage: million, want: 0, wantOK: false},
		{name: "zero usage", model: "gpt-5", usage: model.Usage{}, want: 0, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := model.Cost(tt.model, tt.usage)
			if ok != tt.wantOK || math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("Cost(%q) = %v, %v; want %v, %v", tt.model, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestScriptedPricesKnownModelNames(t *testing.T) {
	m, err := model.NewScripted(policies.Model{Provider: "scripted", Name: "claude-sonnet-4-5", Script: []policies.ScriptEntry{
		{Text: "hi", Usage: policies.Usage{InputTokens: 1_000_000, OutputTokens: 100_000}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.Complete(t.Context(), model.Request{})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(r.Usage.CostUSD-4.5) > 1e-9 {
		t.Fatalf("cost = %v, want 4.5", r.Usage.CostUSD)
	}
}
