package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
)

// fuzzToken is the bearer token of the fuzzed HTTP routes.
const fuzzToken = "fuzz-token"

// fuzzService runs a provisioned server with the API service on NATS and
// its HTTP routes on an httptest server, for the life of f.
func fuzzService(f *testing.F) (*nats.Conn, jetstream.JetStream, streams.Names, string) {
	f.Helper()
	s := natstest.RunServer(f)
	nc, js := natstest.Connect(f, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := streams.Default()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		f.Fatal(err)
	}
	requests, _ := ingestFor(f, js, names)
	svc, err := api.New(ctx, nc, js, api.Config{Names: names, Requests: requests})
	if err != nil {
		f.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := svc.Run(runCtx); err != nil {
			f.Errorf("run: %v", err)
		}
	})
	f.Cleanup(func() { stop(); wg.Wait() })
	mux := http.NewServeMux()
	svc.MountHTTP(mux, api.HTTPConfig{Token: fuzzToken})
	hs := httptest.NewServer(mux)
	f.Cleanup(hs.Close)
	client := api.NewClient(nc, names)
	natstest.WaitFor(f, 10*time.Second, func() error {
		_, err := client.Agents(context.Background())
		return err
	})
	return nc, js, names, hs.URL
}

// FuzzAPI sends every endpoint of the jl.api service any request body, as
// any NATS user allowed on jl.api.> could. The service always answers,
// never with a 5xx: a request it cannot serve is the sender's fault and
// the answer says so.
func FuzzAPI(f *testing.F) {
	endpoints := api.Endpoints()
	for i, body := range []string{
		`{}`, `{"files":[{"name":"a.yaml","content":"name: a\nmodel: {provider: scripted}\n"}]}`,
		`{"agent":"demo","session":"s1","text":"hi","id":"k1"}`, `{"agent":"demo","status":"blocked"}`,
		`{"agent":"demo","session":"octo/repo#12","from":3}`, `{"action":"resume","agent":"a","schedule":"s"}`,
		`{"agent":"a","since":"1h","limit":5}`, `{"agent":"demo","session":"s1","text":"focus"}`,
		`{"agent":"demo","session":"s1","turn":-1}`, `{"agent":"demo","session":"s1","call_id":"c","text":"ok"}`,
		`{"files":[{"name":"../x","content":"name: [\n"}]}`, `[1,2]`, `{"agent":"demo"} {"agent":"x"}`,
	} {
		f.Add(uint8(i), []byte(body))
	}
	nc, _, names, _ := fuzzService(f)
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		ep := endpoints[int(which)%len(endpoints)]
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		resp, err := nc.RequestWithContext(ctx, names.API(ep), body)
		if err != nil {
			t.Fatalf("%s %q: no answer: %v", ep, body, err)
		}
		code := resp.Header.Get(micro.ErrorCodeHeader)
		if code == "" {
			return
		}
		n, err := strconv.Atoi(code)
		if err != nil || n >= 500 || n < 400 {
			t.Fatalf("%s %q: error code %q: %s", ep, body, code, resp.Data)
		}
		var e api.Error
		if err := json.Unmarshal(resp.Data, &e); err != nil || e.Message == "" {
			t.Fatalf("%s %q: error without a message: %s", ep, body, resp.Data)
		}
	})
}

// FuzzHTTPControl posts control requests as any holder of the API token
// could shape them: any agent and session in the path, Idempotency-Key
// and body. The answer is never a 5xx, and a 202 names the sequence in
// JL_CTL of a message that reads back as the verb that was asked for.
func FuzzHTTPControl(f *testing.F) {
	f.Add("demo", "s1", "k1", []byte(`{"verb":"steer","text":"focus on the tests"}`))
	f.Add("demo", "octo/repo#12", "", []byte(`{"verb":"approve","call_id":"toolu_1","text":"ok"}`))
	f.Add("demo", "s1", "", []byte(`{"verb":"fork","turn":0,"as":"s1-b"}`))
	f.Add("demo", "s1", "", []byte(`{"verb":"cancel","turn":2}`))
	f.Add("demo", "s1", "", []byte(`{"verb":"shout"}`))
	f.Add("demo", "s1", "", []byte(`{"verb":"steer"}`))
	f.Add("demo", "\x80", "", []byte(`{"verb":"interrupt"}`))
	_, js, names, base := fuzzService(f)
	client := &http.Client{Timeout: 20 * time.Second}
	f.Fuzz(func(t *testing.T, agent, session, key string, body []byte) {
		u := base + "/v1/agents/" + url.PathEscape(agent) + "/sessions/" + url.PathEscape(session) + "/control"
		req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Authorization", "Bearer "+fuzzToken)
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
			t.Fatalf("%s %q: %d %s", u, body, resp.StatusCode, raw)
		case resp.StatusCode != http.StatusAccepted:
			return
		}
		var res api.ControlResponse
		if err := json.Unmarshal(raw, &res); err != nil || res.Seq == 0 {
			t.Fatalf("202 without a sequence: %s", raw)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, names.StreamCtl())
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.GetMsg(ctx, res.Seq)
		if err != nil {
			t.Fatalf("answered %s, but %s has no message %d: %v", raw, names.StreamCtl(), res.Seq, err)
		}
		msg, err := control.Parse(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
		if err != nil {
			t.Fatalf("answered %s, but message %d does not parse: %v", raw, res.Seq, err)
		}
		if msg.Verb != res.Verb || msg.Ref.Agent != res.Agent || msg.Ref.Session != res.Session {
			t.Fatalf("answered %s, but message %d is %s for %s", raw, res.Seq, msg.Verb, msg.Ref)
		}
	})
}

// FuzzHTTPSessions asks GET /v1/sessions with any query a holder of the
// token could send. The answer is never a 5xx, and a 200 comes only for a
// query of known parameters, each once, whose status is a known one; and
// no listing leaves a consumer behind on the status bucket, where idle
// ones would pile up to the server's limit and refuse every listing.
func FuzzHTTPSessions(f *testing.F) {
	f.Add("status=paused")
	f.Add("agent=demo&status=blocked")
	f.Add("status=bogus")
	f.Add("colour=red")
	f.Add("status=%zz")
	f.Add("agent=a&agent=b")
	_, js, names, base := fuzzService(f)
	client := &http.Client{Timeout: 20 * time.Second}
	statusStream := streams.KVStream(names.BucketStatus())
	consumers := func(t *testing.T) int {
		st, err := js.Stream(context.Background(), statusStream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Consumers
	}
	known := map[string]bool{"": true}
	for _, s := range record.Statuses() {
		known[string(s)] = true
	}
	f.Fuzz(func(t *testing.T, query string) {
		req, err := http.NewRequest(http.MethodGet, base+"/v1/sessions", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.URL.RawQuery = query
		req.Header.Set("Authorization", "Bearer "+fuzzToken)
		before := consumers(t)
		resp, err := client.Do(req)
		if err != nil {
			return // the client refused the URL
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			t.Fatalf("?%s: %d %s", query, resp.StatusCode, raw)
		}
		if n := consumers(t); n > before {
			t.Fatalf("?%s: %d consumers on %s after the listing, %d before", query, n, statusStream, before)
		}
		if resp.StatusCode != http.StatusOK {
			return
		}
		q, err := url.ParseQuery(query)
		if err != nil {
			t.Fatalf("?%s: 200 for a query that does not parse: %v", query, err)
		}
		for k, vs := range q {
			if k != "agent" && k != "status" || len(vs) != 1 {
				t.Fatalf("?%s: 200 with parameter %q given %d times", query, k, len(vs))
			}
		}
		if !known[q.Get("status")] {
			t.Fatalf("?%s: 200 for status %q", query, q.Get("status"))
		}
	})
}
