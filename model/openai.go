package model

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jetloop/jetloop/policies"
)

// OpenAI Chat Completions constants.
const (
	ProviderOpenAI = "openai"
	// DefaultOpenAIBaseURL is the API root; the call goes to
	// {base}/chat/completions.
	DefaultOpenAIBaseURL = "https://api.openai.com/v1"
	// DefaultOpenAIKeyEnv holds the API key unless the definition names
	// another variable.
	DefaultOpenAIKeyEnv = "OPENAI_API_KEY"
	// DefaultOpenAIModel answers on api.openai.com when neither the
	// definition nor the request names a model. A local server has no
	// default: its definition must name the model.
	DefaultOpenAIModel = "gpt-4.1"
)

// OpenAI calls a Chat Completions endpoint (non-streaming): OpenAI itself,
// or any server speaking the same API, such as Ollama, vLLM and the
// llama.cpp server. See the package documentation for base_url. It is safe
// for concurrent use.
type OpenAI struct {
	endpoint string
	key      string // empty: no Authorization header (local servers)
	// official reports api.openai.com, which wants max_completion_tokens
	// where other servers read max_tokens.
	official bool
	spec     policies.Model
	opts     options
	http     *caller
}

var _ Model = (*OpenAI)(nil)

// NewOpenAI makes a Chat Completions provider from a definition's model
// section.
//
// base_url is the API root, version path included, exactly as the OpenAI
// SDKs take it: the call goes to {base_url}/chat/completions. A base_url
// with no path gets /v1, so "http://localhost:11434" works for Ollama like
// "http://localhost:11434/v1"; a base_url already ending in
// /chat/completions is used as is.
//
// The API key comes from the environment variable spec.APIKeyEnv (default
// OPENAI_API_KEY). It is required for api.openai.com and whenever
// api_key_env is set; a server at another base_url without a key is called
// without an Authorization header.
func NewOpenAI(spec policies.Model, opts ...Option) (*OpenAI, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	p := &OpenAI{spec: spec, opts: o, official: spec.BaseURL == ""}
	base := spec.BaseURL
	if base == "" {
		base = DefaultOpenAIBaseURL
	}
	p.endpoint, err = openAIEndpoint(base)
	if err != nil {
		return nil, fmt.Errorf("openai model: base_url: %w", err)
	}
	if u, _ := url.Parse(p.endpoint); u != nil && u.Host == "api.openai.com" {
		p.official = true
	}
	env := spec.APIKeyEnv
	if env == "" {
		env = DefaultOpenAIKeyEnv
	}
	p.key = strings.TrimSpace(o.getenv(env))
	if p.key == "" && (p.official || spec.APIKeyEnv != "") {
		return nil, fmt.Errorf("openai model: API key: environment variable %s is not set", env)
	}
	if spec.Name == "" && !p.official {
		return nil, fmt.Errorf("openai model: name: empty; a server at %s needs the model named (e.g. llama3.1:8b for Ollama)", base)
	}
	p.http = newCaller(ProviderOpenAI, spec.Timeout.D(), o)
	return p, nil
}

// openAIEndpoint resolves base_url to the chat completions URL.
func openAIEndpoint(base string) (string, error) {
	u, err := url.Parse(strings.TrimRight(strings.TrimSpace(base), "/"))
	if err != nil {
		return "", fmt.Errorf("%q: %w", base, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("%q: want an http or https URL with a host", base)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%q: want no query or fragment", base)
	}
	switch {
	case strings.HasSuffix(u.Path, "/chat/completions"):
	case u.Path == "":
		u.Path = "/v1/chat/completions"
	default:
		u.Path += "/chat/completions"
	}
	return u.String(), nil
}

// Complete sends the transcript to the Chat Completions endpoint and
// returns the first choice.
func (p *OpenAI) Complete(ctx context.Context, req Request) (resp Response, err error) {
	start := time.Now()
	defer func() { p.opts.metrics.observeCall(ctx, ProviderOpenAI, p.spec.Name, start, resp, err) }()
	body, err := p.encode(req)
	if err != nil {
		return Response{}, err
	}
	h := http.Header{}
	if p.key != "" {
		h.Set("Authorization", "Bearer "+p.key)
	}
	h.Set("User-Agent", userAgent)
	b, err := p.http.post(ctx, p.endpoint, h, body)
	if err != nil {
		return Response{}, err
	}
	resp, err = parseOpenAIResponse(b, Position(req.Messages))
	if err != nil {
		return Response{}, &Error{Provider: ProviderOpenAI, StatusCode: http.StatusOK, Kind: ErrBadResponse, Message: err.Error()}
	}
	resp.nameTools(newWireNames(req.Tools))
	if resp.Model == "" {
		resp.Model = p.modelName(req)
	}
	resp.Usage.CostUSD = p.opts.cost(resp.Model, resp.Usage)
	return resp, nil
}

func (p *OpenAI) modelName(req Request) string {
	return firstNonEmpty(req.Model, p.spec.Name, DefaultOpenAIModel)
}

// Wire format of Chat Completions.
type (
	openAIRequest struct {
		Model               string          `json:"model"`
		Messages            []openAIMessage `json:"messages"`
		Tools               []openAITool    `json:"tools,omitempty"`
		MaxTokens           int             `json:"max_tokens,omitempty"`
		MaxCompletionTokens int             `json:"max_completion_tokens,omitempty"`
		Temperature         *float64        `json:"temperature,omitempty"`
	}
	openAIMessage struct {
		Role string `json:"role"`
		// Content is a string, or null for an assistant message that only
		// calls tools.
		Content    *string          `json:"content"`
		ToolCalls  []openAIToolCall `json:"tool_calls,omitempty"`
		ToolCallID string           `json:"tool_call_id,omitempty"`
	}
	openAIToolCall struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
			// Arguments is a JSON object encoded as a string.
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	openAITool struct {
		Type     string `json:"type"`
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description,omitempty"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	openAIResponse struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Model   string `json:"model"`
		Choices []struct {
			Index   int `json:"index"`
			Message struct {
				Role      string           `json:"role"`
				Content   *string          `json:"content"`
				Refusal   *string          `json:"refusal"`
				ToolCalls []openAIToolCall `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage *struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
)

// encode builds the request body: the system prompt as the first message,
// one "tool" message per tool result (an error result's content prefixed
// with "Error: ", since the API has no error flag), tools as functions.
func (p *OpenAI) encode(req Request) ([]byte, error) {
	w := openAIRequest{
		Model:       p.modelName(req),
		Temperature: req.Temperature,
		Messages:    []openAIMessage{},
	}
	if w.Temperature == nil {
		w.Temperature = p.spec.Temperature
	}
	if n := firstPositive(req.MaxTokens, p.spec.MaxTokens); n > 0 {
		if p.official {
			w.MaxCompletionTokens = n
		} else {
			w.MaxTokens = n
		}
	}
	if req.System != "" {
		w.Messages = append(w.Messages, openAIMessage{Role: "system", Content: &req.System})
	}
	for _, t := range req.Tools {
		var ot openAITool
		ot.Type = "function"
		ot.Function.Name = WireName(t.Name)
		ot.Function.Description = t.Description
		ot.Function.Parameters = schemaOrObject(t.Schema)
		w.Tools = append(w.Tools, ot)
	}
	for i, m := range req.Messages {
		switch m.Role {
		case RoleUser:
			w.Messages = append(w.Messages, openAIMessage{Role: "user", Content: &m.Text})
		case RoleAssistant:
			om := openAIMessage{Role: "assistant"}
			if m.Text != "" || len(m.ToolCalls) == 0 {
				om.Content = &m.Text
			}
			for j, c := range m.ToolCalls {
				args, err := argsObject(c.Args)
				if err != nil {
					return nil, &Error{Provider: ProviderOpenAI, Kind: ErrBadRequest, Message: fmt.Sprintf("messages[%d].tool_calls[%d] (%s): %v", i, j, c.Name, err)}
				}
				var tc openAIToolCall
				tc.ID, tc.Type = c.ID, "function"
				tc.Function.Name, tc.Function.Arguments = WireName(c.Name), string(args)
				om.ToolCalls = append(om.ToolCalls, tc)
			}
			w.Messages = append(w.Messages, om)
		case RoleTool:
			for _, r := range m.ToolResults {
				content := r.Content
				if r.IsError {
					content = "Error: " + content
				}
				w.Messages = append(w.Messages, openAIMessage{Role: "tool", ToolCallID: r.CallID, Content: &content})
			}
			if m.Text != "" {
				w.Messages = append(w.Messages, openAIMessage{Role: "user", Content: &m.Text})
			}
		default:
			return nil, &Error{Provider: ProviderOpenAI, Kind: ErrBadRequest, Message: fmt.Sprintf("messages[%d]: unknown role %q", i, m.Role)}
		}
	}
	b, err := json.Marshal(w)
	if err != nil {
		return nil, &Error{Provider: ProviderOpenAI, Kind: ErrBadRequest, Message: fmt.Sprintf("encoding the request: %v", err)}
	}
	return b, nil
}

// parseOpenAIResponse reads a Chat Completions response body: the first
// choice's text (or refusal) and tool calls. A tool call without an id, as
// some local servers send, gets "call_<pos>_<i>" from the transcript
// position pos, the same on every retry of the call. Arguments that are
// not a JSON object make the response unusable. A server that reports no
// usage (some local ones) yields zero usage.
func parseOpenAIResponse(b []byte, pos int) (Response, error) {
	var w openAIResponse
	if err := json.Unmarshal(b, &w); err != nil {
		return Response{}, fmt.Errorf("decoding the response (%d bytes): %w", len(b), err)
	}
	if len(w.Choices) == 0 {
		return Response{}, fmt.Errorf("response %s has no choices", w.ID)
	}
	c := w.Choices[0]
	if c.Message.Role != "" && c.Message.Role != "assistant" {
		return Response{}, fmt.Errorf("response role %q, want \"assistant\"", c.Message.Role)
	}
	r := Response{StopReason: c.FinishReason, Model: w.Model}
	if c.Message.Content != nil {
		r.Text = *c.Message.Content
	}
	if r.Text == "" && c.Message.Refusal != nil {
		r.Text = *c.Message.Refusal
	}
	if w.Usage != nil {
		r.Usage.InputTokens, r.Usage.OutputTokens = w.Usage.PromptTokens, w.Usage.CompletionTokens
		if r.Usage.InputTokens < 0 || r.Usage.OutputTokens < 0 {
			return Response{}, fmt.Errorf("response %s has negative usage", w.ID)
		}
	}
	for i, tc := range c.Message.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			return Response{}, fmt.Errorf("choices[0].tool_calls[%d]: type %q, want \"function\"", i, tc.Type)
		}
		if tc.Function.Name == "" {
			return Response{}, fmt.Errorf("choices[0].tool_calls[%d]: no function name", i)
		}
		args, err := argsObject(json.RawMessage(tc.Function.Arguments))
		if err != nil {
			return Response{}, fmt.Errorf("choices[0].tool_calls[%d] (%s) arguments: %w", i, tc.Function.Name, err)
		}
		id := tc.ID
		if id == "" {
			id = fmt.Sprintf("call_%d_%d", pos, i)
		}
		r.ToolCalls = append(r.ToolCalls, ToolCall{ID: id, Name: tc.Function.Name, Args: args})
	}
	return r, nil
}
