package record_test

import (
	"encoding/json"
	"testing"

	"github.com/jetloop/jetloop/record"
)

// TestEntryJSONAlwaysHasItsKindsFields checks the show --json contract:
// the fields of a kind are there even when empty.
func TestEntryJSONAlwaysHasItsKindsFields(t *testing.T) {
	tests := []struct {
		name   string
		entry  record.Entry
		want   map[string]any
		absent []string
	}{
		{
			name:  "tool result with empty output",
			entry: record.Entry{ID: 4, Kind: record.KindToolResult, Name: "shell", CallID: "c1"},
			want:  map[string]any{"result": "", "is_error": false, "call_id": "c1"},
		},
		{
			name:   "assistant with only tool calls",
			entry:  record.Entry{ID: 2, Kind: record.KindAssistant},
			want:   map[string]any{"text": ""},
			absent: []string{"result", "is_error"},
		},
		{
			name:   "user message",
			entry:  record.Entry{ID: 1, Kind: record.KindUser, Text: "hi"},
			want:   map[string]any{"text": "hi", "kind": "user"},
			absent: []string{"result", "is_error"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.entry)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %#v, want %#v (%s)", k, got[k], v, b)
				}
			}
			for _, k := range tc.absent {
				if _, ok := got[k]; ok {
					t.Errorf("%s present: %s", k, b)
				}
			}
			for _, k := range []string{"id", "kind", "turn", "time"} {
				if _, ok := got[k]; !ok {
					t.Errorf("%s absent: %s", k, b)
				}
			}
		})
	}
}
