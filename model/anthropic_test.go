package model_test

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
)

// anthropicToolUse is a real-shaped Messages API answer with text and a
// tool call.
const anthropicToolUse = `{
  "id": "msg_01Aq9w938a90dw8q",
  "type": "message",
  "role": "assistant",
  "model": "claude-sonnet-4-5-20250929",
  "content": [
    {"type": "thinking", "thinking": "The user wants the weather.", "signature": "EqQBCgIYAhIM"},
    {"type": "text", "text": "I'll check the ledger."},
    {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "shell", "input": {"command": "cat ledger.txt"}}
  ],
  "stop_reason": "tool_use",
  "stop_sequence": null,
  "usage": {"input_tokens": 2095, "output_tokens": 503, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
}`

// anthropicText is a plain answer.
const anthropicText = `{"id":"msg_02","type":"message","role":"assistant","model":"claude-haiku-4-5","content":[{"type":"text","text":"LGTM."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1000,"output_tokens":10,"cache_read_input_tokens":200}}`

func newAnthropic(t *testing.T, base string, spec policies.Model, opts ...model.Option) *model.Anthropic {
	t.Helper()
	spec.Provider = "anthropic"
	spec.BaseURL = base
	m, err := model.NewAnthropic(spec, append([]model.Option{env("ANTHROPIC_API_KEY", "sk-ant-test")}, opts...)...)
	if err != nil {
		t.Fatalf("NewAnthropic: %v", err)
	}
	return m
}

// conversation is a transcript with a tool round trip and a steer.
func conversation() model.Request {
	temp := 0.2
	return model.Request{
		System: "You review pull requests.",
		Messages: []model.Message{
			{Role: model.RoleUser, Text: "Review PR 7."},
			{Role: model.RoleAssistant, Text: "Reading it.", ToolCalls: []model.ToolCall{
				{ID: "toolu_1", Name: "shell", Args: json.RawMessage(`{"command": "git diff"}`)},
				{ID: "toolu_2", Name: "http_get", Args: nil},
			}},
			{Role: model.RoleTool, ToolResults: []model.ToolResult{
				{CallID: "toolu_1", Content: "+added line"},
				{CallID: "toolu_2", Content: "timeout", IsError: true},
			}},
			{Role: model.RoleUser, Text: "Be brief."},
		},
		Tools: []model.ToolSpec{
			{Name: "shell", Description: "Run a command.", Schema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`)},
			{Name: "http_get", Description: "Fetch a URL."},
		},
		Temperature: &temp,
	}
}

func TestAnthropicRequestAndResponse(t *testing.T) {
	f := newFake(t, reply(http.StatusOK, anthropicToolUse, "Request-Id", "req_1"))
	m := newAnthropic(t, f.URL, policies.Model{Name: "claude-sonnet-4-5", MaxTokens: 1024})

	got, err := m.Complete(t.Context(), conversation())
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	req := f.next(t)
	if req.method != http.MethodPost || req.path != "/v1/messages" {
		t.Errorf("request %s %s, want POST /v1/messages", req.method, req.path)
	}
	for k, want := range map[string]string{"X-Api-Key": "sk-ant-test", "Anthropic-Version": "2023-06-01", "Content-Type": "application/json"} {
		if v := req.header.Get(k); v != want {
			t.Errorf("header %s = %q, want %q", k, v, want)
		}
	}
	wantBody := `{
	  "model": "claude-sonnet-4-5",
	  "max_tokens": 1024,
	  "system": "You review pull requests.",
	  "messages": [
	    {"role": "user", "content": [{"type": "text", "text": "Review PR 7."}]},
	    {"role": "assistant", "content": [
	      {"type": "text", "text": "Reading it."},
	      {"type": "tool_use", "id": "toolu_1", "name": "shell", "input": {"command": "git diff"}},
	      {"type": "tool_use", "id": "toolu_2", "name": "http_get", "input": {}}
	    ]},
	    {"role": "user", "content": [
	      {"type": "tool_result", "tool_use_id": "toolu_1", "content": "+added line"},
	      {"type": "tool_result", "tool_use_id": "toolu_2", "content": "timeout", "is_error": true},
	      {"type": "text", "text": "Be brief."}
	    ]}
	  ],
	  "tools": [
	    {"name": "shell", "description": "Run a command.", "input_schema": {"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}},
	    {"name": "http_get", "description": "Fetch a URL.", "input_schema": {"type": "object"}}
	  ],
	  "temperature": 0.2
	}`
	assertJSON(t, req.body, wantBody)

	want := model.Response{
		Text:       "I'll check the ledger.",
		ToolCalls:  []model.ToolCall{{ID: "toolu_01A09q90qw90lq917835lq9", Name: "shell", Args: json.RawMessage(`{"command":"cat ledger.txt"}`)}},
		StopReason: "tool_use",
		Model:      "claude-sonnet-4-5-20250929",
		Usage:      model.Usage{InputTokens: 2095, OutputTokens: 503, CostUSD: (2095*3 + 503*15) / 1e6},
	}
	if math.Abs(got.Usage.CostUSD-want.Usage.CostUSD) > 1e-12 {
		t.Errorf("cost = %v, want %v", got.Usage.CostUSD, want.Usage.CostUSD)
	}
	got.Usage.CostUSD = want.Usage.CostUSD
	assertResponse(t, got, want)
}

func TestAnthropicDefaultsAndCacheUsage(t *testing.T) {
	f := newFake(t, reply(http.StatusOK, anthropicText))
	m := newAnthropic(t, f.URL+"/v1/", policies.Model{}, model.WithPrice(model.Price{InputPerMTok: 1000, OutputPerMTok: 0}))
	got, err := m.Complete(t.Context(), model.Request{Messages: []model.Message{{Role: model.RoleUser, Text: "hi"}, {Role: model.RoleAssistant}}})
	if err != nil {
		t.Fatal(err)
	}
	req := f.next(t)
	if req.path != "/v1/messages" {
		t.Errorf("path = %s, want /v1/messages for a base ending in /v1", req.path)
	}
	assertJSON(t, req.body, `{"model":"claude-sonnet-4-5","max_tokens":8192,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`)
	if got.Text != "LGTM." || got.Usage.InputTokens != 1200 || got.Usage.OutputTokens != 10 {
		t.Errorf("response = %+v, want LGTM. with cache reads counted as input", got)
	}
	if math.Abs(got.Usage.CostUSD-1.2) > 1e-9 {
		t.Errorf("cost = %v, want 1.2 at the overriding price", got.Usage.CostUSD)
	}
}

func TestNewAnthropicErrors(t *testing.T) {
	tests := []struct {
		name string
		spec policies.Model
		opts []model.Option
		want string
	}{
		{name: "missing default key", spec: policies.Model{}, opts: []model.Option{env()}, want: "environment variable ANTHROPIC_API_KEY is not set"},
		{name: "missing named key", spec: policies.Model{APIKeyEnv: "TEAM_KEY"}, opts: []model.Option{env("ANTHROPIC_API_KEY", "x")}, want: "environment variable TEAM_KEY is not set"},
		{name: "bad base url", spec: policies.Model{BaseURL: "ftp://example.com"}, opts: []model.Option{env("ANTHROPIC_API_KEY", "x")}, want: "base_url"},
		{name: "bad option", spec: policies.Model{}, opts: []model.Option{model.WithMaxAttempts(0)}, want: "WithMaxAttempts(0)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := model.NewAnthropic(tt.spec, tt.opts...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestAnthropicBadResponses(t *testing.T) {
	tests := []struct {
		name string
		body string
		want string
	}{
		{name: "not json", body: `<html>gateway</html>`, want: "decoding the response"},
		{name: "error object with 200", body: `{"type":"error","error":{"type":"api_error","message":"boom"}}`, want: `response type "error"`},
		{name: "no usage", body: `{"type":"message","role":"assistant","content":[]}`, want: "no usage"},
		{name: "tool_use without id", body: `{"type":"message","role":"assistant","content":[{"type":"tool_use","name":"x","input":{}}],"usage":{"input_tokens":1,"output_tokens":1}}`, want: "without id or name"},
		{name: "tool_use input not an object", body: `{"type":"message","role":"assistant","content":[{"type":"tool_use","id":"t","name":"x","input":[1]}],"usage":{"input_tokens":1,"output_tokens":1}}`, want: "not a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, reply(http.StatusOK, tt.body))
			m := newAnthropic(t, f.URL, policies.Model{}, fastRetries(3)...)
			_, err := m.Complete(t.Context(), model.Request{Messages: []model.Message{{Role: model.RoleUser, Text: "hi"}}})
			if !errors.Is(err, model.ErrBadResponse) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrBadResponse containing %q", err, tt.want)
			}
			if n := f.requests(); n != 1 {
				t.Errorf("server saw %d requests, want 1: an unusable complete answer is not retried", n)
			}
		})
	}
}

func TestAnthropicRefusesBadTranscript(t *testing.T) {
	f := newFake(t, reply(http.StatusOK, anthropicText))
	m := newAnthropic(t, f.URL, policies.Model{})
	tests := []struct {
		name string
		msgs []model.Message
		want string
	}{
		{name: "unknown role", msgs: []model.Message{{Role: "system", Text: "x"}}, want: `messages[0]: unknown role "system"`},
		{name: "args not an object", msgs: []model.Message{{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "a", Name: "shell", Args: json.RawMessage(`"ls"`)}}}}, want: "messages[0].tool_calls[0] (shell)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.Complete(t.Context(), model.Request{Messages: tt.msgs})
			if !errors.Is(err, model.ErrBadRequest) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrBadRequest containing %q", err, tt.want)
			}
		})
	}
	if n := f.requests(); n != 0 {
		t.Errorf("server saw %d requests, want none", n)
	}
}

// assertJSON compares two JSON documents by value.
func assertJSON(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("request body is not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want is not JSON: %v", err)
	}
	gb, _ := json.MarshalIndent(g, "", "  ")
	wb, _ := json.MarshalIndent(w, "", "  ")
	if string(gb) != string(wb) {
		t.Errorf("request body:\n got %s\nwant %s", gb, wb)
	}
}
