package model_test

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
)

func TestNew(t *testing.T) {
	f := newFake(t, reply(http.StatusOK, openAIText))
	tests := []struct {
		name    string
		spec    policies.Model
		opts    []model.Option
		want    string // the provider type, or
		wantErr string
	}{
		{name: "scripted", spec: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{{Text: "hi"}}}, want: "*model.Scripted"},
		{name: "anthropic", spec: policies.Model{Provider: "anthropic"}, opts: []model.Option{env("ANTHROPIC_API_KEY", "k")}, want: "*model.Anthropic"},
		{name: "openai", spec: policies.Model{Provider: "openai"}, opts: []model.Option{env("OPENAI_API_KEY", "k")}, want: "*model.OpenAI"},
		{name: "openai local", spec: policies.Model{Provider: "openai", Name: "qwen3", BaseURL: f.URL}, opts: []model.Option{env()}, want: "*model.OpenAI"},
		{name: "unknown", spec: policies.Model{Provider: "gemini"}, wantErr: `unknown "gemini"; want one of [scripted anthropic openai]`},
		{name: "empty", spec: policies.Model{}, wantErr: "provider: empty"},
		{name: "scripted invalid", spec: policies.Model{Provider: "scripted"}, wantErr: "script is empty"},
		{name: "anthropic without key", spec: policies.Model{Provider: "anthropic"}, opts: []model.Option{env()}, wantErr: "ANTHROPIC_API_KEY"},
		{name: "bad option", spec: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{{Text: "hi"}}}, opts: []model.Option{model.WithPrice(model.Price{InputPerMTok: -1})}, wantErr: "negative price"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := model.New(tt.spec, tt.opts...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if got := fmt.Sprintf("%T", m); got != tt.want {
				t.Fatalf("New made %s, want %s", got, tt.want)
			}
		})
	}
}

func TestNewScriptedWithPrice(t *testing.T) {
	m, err := model.New(policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{{Text: "hi", Usage: policies.Usage{InputTokens: 500_000, OutputTokens: 100_000}}}},
		model.WithPrice(model.Price{InputPerMTok: 2, OutputPerMTok: 10}))
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.Complete(t.Context(), model.Request{})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(r.Usage.CostUSD-2) > 1e-9 {
		t.Fatalf("cost = %v, want 2", r.Usage.CostUSD)
	}
}

// KeyEnv names the variable New reads and says whether New needs it: New
// fails without it exactly when KeyEnv says it is needed, and succeeds
// with it set.
func TestKeyEnvAgreesWithNew(t *testing.T) {
	f := newFake(t, reply(http.StatusOK, openAIText))
	specs := []policies.Model{
		{Provider: "anthropic"},
		{Provider: "anthropic", APIKeyEnv: "TEAM_KEY"},
		{Provider: "openai"},
		{Provider: "openai", BaseURL: "https://api.openai.com/v1"},
		{Provider: "openai", Name: "qwen3", BaseURL: f.URL},
		{Provider: "openai", Name: "qwen3", BaseURL: f.URL, APIKeyEnv: "LOCAL_KEY"},
		{Provider: "scripted", Script: []policies.ScriptEntry{{Text: "hi"}}},
	}
	for _, spec := range specs {
		name, needed := model.KeyEnv(spec)
		_, err := model.New(spec, env())
		if needed != (err != nil) {
			t.Errorf("%+v: KeyEnv says needed=%v, New without it: %v", spec, needed, err)
		}
		if needed && !strings.Contains(err.Error(), name) {
			t.Errorf("%+v: New's error %q does not name %s", spec, err, name)
		}
		if name != "" {
			if _, err := model.New(spec, env(name, "k")); err != nil {
				t.Errorf("%+v: New with %s set: %v", spec, name, err)
			}
		}
	}
}

// A definition's model.price prices what the table does not know, for
// every provider.
func TestDefinitionPrice(t *testing.T) {
	price := &policies.Price{InputPerMTok: 2, OutputPerMTok: 10}
	m, err := model.New(policies.Model{Provider: "scripted", Name: "local-llm", Price: price,
		Script: []policies.ScriptEntry{{Text: "hi", Usage: policies.Usage{InputTokens: 500_000, OutputTokens: 100_000}}}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.Complete(t.Context(), model.Request{})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(r.Usage.CostUSD-2) > 1e-9 {
		t.Fatalf("cost %v, want 2 (1 for input, 1 for output)", r.Usage.CostUSD)
	}
	f := newFake(t, reply(http.StatusOK, openAIText))
	o, err := model.New(policies.Model{Provider: "openai", Name: "qwen3", BaseURL: f.URL, Price: price}, env())
	if err != nil {
		t.Fatal(err)
	}
	r, err = o.Complete(t.Context(), model.Request{Messages: []model.Message{{Role: model.RoleUser, Text: "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	if want := price.InputPerMTok*float64(r.Usage.InputTokens)/1e6 + price.OutputPerMTok*float64(r.Usage.OutputTokens)/1e6; r.Usage.CostUSD == 0 || math.Abs(r.Usage.CostUSD-want) > 1e-12 {
		t.Fatalf("cost %v of %+v, want %v", r.Usage.CostUSD, r.Usage, want)
	}
}
