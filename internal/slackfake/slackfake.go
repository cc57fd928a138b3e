// Package slackfake is an in-process fake of the Slack Web API on
// loopback, for tests: chat.postMessage and conversations.replies with
// Slack's form-encoded requests, bot-token checks, message metadata
// (returned only with include_all_metadata, as Slack does), cursor paging
// and Slack's {"ok": false, "error": ...} answers. It records every
// message posted and can hold a post's answer back (OnPost) so a crash
// test can kill the poster after Slack stored the message.
package slackfake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Message is a message as posted.
type Message struct {
	Channel  string
	TS       string
	ThreadTS string
	Text     string
	Blocks   json.RawMessage
	Metadata json.RawMessage
}

// Server is the fake Slack Web API.
type Server struct {
	srv   *httptest.Server
	token string

	mu     sync.Mutex
	seq    int
	msgs   []Message
	onPost func(Message)
}

// New starts the fake, accepting token as the bot token; closed by
// t.Cleanup.
func New(t testing.TB, token string) *Server {
	s := &Server{token: token}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// URL is the Web API's root, ending in /api/.
func (s *Server) URL() string { return s.srv.URL + "/api/" }

// OnPost calls f after a message is stored and before its answer is
// written.
func (s *Server) OnPost(f func(Message)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onPost = f
}

// Messages returns the messages posted to channel's thread ts (every
// message of channel when ts is empty).
func (s *Server) Messages(channel, ts string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.msgs {
		if m.Channel == channel && (ts == "" || m.ThreadTS == ts) {
			out = append(out, m)
		}
	}
	return out
}

func answer(w http.ResponseWriter, v map[string]any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if err := r.ParseForm(); err != nil {
		answer(w, map[string]any{"ok": false, "error": "invalid_form_data"})
		return
	}
	tok := r.PostForm.Get("token")
	if h, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		tok = h
	}
	switch {
	case tok == "":
		answer(w, map[string]any{"ok": false, "error": "not_authed"})
		return
	case tok != s.token:
		answer(w, map[string]any{"ok": false, "error": "invalid_auth"})
		return
	}
	switch strings.TrimPrefix(r.URL.Path, "/api/") {
	case "chat.postMessage":
		s.post(w, r)
	case "conversations.replies":
		s.replies(w, r)
	default:
		answer(w, map[string]any{"ok": false, "error": "unknown_method"})
	}
}

func (s *Server) post(w http.ResponseWriter, r *http.Request) {
	f := r.PostForm
	m := Message{Channel: f.Get("channel"), ThreadTS: f.Get("thread_ts"), Text: f.Get("text")}
	if m.Channel == "" {
		answer(w, map[string]any{"ok": false, "error": "channel_not_found"})
		return
	}
	if b := f.Get("blocks"); b != "" {
		if !json.Valid([]byte(b)) {
			answer(w, map[string]any{"ok": false, "error": "invalid_blocks"})
			return
		}
		m.Blocks = json.RawMessage(b)
	}
	if m.Text == "" && m.Blocks == nil {
		answer(w, map[string]any{"ok": false, "error": "no_text"})
		return
	}
	if md := f.Get("metadata"); md != "" {
		var v struct {
			EventType    string         `json:"event_type"`
			EventPayload map[string]any `json:"event_payload"`
		}
		if json.Unmarshal([]byte(md), &v) != nil || v.EventType == "" {
			answer(w, map[string]any{"ok": false, "error": "invalid_metadata_format"})
			return
		}
		m.Metadata = json.RawMessage(md)
	}
	s.mu.Lock()
	s.seq++
	m.TS = fmt.Sprintf("%d.%06d", time.Now().Unix(), s.seq)
	s.msgs = append(s.msgs, m)
	hook := s.onPost
	s.mu.Unlock()
	if hook != nil {
		hook(m)
	}
	answer(w, map[string]any{"ok": true, "channel": m.Channel, "ts": m.TS, "message": s.messageJSON(m, true)})
}

func (s *Server) messageJSON(m Message, meta bool) map[string]any {
	out := map[string]any{"type": "message", "user": "U0JETLOOP", "bot_id": "B0JETLOOP", "text": m.Text, "ts": m.TS}
	if m.ThreadTS != "" {
		out["thread_ts"] = m.ThreadTS
	}
	if m.Blocks != nil {
		out["blocks"] = m.Blocks
	}
	if meta && m.Metadata != nil {
		out["metadata"] = m.Metadata
	}
	return out
}

func (s *Server) replies(w http.ResponseWriter, r *http.Request) {
	f := r.PostForm
	ch, ts := f.Get("channel"), f.Get("ts")
	if ch == "" || ts == "" {
		answer(w, map[string]any{"ok": false, "error": "invalid_arguments"})
		return
	}
	meta := f.Get("include_all_metadata") == "1"
	limit, _ := strconv.Atoi(f.Get("limit"))
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	start, _ := strconv.Atoi(f.Get("cursor"))
	thread := append([]Message{{Channel: ch, TS: ts, Text: "(the thread's first message)"}}, s.Messages(ch, ts)...)
	if start > len(thread) {
		start = len(thread)
	}
	end := min(len(thread), start+limit)
	msgs := []map[string]any{}
	for _, m := range thread[start:end] {
		msgs = append(msgs, s.messageJSON(m, meta))
	}
	next := ""
	if end < len(thread) {
		next = strconv.Itoa(end)
	}
	answer(w, map[string]any{"ok": true, "messages": msgs, "has_more": next != "", "response_metadata": map[string]any{"next_cursor": next}})
}
