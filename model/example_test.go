package model_test

import (
	"context"
	"fmt"

	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
)

// A scripted model answers by the transcript's position: the second call
// of a session, whatever worker makes it, gets the second entry.
func ExampleNewScripted() {
	m, err := model.New(policies.Model{
		Provider: "scripted",
		Script: []policies.ScriptEntry{
			{Text: "Looking at the pull request.", ToolCalls: []policies.ScriptToolCall{
				{Name: "shell", Args: map[string]any{"command": "echo reviewed >> ledger.txt"}},
			}},
			{Text: "LGTM.", Usage: policies.Usage{InputTokens: 1200, OutputTokens: 40}},
		},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	msgs := []model.Message{{Role: model.RoleUser, Text: "Review PR 7."}}

	first, _ := m.Complete(ctx, model.Request{Messages: msgs})
	fmt.Println(first.Text, first.ToolCalls[0].ID, first.ToolCalls[0].Name, string(first.ToolCalls[0].Args))

	msgs = append(msgs,
		model.Message{Role: model.RoleAssistant, Text: first.Text, ToolCalls: first.ToolCalls},
		model.Message{Role: model.RoleTool, ToolResults: []model.ToolResult{{CallID: first.ToolCalls[0].ID, Content: ""}}},
	)
	second, _ := m.Complete(ctx, model.Request{Messages: msgs})
	fmt.Println(second.Text, second.StopReason, second.Usage.Tokens())
	// Output:
	// Looking at the pull request. call_0_0 shell {"command":"echo reviewed >> ledger.txt"}
	// LGTM. end_turn 1240
}
