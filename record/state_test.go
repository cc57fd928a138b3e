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

// A state written before versions were numbered per agent named its
// definition by jl_agents revision in definition_version; decoding moves
// it to definition_revision, and a state written since keeps both.
func TestDecodeStateMovesARevisionOutOfDefinitionVersion(t *testing.T) {
	tests := []struct {
		name          string
		json          string
		version, rev  uint64
		rollout, text string
	}{
		{name: "before numbering", json: `{"agent":"a","session":"s","definition_version":17}`, rev: 17},
		{name: "numbered", json: `{"agent":"a","session":"s","definition_version":3,"definition_revision":17,"rollout":"r1"}`, version: 3, rev: 17, rollout: "r1"},
		{name: "not run yet", json: `{"agent":"a","session":"s","definition_version":0,"definition_revision":0}`},
		{name: "numbered without a revision", json: `{"agent":"a","session":"s","definition_version":2,"definition_revision":0}`, version: 2},
		{name: "the key's name in a text", json: `{"agent":"a","session":"s","definition_version":17,"reason":"\"definition_revision\""}`, rev: 17, text: `"definition_revision"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := record.DecodeState([]byte(tt.json))
			if err != nil {
				t.Fatal(err)
			}
			if st.DefinitionVersion != tt.version || st.DefinitionRevision != tt.rev || st.Rollout != tt.rollout || st.Reason != tt.text {
				t.Fatalf("decoded version %d revision %d rollout %q reason %q", st.DefinitionVersion, st.DefinitionRevision, st.Rollout, st.Reason)
			}
			b, _ := json.Marshal(st)
			again, err := record.DecodeState(b)
			if err != nil || again.Program != st.Program {
				t.Fatalf("written and read again: %+v (%v), want %+v", again.Program, err, st.Program)
			}
		})
	}
}
