package model

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jetloop/jetloop/policies"
)

// Anthropic Messages API constants.
const (
	ProviderAnthropic = "anthropic"
	// DefaultAnthropicBaseURL is the API root; the call goes to
	// {base}/v1/messages.
	DefaultAnthropicBaseURL = "https://api.anthropic.com"
	// DefaultAnthropicKeyEnv holds the API key unless the definition names
	// another variable.
	DefaultAnthropicKeyEnv = "ANTHROPIC_API_KEY"
	// DefaultAnthropicModel answers when neither the definition nor the
	// request names a model.
	DefaultAnthropicModel = "claude-sonnet-4-5"
	// DefaultMaxTokens bounds a response when neither the definition nor
	// the request does; the Messages API requires a bound.
	DefaultMaxTokens = 8192
	// anthropicVersion is the API version this wire format is written to.
	anthropicVersion = "2023-06-01"
)

// Anthropic calls the Anthropic Messages API (non-streaming), with the
// retry policy described in the package documentation. It is safe for
// concurrent use.
type Anthropic struct {
	endpoint string
	key      string
	spec     policies.Model
	opts     options
	http     *caller
}

var _ Model = (*Anthropic)(nil)

// NewAnthropic makes an Anthropic provider from a definition's model
// section. The API key is read once, here, from the environment variable
// spec.APIKeyEnv (default ANTHROPIC_API_KEY); a missing key is an error.
// spec.BaseURL replaces https://api.anthropic.com (a proxy or gateway); a
// base ending in /v1 is accepted too.
func NewAnthropic(spec policies.Model, opts ...Option) (*Anthropic, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	base := spec.BaseURL
	if base == "" {
		base = DefaultAnthropicBaseURL
	}
	endpoint, err := joinEndpoint(base, "/v1", "/messages")
	if err != nil {
		return nil, fmt.Errorf("anthropic model: base_url: %w", err)
	}
	env := spec.APIKeyEnv
	if env == "" {
		env = DefaultAnthropicKeyEnv
	}
	key := strings.TrimSpace(o.getenv(env))
	if key == "" {
		return nil, fmt.Errorf("anthropic model: API key: environment variable %s is not set", env)
	}
	return &Anthropic{
		endpoint: endpoint,
		key:      key,
		spec:     spec,
		opts:     o,
		http:     newCaller(ProviderAnthropic, spec.Timeout.D(), o),
	}, nil
}

// Complete sends the transcript to the Messages API and returns the
// assistant's answer.
func (a *Anthropic) Complete(ctx context.Context, req Request) (resp Response, err error) {
	start := time.Now()
	defer func() { a.opts.metrics.observeCall(ctx, ProviderAnthropic, a.spec.Name, start, resp, err) }()
	body, err := a.encode(req)
	if err != nil {
		return Response{}, err
	}
	h := http.Header{}
	h.Set("X-Api-Key", a.key)
	h.Set("Anthropic-Version", anthropicVersion)
	h.Set("User-Agent", userAgent)
	b, err := a.http.post(ctx, a.endpoint, h, body)
	if err != nil {
		return Response{}, err
	}
	resp, err = parseAnthropicResponse(b)
	if err != nil {
		return Response{}, &Error{Provider: ProviderAnthropic, StatusCode: http.StatusOK, Kind: ErrBadResponse, Message: err.Error()}
	}
	resp.nameTools(newWireNames(req.Tools))
	resp.Usage.CostUSD = a.opts.cost(resp.Model, resp.Usage)
	return resp, nil
}

// Wire format of the Messages API.
type (
	anthropicRequest struct {
		Model       string             `json:"model"`
		MaxTokens   int                `json:"max_tokens"`
		System      string             `json:"system,omitempty"`
		Messages    []anthropicMessage `json:"messages"`
		Tools       []anthropicTool    `json:"tools,omitempty"`
		Temperature *float64           `json:"temperature,omitempty"`
	}
	anthropicMessage struct {
		Role    string           `json:"role"`
		Content []anthropicBlock `json:"content"`
	}
	// anthropicBlock is a content block: text, tool_use or tool_result.
	anthropicBlock struct {
		Type string `json:"type"`
		Text string `json:"text,omitempty"`
		// tool_use
		ID    string          `json:"id,omitempty"`
		Name  string          `json:"name,omitempty"`
		Input json.RawMessage `json:"input,omitempty"`
		// tool_result
		ToolUseID string `json:"tool_use_id,omitempty"`
		Content   string `json:"content,omitempty"`
		IsError   bool   `json:"is_error,omitempty"`
	}
	anthropicTool struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		InputSchema json.RawMessage `json:"input_schema"`
	}
	anthropicResponse struct {
		ID         string           `json:"id"`
		Type       string           `json:"type"`
		Role       string           `json:"role"`
		Model      string           `json:"model"`
		Content    []anthropicBlock `json:"content"`
		StopReason string           `json:"stop_reason"`
		Usage      *struct {
			InputTokens              int64 `json:"input_tokens"`
			OutputTokens             int64 `json:"output_tokens"`
			CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
			CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
		} `json:"usage"`
	}
)

// encode builds the request body. Consecutive messages of one role are
// merged into one turn, tool results first, as the API expects; empty
// texts are left out, since the API refuses empty text blocks.
func (a *Anthropic) encode(req Request) ([]byte, error) {
	w := anthropicRequest{
		Model:       firstNonEmpty(req.Model, a.spec.Name, DefaultAnthropicModel),
		MaxTokens:   firstPositive(req.MaxTokens, a.spec.MaxTokens, DefaultMaxTokens),
		System:      req.System,
		Temperature: req.Temperature,
		Messages:    []anthropicMessage{},
	}
	if w.Temperature == nil {
		w.Temperature = a.spec.Temperature
	}
	for _, t := range req.Tools {
		w.Tools = append(w.Tools, anthropicTool{Name: WireName(t.Name), Description: t.Description, InputSchema: schemaOrObject(t.Schema)})
	}
	for i, m := range req.Messages {
		var role string
		var blocks []anthropicBlock
		switch m.Role {
		case RoleUser:
			role = "user"
			if m.Text != "" {
				blocks = append(blocks, anthropicBlock{Type: "text", Text: m.Text})
			}
		case RoleAssistant:
			role = "assistant"
			if m.Text != "" {
				blocks = append(blocks, anthropicBlock{Type: "text", Text: m.Text})
			}
			for j, c := range m.ToolCalls {
				args, err := argsObject(c.Args)
				if err != nil {
					return nil, &Error{Provider: ProviderAnthropic, Kind: ErrBadRequest, Message: fmt.Sprintf("messages[%d].tool_calls[%d] (%s): %v", i, j, c.Name, err)}
				}
				blocks = append(blocks, anthropicBlock{Type: "tool_use", ID: c.ID, Name: WireName(c.Name), Input: args})
			}
		case RoleTool:
			role = "user"
			for _, r := range m.ToolResults {
				blocks = append(blocks, anthropicBlock{Type: "tool_result", ToolUseID: r.CallID, Content: r.Content, IsError: r.IsError})
			}
			if m.Text != "" {
				blocks = append(blocks, anthropicBlock{Type: "text", Text: m.Text})
			}
		default:
			return nil, &Error{Provider: ProviderAnthropic, Kind: ErrBadRequest, Message: fmt.Sprintf("messages[%d]: unknown role %q", i, m.Role)}
		}
		if len(blocks) == 0 {
			continue
		}
		if n := len(w.Messages); n > 0 && w.Messages[n-1].Role == role {
			prev := &w.Messages[n-1]
			if isToolResults(blocks) && !isToolResults(prev.Content) {
				prev.Content = append(blocks, prev.Content...) // results lead the turn
			} else {
				prev.Content = append(prev.Content, blocks...)
			}
			continue
		}
		w.Messages = append(w.Messages, anthropicMessage{Role: role, Content: blocks})
	}
	b, err := json.Marshal(w)
	if err != nil {
		return nil, &Error{Provider: ProviderAnthropic, Kind: ErrBadRequest, Message: fmt.Sprintf("encoding the request: %v", err)}
	}
	return b, nil
}

func isToolResults(blocks []anthropicBlock) bool {
	return len(blocks) > 0 && blocks[0].Type == "tool_result"
}

// parseAnthropicResponse reads a Messages API response body. Unknown block
// types (thinking and the like) are skipped; a tool_use block without id,
// name or object input makes the response unusable.
func parseAnthropicResponse(b []byte) (Response, error) {
	var w anthropicResponse
	if err := json.Unmarshal(b, &w); err != nil {
		return Response{}, fmt.Errorf("decoding the response (%d bytes): %w", len(b), err)
	}
	if w.Type != "message" {
		return Response{}, fmt.Errorf("response type %q, want \"message\"", w.Type)
	}
	if w.Role != "" && w.Role != "assistant" {
		return Response{}, fmt.Errorf("response role %q, want \"assistant\"", w.Role)
	}
	if w.Usage == nil {
		return Response{}, fmt.Errorf("response %s has no usage", w.ID)
	}
	r := Response{StopReason: w.StopReason, Model: w.Model}
	r.Usage.InputTokens = w.Usage.InputTokens + w.Usage.CacheCreationInputTokens + w.Usage.CacheReadInputTokens
	r.Usage.OutputTokens = w.Usage.OutputTokens
	if r.Usage.InputTokens < 0 || r.Usage.OutputTokens < 0 {
		return Response{}, fmt.Errorf("response %s has negative usage", w.ID)
	}
	var text []string
	for i, blk := range w.Content {
		switch blk.Type {
		case "text":
			if blk.Text != "" {
				text = append(text, blk.Text)
			}
		case "tool_use":
			if blk.ID == "" || blk.Name == "" {
				return Response{}, fmt.Errorf("content[%d]: tool_use without id or name", i)
			}
			args, err := argsObject(blk.Input)
			if err != nil {
				return Response{}, fmt.Errorf("content[%d]: tool_use %s input: %w", i, blk.Name, err)
			}
			r.ToolCalls = append(r.ToolCalls, ToolCall{ID: blk.ID, Name: blk.Name, Args: args})
		}
	}
	r.Text = strings.Join(text, "\n")
	return r, nil
}

// argsObject checks that raw is a JSON object and returns it compacted;
// empty and null are the empty object.
func argsObject(raw json.RawMessage) (json.RawMessage, error) {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return json.RawMessage("{}"), nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &obj); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(s)); err != nil {
		return nil, err
	}
	return json.RawMessage(buf.Bytes()), nil
}

// schemaOrObject is the tool's schema, or the schema of any object when
// the tool declares none.
func schemaOrObject(s json.RawMessage) json.RawMessage {
	if len(strings.TrimSpace(string(s))) == 0 {
		return json.RawMessage(`{"type":"object"}`)
	}
	return s
}

// joinEndpoint appends path to base, after version unless base already
// ends with it: "https://h" and "https://h/v1" both give
// "https://h/v1/messages".
func joinEndpoint(base, version, path string) (string, error) {
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
	p := strings.TrimRight(u.Path, "/")
	if !strings.HasSuffix(p, version) {
		p += version
	}
	u.Path = p + path
	return u.String(), nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func firstPositive(n ...int) int {
	for _, v := range n {
		if v > 0 {
			return v
		}
	}
	return 0
}
