package openaifake_test

import (
	"context"
	"testing"

	"github.com/jetloop/jetloop/internal/openaifake"
	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
)

// The real OpenAI provider talks to the fake: tool calls and text come
// back, usage is reported by the fake's rule, and every request's size is
// recorded.
func TestProviderAgainstFake(t *testing.T) {
	f := openaifake.New(func(n int, req openaifake.Request) openaifake.Reply {
		if req.Last().Role == "tool" {
			return openaifake.Reply{Text: "done: " + req.Last().Text()}
		}
		return openaifake.Reply{ToolCalls: []openaifake.Call{{Name: "http_get", Args: map[string]any{"url": "http://x"}}}}
	})
	defer f.Close()
	m, err := model.NewOpenAI(policies.Model{Provider: "openai", Name: "gpt-test", BaseURL: f.BaseURL()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := model.Request{System: "sys", Messages: []model.Message{{Role: model.RoleUser, Text: "tick"}}}
	r1, err := m.Complete(ctx, req)
	if err != nil || len(r1.ToolCalls) != 1 || r1.ToolCalls[0].Name != "http_get" {
		t.Fatalf("first answer %+v, %v", r1, err)
	}
	req.Messages = append(req.Messages,
		model.Message{Role: model.RoleAssistant, ToolCalls: r1.ToolCalls},
		model.Message{Role: model.RoleTool, ToolResults: []model.ToolResult{{CallID: r1.ToolCalls[0].ID, Content: "200 OK"}}})
	r2, err := m.Complete(ctx, req)
	if err != nil || r2.Text != "done: 200 OK" {
		t.Fatalf("second answer %+v, %v", r2, err)
	}
	reqs := f.Requests()
	if len(reqs) != 2 || reqs[1].Bytes <= reqs[0].Bytes || reqs[1].PromptTokens != int64((reqs[1].Bytes+2)/3) {
		t.Fatalf("requests %+v", reqs)
	}
	if r2.Usage.InputTokens != reqs[1].PromptTokens {
		t.Fatalf("usage %+v, the fake reported %d", r2.Usage, reqs[1].PromptTokens)
	}
}
