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

// openAIToolCalls is a real-shaped Chat Completions answer calling a tool.
const openAIToolCalls = `{
  "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
  "object": "chat.completion",
  "created": 1741570283,
  "model": "gpt-4o-2024-08-06",
  "choices": [{
    "index": 0,
    "message": {
      "role": "assistant",
      "content": null,
      "tool_calls": [{
        "id": "call_abc123",
        "type": "function",
        "function": {"name": "shell", "arguments": "{\"command\":\"cat ledger.txt\"}"}
      }],
      "refusal": null,
      "annotations": []
    },
    "logprobs": null,
    "finish_reason": "tool_calls"
  }],
  "usage": {
    "prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
  },
  "service_tier": "default",
  "system_fingerprint": "fp_fc9f1d7035"
}`

// openAIText is a plain answer.
const openAIText = `{"id":"chatcmpl-2","object":"chat.completion","created":1741570283,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"LGTM."},"finish_reason":"stop"}],"usage":{"prompt_tokens":1000,"completion_tokens":10,"total_tokens":1010}}`

// ollamaNoIDs is what a local server may send: tool calls without ids, no
// usage.
const ollamaNoIDs = `{"id":"chatcmpl-9","object":"chat.completion","created":1,"model":"llama3.1:8b","system_fingerprint":"fp_ollama","choices":[{"index":0,"message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"shell","arguments":"{\"command\":\"ls\"}"}},{"type":"function","function":{"name":"http_get","arguments":""}}]},"finish_reason":"tool_calls"}]}`

func newOpenAI(t *testing.T, base string, spec policies.Model, opts ...model.Option) *model.OpenAI {
	t.Helper()
	spec.Provider = "openai"
	spec.BaseURL = base
	if spec.Name == "" {
		spec.Name = "gpt-4o-mini"
	}
	m, err := model.NewOpenAI(spec, append([]model.Option{env("OPENAI_API_KEY", "sk-test")}, opts...)...)
	if err != nil {
		t.Fatalf("NewOpenAI: %v", err)
	}
	return m
}

func TestOpenAIRequestAndResponse(t *testing.T) {
	f := newFake(t, reply(http.StatusOK, openAIToolCalls))
	m := newOpenAI(t, f.URL+"/v1", policies.Model{Name: "gpt-4o", MaxTokens: 1024})

	got, err := m.Complete(t.Context(), conversation())
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	req := f.next(t)
	if req.method != http.MethodPost || req.path != "/v1/chat/completions" {
		t.Errorf("request %s %s, want POST /v1/chat/completions", req.method, req.path)
	}
	for k, want := range map[string]string{"Authorization": "Bearer sk-test", "Content-Type": "application/json"} {
		if v := req.header.Get(k); v != want {
			t.Errorf("header %s = %q, want %q", k, v, want)
		}
	}
	wantBody := `{
	  "model": "gpt-4o",
	  "max_tokens": 1024,
	  "temperature": 0.2,
	  "messages": [
	    {"role": "system", "content": "You review pull requests."},
	    {"role": "user", "content": "Review PR 7."},
	    {"role": "assistant", "content": "Reading it.", "tool_calls": [
	      {"id": "toolu_1", "type": "function", "function": {"name": "shell", "arguments": "{\"command\":\"git diff\"}"}},
	      {"id": "toolu_2", "type": "function", "function": {"name": "http_get", "arguments": "{}"}}
	    ]},
	    {"role": "tool", "tool_call_id": "toolu_1", "content": "+added line"},
	    {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: timeout"},
	    {"role": "user", "content": "Be brief."}
	  ],
	  "tools": [
	    {"type": "function", "function": {"name": "shell", "description": "Run a command.", "parameters": {"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}}},
	    {"type": "function", "function": {"name": "http_get", "description": "Fetch a URL.", "parameters": {"type": "object"}}}
	  ]
	}`
	assertJSON(t, req.body, wantBody)

	want := model.Response{
		ToolCalls:  []model.ToolCall{{ID: "call_abc123", Name: "shell", Args: json.RawMessage(`{"command":"cat ledger.txt"}`)}},
		StopReason: "tool_calls",
		Model:      "gpt-4o-2024-08-06",
		Usage:      model.Usage{InputTokens: 82, OutputTokens: 17, CostUSD: (82*2.5 + 17*10) / 1e6},
	}
	if math.Abs(got.Usage.CostUSD-want.Usage.CostUSD) > 1e-12 {
		t.Errorf("cost = %v, want %v", got.Usage.CostUSD, want.Usage.CostUSD)
	}
	got.Usage.CostUSD = want.Usage.CostUSD
	assertResponse(t, got, want)
}

// TestOpenAILocalServer: a server like Ollama, no key, base_url with or
// without /v1, tool calls without ids, no usage.
func TestOpenAILocalServer(t *testing.T) {
	tests := []struct {
		name     string
		suffix   string
		wantPath string
	}{
		{name: "ollama style base with /v1", suffix: "/v1", wantPath: "/v1/chat/completions"},
		{name: "bare host gets /v1", suffix: "", wantPath: "/v1/chat/completions"},
		{name: "other version path kept", suffix: "/openai/v1beta/", wantPath: "/openai/v1beta/chat/completions"},
		{name: "full endpoint", suffix: "/v1/chat/completions", wantPath: "/v1/chat/completions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, reply(http.StatusOK, ollamaNoIDs))
			m, err := model.NewOpenAI(policies.Model{Provider: "openai", Name: "llama3.1:8b", BaseURL: f.URL + tt.suffix, MaxTokens: 512}, env())
			if err != nil {
				t.Fatalf("NewOpenAI: %v", err)
			}
			req := model.Request{Messages: []model.Message{{Role: model.RoleUser, Text: "list"}, {Role: model.RoleAssistant, Text: "ok"}, {Role: model.RoleUser, Text: "again"}}}
			got, err := m.Complete(t.Context(), req)
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			r := f.next(t)
			if r.path != tt.wantPath {
				t.Errorf("path = %s, want %s", r.path, tt.wantPath)
			}
			if v := r.header.Get("Authorization"); v != "" {
				t.Errorf("Authorization = %q, want none without a key", v)
			}
			assertJSON(t, r.body, `{"model":"llama3.1:8b","max_tokens":512,"messages":[{"role":"user","content":"list"},{"role":"assistant","content":"ok"},{"role":"user","content":"again"}]}`)
			want := model.Response{
				ToolCalls: []model.ToolCall{
					{ID: "call_1_0", Name: "shell", Args: json.RawMessage(`{"command":"ls"}`)},
					{ID: "call_1_1", Name: "http_get", Args: json.RawMessage(`{}`)},
				},
				StopReason: "tool_calls",
				Model:      "llama3.1:8b",
			}
			assertResponse(t, got, want)
		})
	}
}

func TestOpenAIOfficialUsesMaxCompletionTokens(t *testing.T) {
	// Reaching api.openai.com is not possible here; the request shape is
	// checked by sending it through a client whose transport answers
	// locally.
	f := newFake(t, reply(http.StatusOK, openAIText))
	client := &http.Client{Transport: redirectTo(f.URL)}
	m, err := model.NewOpenAI(policies.Model{Provider: "openai", MaxTokens: 300}, env("OPENAI_API_KEY", "sk-test"), model.WithHTTPClient(client))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Complete(t.Context(), hello); err != nil {
		t.Fatal(err)
	}
	r := f.next(t)
	if r.path != "/v1/chat/completions" {
		t.Errorf("path = %s", r.path)
	}
	assertJSON(t, r.body, `{"model":"gpt-4.1","max_completion_tokens":300,"messages":[{"role":"user","content":"hello"}]}`)
}

// redirectTo sends every request to base instead of its own host.
type redirectTo string

func (b redirectTo) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.URL.Scheme = "http"
	r.URL.Host = strings.TrimPrefix(string(b), "http://")
	r.Host = r.URL.Host
	return http.DefaultTransport.RoundTrip(r)
}

func TestNewOpenAIErrors(t *testing.T) {
	tests := []struct {
		name string
		spec policies.Model
		opts []model.Option
		want string
	}{
		{name: "official api needs a key", spec: policies.Model{}, opts: []model.Option{env()}, want: "environment variable OPENAI_API_KEY is not set"},
		{name: "official api by url needs a key", spec: policies.Model{BaseURL: "https://api.openai.com/v1", Name: "gpt-5"}, opts: []model.Option{env()}, want: "OPENAI_API_KEY is not set"},
		{name: "named key must be set", spec: policies.Model{BaseURL: "http://localhost:8000/v1", Name: "m", APIKeyEnv: "VLLM_KEY"}, opts: []model.Option{env()}, want: "environment variable VLLM_KEY is not set"},
		{name: "local server needs a model name", spec: policies.Model{BaseURL: "http://localhost:11434/v1"}, opts: []model.Option{env()}, want: "name: empty"},
		{name: "bad base url", spec: policies.Model{BaseURL: "localhost:11434", Name: "m"}, opts: []model.Option{env()}, want: "base_url"},
		{name: "base url with query", spec: policies.Model{BaseURL: "http://h/v1?x=1", Name: "m"}, opts: []model.Option{env()}, want: "no query"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := model.NewOpenAI(tt.spec, tt.opts...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestOpenAIBadResponses(t *testing.T) {
	tests := []struct {
		name string
		body string
		want string
	}{
		{name: "not json", body: `<html>gateway</html>`, want: "decoding the response"},
		{name: "no choices", body: `{"id":"x","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":0}}`, want: "no choices"},
		{name: "arguments not json", body: `{"choices":[{"message":{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"shell","arguments":"{\"command\": "}}]}}]}`, want: "(shell) arguments"},
		{name: "tool call without name", body: `{"choices":[{"message":{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"arguments":"{}"}}]}}]}`, want: "no function name"},
		{name: "negative usage", body: `{"choices":[{"message":{"role":"assistant","content":"x"}}],"usage":{"prompt_tokens":-1,"completion_tokens":0}}`, want: "negative usage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, reply(http.StatusOK, tt.body))
			m := newOpenAI(t, f.URL, policies.Model{}, fastRetries(3)...)
			_, err := m.Complete(t.Context(), hello)
			if !errors.Is(err, model.ErrBadResponse) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrBadResponse containing %q", err, tt.want)
			}
			if n := f.requests(); n != 1 {
				t.Errorf("server saw %d requests, want 1", n)
			}
		})
	}
}

func TestOpenAIRefusal(t *testing.T) {
	f := newFake(t, reply(http.StatusOK, `{"model":"gpt-4o","choices":[{"message":{"role":"assistant","content":null,"refusal":"I can't help with that."},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":6}}`))
	m := newOpenAI(t, f.URL, policies.Model{})
	got, err := m.Complete(t.Context(), hello)
	if err != nil || got.Text != "I can't help with that." {
		t.Fatalf("Complete = %+v, %v; want the refusal as text", got, err)
	}
}
