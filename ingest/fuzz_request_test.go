package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/streams"
)

// FuzzRequest posts user requests as any client could shape them: any
// agent and session in the path, any Idempotency-Key and body. The answer
// is never a 5xx (bad input is the sender's fault, and says so), and a 2xx
// that admitted the request names an event that JetStream holds on the
// session's subject: nothing answered 2xx is lost.
func FuzzRequest(f *testing.F) {
	f.Add("demo", "main", "k-1", []byte(`{"text":"hello"}`))
	f.Add("demo", "octo/repo#12", "", []byte(`{"text":"look again"}`))
	f.Add("demo", "main", "k\u00a0", []byte(`{"text":"x"}`))
	f.Add("demo", "\x80", "k", []byte(`{"text":"x"}`))
	f.Add("demo", "main", "k", []byte(`{"text":"x","extra":1}`))
	f.Add("nobody", "main", "k", []byte(`{"text":"x"}`))
	f.Add("demo", "main", "k", []byte(`{"text":"x"}{"text":"y"}`))
	f.Add("demo", "main", "k2", []byte(`{"text":"x"} trailing`))
	h := start(f, time.Minute)
	client := &http.Client{Timeout: 10 * time.Second}
	f.Fuzz(func(t *testing.T, agent, session, key string, body []byte) {
		u := h.url + "/v1/agents/" + url.PathEscape(agent) + "/sessions/" + url.PathEscape(session) + "/messages"
		req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(body))
		if err != nil {
			return // not a request a client can send
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header["Idempotency-Key"] = []string{key}
		}
		resp, err := client.Do(req)
		if err != nil {
			return // the client refused the header or URL
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode >= 500:
			t.Fatalf("%s: %d %s", u, resp.StatusCode, raw)
		case resp.StatusCode/100 != 2:
			return
		}
		if !json.Valid(body) {
			t.Fatalf("%s: %d for a body that is not one JSON value: %q", u, resp.StatusCode, body)
		}
		var res struct {
			ID        string `json:"id"`
			Duplicate bool   `json:"duplicate"`
			Admitted  []struct {
				Agent, Session string
			} `json:"admitted"`
		}
		if err := json.Unmarshal(raw, &res); err != nil || res.ID == "" {
			t.Fatalf("2xx without an event id: %s", raw)
		}
		for _, a := range res.Admitted {
			ref, err := streams.NewSessionRef(a.Agent, a.Session)
			if err != nil {
				t.Fatalf("admitted to %s/%s, which is no session: %v", a.Agent, a.Session, err)
			}
			s, err := h.js.Stream(context.Background(), h.names.StreamIn())
			if err != nil {
				t.Fatal(err)
			}
			m, err := s.GetLastMsgForSubject(context.Background(), h.names.In(ref))
			if err != nil {
				t.Fatalf("answered %d %s, but %s holds nothing: %v", resp.StatusCode, raw, h.names.In(ref), err)
			}
			e, err := events.FromMsg(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
			if err != nil {
				t.Fatalf("%s holds a message that does not read back: %v", h.names.In(ref), err)
			}
			if e.ID() != res.ID && !res.Duplicate {
				t.Fatalf("answered %s, but the last message on %s is %q", raw, h.names.In(ref), e.ID())
			}
		}
	})
}
