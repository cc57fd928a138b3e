package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/record"
)

// The context endpoint, over NATS and over HTTP, builds what a session's
// next model call receives from its record and its definition: the parts
// in order with their estimates, and with the window after a compaction
// only the head, the summary and the tail; show pages by key and marks
// what the context no longer holds.
func TestContextEndpoint(t *testing.T) {
	h := start(t, api.Config{})
	yaml := `name: ctx
model: {provider: scripted}
system: You watch.
tools: [read_event]
context: {mask_after_turns: 1, compact_at_tokens: 5000, notes: true}
`
	if _, err := h.client.Apply(ctx(t), api.ApplyRequest{Files: []api.File{{Name: "ctx.yaml", Content: yaml}}}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	entries := []record.Entry{
		{ID: 1, Kind: record.KindUser, Turn: 0, Time: now, Text: "watch it"},
		{ID: 2, Kind: record.KindAssistant, Turn: 1, Time: now, Text: "checking"},
		{ID: 3, Kind: record.KindToolCall, Turn: 1, Time: now, Name: "read_event", CallID: "c1", Args: json.RawMessage(`{"seq":1}`)},
		{ID: 4, Kind: record.KindToolResult, Turn: 1, Time: now, Name: "read_event", CallID: "c1", Result: strings.Repeat("old result ", 300)},
		{ID: 5, Kind: record.KindUser, Turn: 1, Time: now, Text: "summarised away"},
		{ID: 6, Kind: record.KindAssistant, Turn: 2, Time: now, Text: "ok"},
		{ID: 7, Kind: record.KindUser, Turn: 2, Time: now, Text: "and now?"},
		{ID: 8, Kind: record.KindSummary, Turn: 2, Time: now, Text: "It was fine.", Covers: &record.Span{From: 5, To: 6}},
	}
	st := record.NewState("ctx", "s", now)
	st.Turns = 2
	st.HeadEnd, st.Summary, st.From = 5, 8, 7
	st.CalBytes, st.CalTokens = 3000, 1000
	h.putSession(t, st, entries)

	c, err := h.client.Context(ctx(t), api.ContextRequest{Agent: "ctx", Session: "s"})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, p := range c.Parts {
		k := p.Kind
		if p.Masked {
			k += "(masked)"
		}
		kinds = append(kinds, k)
	}
	if got := strings.Join(kinds, ","); got != "system,notes,tools,user,assistant,tool_call,tool_result(masked),summary,user" {
		t.Fatalf("parts %s", got)
	}
	if c.Turn != 3 || !c.Calibrated || c.BytesPerToken != 3 || c.Window == nil || c.Window.Summary != 8 || c.Masked != 1 ||
		c.CompactAtTokens != 5000 || strings.Join(c.Tools, ",") != "read_event,read_blob,notes_read,notes_write" {
		t.Fatalf("context %+v", c)
	}
	var sum int64
	for _, p := range c.Parts {
		sum += p.Tokens
	}
	if sum < c.Tokens-int64(len(c.Parts)) || sum > c.Tokens+int64(len(c.Parts)) {
		t.Fatalf("parts hold %d tokens, the whole %d", sum, c.Tokens)
	}

	// Over HTTP, the same.
	mux := http.NewServeMux()
	h.svc.MountHTTP(mux, api.HTTPConfig{Token: "t0ken"})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/agents/ctx/sessions/s/context", nil)
	req.Header.Set("Authorization", "Bearer t0ken")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var hc api.ContextResponse
	if err := json.NewDecoder(resp.Body).Decode(&hc); err != nil || resp.StatusCode != 200 || hc.Tokens != c.Tokens || len(hc.Parts) != len(c.Parts) {
		t.Fatalf("HTTP: %d %v %+v", resp.StatusCode, err, hc)
	}
	req, _ = http.NewRequest(http.MethodGet, srv.URL+"/v1/agents/ctx/sessions/nobody/context", nil)
	req.Header.Set("Authorization", "Bearer t0ken")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a missing session: %v %v", resp, err)
	}

	// show: a page by key, the marks.
	sh, err := h.client.Show(ctx(t), api.ShowRequest{Agent: "ctx", Session: "s", From: 4, Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	var marks []string
	for _, e := range sh.Transcript.Transcript {
		marks = append(marks, e.Context)
	}
	if len(sh.Transcript.Transcript) != 3 || sh.Transcript.Transcript[0].ID != 4 || !sh.Truncated || sh.Next != 7 ||
		strings.Join(marks, ",") != "masked,summarised,summarised" || sh.Entries != 8 {
		t.Fatalf("show page: %v, marks %v, truncated %v next %d", sh.Transcript.Transcript, marks, sh.Truncated, sh.Next)
	}
	if _, err := h.client.Show(ctx(t), api.ShowRequest{Agent: "ctx", Session: "s", Limit: api.MaxShowLimit + 1}); err == nil {
		t.Fatal("a limit over the bound was accepted")
	}
}
