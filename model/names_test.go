package model_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
)

// mcpConversation offers a mounted MCP tool and has called it before.
func mcpConversation() model.Request {
	return model.Request{
		Messages: []model.Message{
			{Role: model.RoleUser, Text: "List the issues."},
			{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "t1", Name: "github.list_issues", Args: json.RawMessage(`{}`)}}},
			{Role: model.RoleTool, ToolResults: []model.ToolResult{{CallID: "t1", Content: "#1"}}},
		},
		Tools: []model.ToolSpec{{Name: "github.list_issues", Description: "List issues."}, {Name: "shell", Description: "Run."}},
	}
}

func TestMountedToolNamesTravelAsTheAPIsAcceptThem(t *testing.T) {
	anthropic := `{"id":"m","type":"message","role":"assistant","model":"claude","content":[{"type":"tool_use","id":"t2","name":"github__list_issues","input":{}},{"type":"tool_use","id":"t3","name":"shell","input":{}}],"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1}}`
	openai := `{"id":"c","object":"chat.completion","model":"gpt","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[{"id":"t2","type":"function","function":{"name":"github__list_issues","arguments":"{}"}},{"id":"t3","type":"function","function":{"name":"shell","arguments":"{}"}}]}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`
	for _, tt := range []struct {
		name string
		body string
		mk   func(url string) model.Model
	}{
		{"anthropic", anthropic, func(url string) model.Model { return newAnthropic(t, url, policies.Model{Name: "claude"}) }},
		{"openai", openai, func(url string) model.Model { return newOpenAI(t, url+"/v1", policies.Model{Name: "gpt"}) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, reply(http.StatusOK, tt.body))
			resp, err := tt.mk(f.URL).Complete(t.Context(), mcpConversation())
			if err != nil {
				t.Fatal(err)
			}
			body := string(f.next(t).body)
			if strings.Contains(body, "github.list_issues") || strings.Count(body, `"github__list_issues"`) != 2 {
				t.Fatalf("request names the tool otherwise than github__list_issues, in its spec and in the earlier call: %s", body)
			}
			if len(resp.ToolCalls) != 2 || resp.ToolCalls[0].Name != "github.list_issues" || resp.ToolCalls[1].Name != "shell" {
				t.Fatalf("tool calls = %+v", resp.ToolCalls)
			}
		})
	}
}
