// Package openaifake is an in-process server speaking the OpenAI Chat
// Completions wire format, for tests and benchmarks: it answers each
// request with what a Responder decides from the conversation, reports
// usage the way the API does (prompt tokens counted by a fixed rule, so
// runs are repeatable), and records the size of every request it
// received, which is what context benchmarks measure.
//
// It is not a model: it decides nothing by itself.
package openaifake

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// Message is one message of a request, as the API carries it.
type Message struct {
	Role       string     `json:"role"`
	Content    *string    `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// Text is the message's content, "" when it has none.
func (m Message) Text() string {
	if m.Content == nil {
		return ""
	}
	return *m.Content
}

// ToolCall is a call an assistant message makes.
type ToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// Request is one request as the server received it.
type Request struct {
	Model    string    `json:"model"`
	Messages []Message `json:"messages"`
	Tools    []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
	// Bytes is the size of the request body.
	Bytes int `json:"-"`
	// PromptTokens is what the server reported as the request's input.
	PromptTokens int64 `json:"-"`
}

// Last is the request's last message.
func (r Request) Last() Message {
	if len(r.Messages) == 0 {
		return Message{}
	}
	return r.Messages[len(r.Messages)-1]
}

// System is the request's system message, "" without one.
func (r Request) System() string {
	for _, m := range r.Messages {
		if m.Role == "system" {
			return m.Text()
		}
	}
	return ""
}

// Reply is the answer to one request.
type Reply struct {
	Text      string
	ToolCalls []Call
	// CompletionTokens is the usage reported for the answer (default: its
	// text's tokens by the same rule as the prompt's).
	CompletionTokens int64
	// Status, when not 0 or 200, answers with that HTTP status instead.
	Status int
}

// Call is a tool call of a Reply.
type Call struct {
	Name string
	Args any
}

// Responder decides the reply to a request; n counts requests from 0.
type Responder func(n int, req Request) Reply

// BytesPerToken is the server's token rule: a prompt's tokens are the
// bytes of its request body divided by this, rounded up. Real tokenizers
// differ; what matters here is that the runtime calibrates its estimate
// on what the provider reports.
const BytesPerToken = 3

// Server is a running fake.
type Server struct {
	*httptest.Server
	respond Responder

	mu   sync.Mutex
	reqs []Request
}

// New starts a fake answering with respond; Close stops it.
func New(respond Responder) *Server {
	s := &Server{respond: respond}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// BaseURL is the base_url an openai model definition points at.
func (s *Server) BaseURL() string { return s.URL + "/v1" }

// Requests returns every request received so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error"}}`, http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		http.Error(w, `{"error":{"message":"read body"}}`, http.StatusBadRequest)
		return
	}
	var req Request
	if err := json.Unmarshal(body, &req); err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"message":%q,"type":"invalid_request_error"}}`, err.Error())
		return
	}
	req.Bytes = len(body)
	req.PromptTokens = tokens(len(body))
	s.mu.Lock()
	n := len(s.reqs)
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	rep := s.respond(n, req)
	if rep.Status != 0 && rep.Status != http.StatusOK {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.Status)
		fmt.Fprintf(w, `{"error":{"message":"fake status %d","type":"server_error"}}`, rep.Status)
		return
	}
	type fn struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type call struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	var calls []call
	for i, c := range rep.ToolCalls {
		args, err := json.Marshal(c.Args)
		if err != nil || c.Args == nil {
			args = []byte(`{}`)
		}
		calls = append(calls, call{ID: fmt.Sprintf("call_%d_%d", n, i), Type: "function", Function: fn{Name: c.Name, Arguments: string(args)}})
	}
	finish := "stop"
	if len(calls) > 0 {
		finish = "tool_calls"
	}
	out := rep.CompletionTokens
	if out == 0 {
		out = tokens(len(rep.Text)) + int64(10*len(calls))
	}
	resp := map[string]any{
		"id": fmt.Sprintf("chatcmpl-%d", n), "object": "chat.completion", "model": req.Model,
		"choices": []any{map[string]any{
			"index":         0,
			"message":       map[string]any{"role": "assistant", "content": rep.Text, "tool_calls": calls},
			"finish_reason": finish,
		}},
		"usage": map[string]any{"prompt_tokens": req.PromptTokens, "completion_tokens": out, "total_tokens": req.PromptTokens + out},
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

func tokens(bytes int) int64 { return int64((bytes + BytesPerToken - 1) / BytesPerToken) }
