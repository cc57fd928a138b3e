package model

import (
	"encoding/json"
	"testing"
)

// checkParsed holds for every response a parser accepts: what the worker
// stores and replays is well formed.
func checkParsed(t *testing.T, r Response) {
	t.Helper()
	if r.Usage.InputTokens < 0 || r.Usage.OutputTokens < 0 {
		t.Fatalf("negative usage %+v", r.Usage)
	}
	for i, c := range r.ToolCalls {
		if c.ID == "" || c.Name == "" {
			t.Fatalf("tool call %d without id or name: %+v", i, c)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(c.Args, &obj); err != nil || obj == nil {
			t.Fatalf("tool call %d args %q are not a JSON object: %v", i, c.Args, err)
		}
	}
	if _, err := json.Marshal(r); err != nil {
		t.Fatalf("parsed response does not marshal: %v", err)
	}
}

func FuzzParseAnthropicResponse(f *testing.F) {
	f.Add([]byte(`{"type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":1,"output_tokens":1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseAnthropicResponse(b)
		if err != nil {
			return
		}
		checkParsed(t, r)
	})
}

func FuzzParseOpenAIResponse(f *testing.F) {
	f.Add([]byte(`{"choices":[{"message":{"role":"assistant","content":"hi"}}]}`), 0)
	f.Fuzz(func(t *testing.T, b []byte, pos int) {
		r, err := parseOpenAIResponse(b, pos)
		if err != nil {
			return
		}
		checkParsed(t, r)
	})
}
