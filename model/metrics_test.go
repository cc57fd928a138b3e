package model_test

import (
	"net/http"
	"testing"

	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/prometheus/client_golang/prometheus"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	mx, err := model.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := model.NewMetrics(reg); err == nil {
		t.Fatal("registering the metrics twice should fail")
	}

	f := newFake(t, reply(http.StatusServiceUnavailable, `{}`), reply(http.StatusOK, openAIText), reply(http.StatusBadRequest, `{}`))
	m := newOpenAI(t, f.URL, policies.Model{}, append(fastRetries(3), model.WithMetrics(mx))...)
	if _, err := m.Complete(t.Context(), hello); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Complete(t.Context(), hello); err == nil {
		t.Fatal("want the 400 to fail the call")
	}
	s, err := model.New(policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{{Error: "timeout"}}}, model.WithMetrics(mx))
	if err != nil {
		t.Fatal(err)
	}
	s.Complete(t.Context(), hello)

	tests := []struct {
		name   string
		metric string
		labels map[string]string
		want   float64
	}{
		{name: "ok call", metric: "jetloop_model_calls_total", labels: map[string]string{"provider": "openai", "model": "gpt-4o-mini", "outcome": "ok"}, want: 1},
		{name: "refused call", metric: "jetloop_model_calls_total", labels: map[string]string{"provider": "openai", "model": "gpt-4o-mini", "outcome": "bad_request"}, want: 1},
		{name: "scripted timeout", metric: "jetloop_model_calls_total", labels: map[string]string{"provider": "scripted", "model": "scripted", "outcome": "timeout"}, want: 1},
		{name: "503 attempt", metric: "jetloop_model_attempts_total", labels: map[string]string{"provider": "openai", "status": "503"}, want: 1},
		{name: "200 attempt", metric: "jetloop_model_attempts_total", labels: map[string]string{"provider": "openai", "status": "200"}, want: 1},
		{name: "input tokens", metric: "jetloop_model_tokens_total", labels: map[string]string{"provider": "openai", "model": "gpt-4o-mini", "direction": "input"}, want: 1000},
		{name: "output tokens", metric: "jetloop_model_tokens_total", labels: map[string]string{"provider": "openai", "model": "gpt-4o-mini", "direction": "output"}, want: 10},
		{name: "cost", metric: "jetloop_model_cost_usd_total", labels: map[string]string{"provider": "openai", "model": "gpt-4o-mini"}, want: (1000*0.15 + 10*0.60) / 1e6},
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, fam := range families {
				if fam.GetName() != tt.metric {
					continue
				}
			next:
				for _, m := range fam.GetMetric() {
					for _, l := range m.GetLabel() {
						if tt.labels[l.GetName()] != l.GetValue() {
							continue next
						}
					}
					if got := m.GetCounter().GetValue(); got != tt.want {
						t.Fatalf("%s%v = %v, want %v", tt.metric, tt.labels, got, tt.want)
					}
					return
				}
			}
			t.Fatalf("%s%v not found", tt.metric, tt.labels)
		})
	}
}
