package model_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
)

// transcript builds a transcript with n assistant messages, each answered
// by a user or tool message, as the worker would send it.
func transcript(n int) []model.Message {
	msgs := []model.Message{{Role: model.RoleUser, Text: "hello"}}
	for i := range n {
		msgs = append(msgs,
			model.Message{Role: model.RoleAssistant, Text: "a"},
			model.Message{Role: model.RoleTool, ToolResults: []model.ToolResult{{CallID: "c" + string(rune('0'+i)), Content: "ok"}}},
		)
	}
	return msgs
}

func TestScriptedAnswers(t *testing.T) {
	script := []policies.ScriptEntry{
		{Text: "Looking.", ToolCalls: []policies.ScriptToolCall{
			{Name: "shell", Args: map[string]any{"command": "echo hi", "cwd": "."}},
			{Name: "http_get"},
		}},
		{Text: "LGTM.", Usage: policies.Usage{InputTokens: 1200, OutputTokens: 40}},
	}
	tests := []struct {
		name      string
		spec      policies.Model
		assistant int
		want      model.Response
	}{
		{
			name:      "first entry with tool calls",
			spec:      policies.Model{Provider: "scripted", Script: script},
			assistant: 0,
			want: model.Response{Text: "Looking.", StopReason: "tool_use", Model: "scripted", ToolCalls: []model.ToolCall{
				{ID: "call_0_0", Name: "shell", Args: json.RawMessage(`{"command":"echo hi","cwd":"."}`)},
				{ID: "call_0_1", Name: "http_get", Args: json.RawMessage(`{}`)},
			}},
		},
		{
			name:      "second entry with usage",
			spec:      policies.Model{Provider: "scripted", Name: "rehearsal", Script: script},
			assistant: 1,
			want:      model.Response{Text: "LGTM.", StopReason: "end_turn", Model: "rehearsal", Usage: model.Usage{InputTokens: 1200, OutputTokens: 40}},
		},
		{
			name:      "past the end repeats the last text without tool calls",
			spec:      policies.Model{Provider: "scripted", Script: script[:1]},
			assistant: 3,
			want:      model.Response{Text: "Looking.", StopReason: "end_turn", Model: "scripted"},
		},
		{
			name:      "past the end answers then",
			spec:      policies.Model{Provider: "scripted", Script: script, Then: &policies.ScriptEntry{Text: "done", ToolCalls: []policies.ScriptToolCall{{Name: "noop"}}}},
			assistant: 2,
			want: model.Response{Text: "done", StopReason: "tool_use", Model: "scripted", ToolCalls: []model.ToolCall{
				{ID: "call_2_0", Name: "noop", Args: json.RawMessage(`{}`)},
			}},
		},
		{
			name:      "then alone",
			spec:      policies.Model{Provider: "scripted", Then: &policies.ScriptEntry{Text: "always"}},
			assistant: 0,
			want:      model.Response{Text: "always", StopReason: "end_turn", Model: "scripted"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := model.NewScripted(tt.spec)
			if err != nil {
				t.Fatalf("NewScripted: %v", err)
			}
			req := model.Request{Messages: transcript(tt.assistant)}
			got, err := m.Complete(t.Context(), req)
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			assertResponse(t, got, tt.want)
			// A call made again with the same transcript, as recovery
			// does, gets the same answer.
			again, err := m.Complete(t.Context(), req)
			if err != nil {
				t.Fatalf("Complete again: %v", err)
			}
			assertResponse(t, again, tt.want)
		})
	}
}

func assertResponse(t *testing.T, got, want model.Response) {
	t.Helper()
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) {
		t.Errorf("response:\n got %s\nwant %s", gb, wb)
	}
}

// TestScriptedContinuesAfterRestart walks a session through the script
// with one model, then continues it with a new model (a restarted worker)
// given the transcript so far.
func TestScriptedContinuesAfterRestart(t *testing.T) {
	spec := policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{
		{Text: "one", ToolCalls: []policies.ScriptToolCall{{Name: "t"}}},
		{Text: "two", ToolCalls: []policies.ScriptToolCall{{Name: "t"}}},
		{Text: "three"},
	}}
	first, err := model.NewScripted(spec)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []model.Message{{Role: model.RoleUser, Text: "go"}}
	step := func(m model.Model) model.Response {
		t.Helper()
		r, err := m.Complete(t.Context(), model.Request{Messages: msgs})
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, model.Message{Role: model.RoleAssistant, Text: r.Text, ToolCalls: r.ToolCalls})
		for _, c := range r.ToolCalls {
			msgs = append(msgs, model.Message{Role: model.RoleTool, ToolResults: []model.ToolResult{{CallID: c.ID, Content: "ok"}}})
		}
		return r
	}
	if r := step(first); r.Text != "one" {
		t.Fatalf("call 1 = %q, want one", r.Text)
	}
	restarted, err := model.NewScripted(spec)
	if err != nil {
		t.Fatal(err)
	}
	if r := step(restarted); r.Text != "two" || r.ToolCalls[0].ID != "call_1_0" {
		t.Fatalf("call 2 = %+v, want two with call_1_0", r)
	}
	if r := step(restarted); r.Text != "three" || len(r.ToolCalls) != 0 {
		t.Fatalf("call 3 = %+v, want three", r)
	}
}

func TestScriptedErrors(t *testing.T) {
	tests := []struct {
		name   string
		errStr string
		kind   error
	}{
		{name: "rate limited", errStr: "rate_limited", kind: model.ErrRateLimited},
		{name: "server error", errStr: "server_error", kind: model.ErrServer},
		{name: "timeout", errStr: "timeout", kind: model.ErrTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := model.NewScripted(policies.Model{Script: []policies.ScriptEntry{{Text: "ok", ToolCalls: []policies.ScriptToolCall{{Name: "x"}}}, {Error: tt.errStr}}})
			if err != nil {
				t.Fatal(err)
			}
			for range 2 { // the same position fails every time
				_, err = m.Complete(t.Context(), model.Request{Messages: transcript(1)})
				if !errors.Is(err, tt.kind) {
					t.Fatalf("err = %v, want %v", err, tt.kind)
				}
				var me *model.Error
				if !errors.As(err, &me) || me.Provider != "scripted" {
					t.Fatalf("err = %#v, want *model.Error from scripted", err)
				}
			}
			if _, err := m.Complete(t.Context(), model.Request{Messages: transcript(0)}); err != nil {
				t.Fatalf("position 0: %v", err)
			}
		})
	}
}

func TestScriptedDelayHonoursContext(t *testing.T) {
	m, err := model.NewScripted(policies.Model{Script: []policies.ScriptEntry{{Text: "slow", Delay: policies.Duration(time.Hour)}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := m.Complete(ctx, model.Request{})
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}

	fast, err := model.NewScripted(policies.Model{Script: []policies.ScriptEntry{{Text: "quick", Delay: policies.Duration(time.Millisecond)}}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := fast.Complete(t.Context(), model.Request{}); err != nil || r.Text != "quick" {
		t.Fatalf("Complete = %+v, %v; want quick", r, err)
	}
}

func TestScriptedToolCallArgsAreCopies(t *testing.T) {
	m, err := model.NewScripted(policies.Model{Script: []policies.ScriptEntry{{ToolCalls: []policies.ScriptToolCall{{Name: "t", Args: map[string]any{"a": 1}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := m.Complete(t.Context(), model.Request{})
	r.ToolCalls[0].Args[0] = 'X'
	r2, _ := m.Complete(t.Context(), model.Request{})
	if string(r2.ToolCalls[0].Args) != `{"a":1}` {
		t.Fatalf("args = %s after a caller changed an earlier answer", r2.ToolCalls[0].Args)
	}
}

func TestNewScriptedValidation(t *testing.T) {
	tests := []struct {
		name string
		spec policies.Model
		want string // substring of the error
	}{
		{name: "empty", spec: policies.Model{}, want: "script is empty"},
		{name: "unknown error", spec: policies.Model{Script: []policies.ScriptEntry{{Text: "a"}, {Error: "boom"}}}, want: `script[1].error: "boom"`},
		{name: "tool call without name", spec: policies.Model{Script: []policies.ScriptEntry{{ToolCalls: []policies.ScriptToolCall{{Name: "a"}, {}}}}}, want: "script[0].tool_calls[1].name: empty"},
		{name: "unmarshallable args", spec: policies.Model{Script: []policies.ScriptEntry{{ToolCalls: []policies.ScriptToolCall{{Name: "a", Args: map[string]any{"f": func() {}}}}}}}, want: "script[0].tool_calls[0].args"},
		{name: "negative input tokens", spec: policies.Model{Script: []policies.ScriptEntry{{Usage: policies.Usage{InputTokens: -1}}}}, want: "script[0].usage.input_tokens"},
		{name: "negative output tokens", spec: policies.Model{Script: []policies.ScriptEntry{{}, {Usage: policies.Usage{OutputTokens: -1}}}}, want: "script[1].usage.output_tokens"},
		{name: "negative delay", spec: policies.Model{Script: []policies.ScriptEntry{{Delay: policies.Duration(-time.Second)}}}, want: "script[0].delay"},
		{name: "error with text", spec: policies.Model{Script: []policies.ScriptEntry{{Error: "timeout", Text: "x"}}}, want: "script[0].error"},
		{name: "entry after error", spec: policies.Model{Script: []policies.ScriptEntry{{Error: "timeout"}, {Text: "x"}}}, want: "script[1]: unreachable"},
		{name: "then after error", spec: policies.Model{Script: []policies.ScriptEntry{{Error: "timeout"}}, Then: &policies.ScriptEntry{Text: "x"}}, want: "then: unreachable"},
		{name: "bad then", spec: policies.Model{Script: []policies.ScriptEntry{{Text: "a"}}, Then: &policies.ScriptEntry{Error: "nope"}}, want: "then.error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := model.NewScripted(tt.spec)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestScriptScopeRunStartsOverAtEveryRun(t *testing.T) {
	s, err := model.NewScripted(policies.Model{Provider: "scripted", ScriptScope: "run", Script: []policies.ScriptEntry{
		{Text: "fetching", ToolCalls: []policies.ScriptToolCall{{Name: "http_get", Args: map[string]any{"url": "https://example.com"}}}},
		{Text: "no change"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	run := []model.Message{{Role: model.RoleUser, Text: "tick 1"}}
	for tick := 1; tick <= 3; tick++ {
		r1, err := s.Complete(context.Background(), model.Request{Messages: run})
		if err != nil || len(r1.ToolCalls) != 1 {
			t.Fatalf("tick %d first call: %+v %v", tick, r1, err)
		}
		run = append(run, model.Message{Role: model.RoleAssistant, Text: r1.Text, ToolCalls: r1.ToolCalls},
			model.Message{Role: model.RoleTool, ToolResults: []model.ToolResult{{CallID: r1.ToolCalls[0].ID, Content: "200 OK"}}})
		r2, err := s.Complete(context.Background(), model.Request{Messages: run})
		if err != nil || r2.Text != "no change" || len(r2.ToolCalls) != 0 {
			t.Fatalf("tick %d second call: %+v %v", tick, r2, err)
		}
		run = append(run, model.Message{Role: model.RoleAssistant, Text: r2.Text}, model.Message{Role: model.RoleUser, Text: "next tick"})
	}
	if _, err := model.NewScripted(policies.Model{Provider: "scripted", ScriptScope: "turn"}); err == nil {
		t.Fatal("an unknown script_scope was accepted")
	}
}
