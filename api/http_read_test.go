package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/worker"
)

// cookieAuth stands for the dashboard's sessions: a request with the
// cookie "ok" is signed in; one that changes something needs the header
// X-CSRF-Token: yes.
type cookieAuth struct{}

func (cookieAuth) Authenticate(r *http.Request) error {
	c, err := r.Cookie("s")
	if err != nil || c.Value != "ok" {
		return &api.Error{Code: http.StatusUnauthorized, Message: "not signed in"}
	}
	if r.Method != http.MethodGet && r.Header.Get("X-CSRF-Token") != "yes" {
		return &api.Error{Code: http.StatusForbidden, Message: "no CSRF token"}
	}
	return nil
}

// SignIn names the sign-in by its cookie.
func (cookieAuth) SignIn(r *http.Request) string {
	c, err := r.Cookie("s")
	if err != nil {
		return ""
	}
	return c.Value
}

// One sign-in holds at most MaxStreamsPerSignIn status streams open at
// once (429 beyond), so one browser cannot take every stream; the bearer
// token is bounded by MaxStreams alone; a stream its client closes gives
// its place back.
func TestStreamsPerSignIn(t *testing.T) {
	h := start(t, api.Config{})
	stop := make(chan struct{})
	mux := http.NewServeMux()
	h.svc.MountHTTP(mux, api.HTTPConfig{Token: "t0ken", Sessions: cookieAuth{}, Stop: stop, MaxStreams: 4, MaxStreamsPerSignIn: 2})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) })
	open := func(auth string) (int, func()) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx(t), "GET", srv.URL+"/v1/sessions/stream", nil)
		if auth == "bearer" {
			req.Header.Set("Authorization", "Bearer t0ken")
		} else {
			req.AddCookie(&http.Cookie{Name: "s", Value: "ok"})
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == 200 {
			// The ready event: the stream holds its places.
			if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.HasPrefix(line, "retry:") {
				t.Fatalf("stream's first line %q: %v", line, err)
			}
		}
		return resp.StatusCode, func() { resp.Body.Close() }
	}
	code, closeFirst := open("cookie")
	if code != 200 {
		t.Fatalf("first stream: %d", code)
	}
	code, closeSecond := open("cookie")
	defer closeSecond()
	if code != 200 {
		t.Fatalf("second stream: %d", code)
	}
	code, closeThird := open("cookie")
	closeThird()
	if code != http.StatusTooManyRequests {
		t.Fatalf("a third stream of one sign-in: %d, want 429", code)
	}
	code, closeBearer := open("bearer")
	defer closeBearer()
	if code != 200 {
		t.Fatalf("a stream with the bearer token beside them: %d", code)
	}
	closeFirst()
	natstest.WaitFor(t, 10*time.Second, func() error {
		code, done := open("cookie")
		if code != 200 {
			done()
			return fmt.Errorf("a stream once one was closed: %d", code)
		}
		t.Cleanup(done)
		return nil
	})
}

type httpClient struct {
	t    *testing.T
	base string
}

// get and post send a request with the bearer token (auth "bearer"),
// the session cookie ("cookie", "cookie+csrf") or nothing, and decode
// the JSON answer.
func (c httpClient) do(method, path, auth, body string) (int, map[string]any) {
	c.t.Helper()
	req, err := http.NewRequestWithContext(ctx(c.t), method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	switch auth {
	case "bearer":
		req.Header.Set("Authorization", "Bearer t0ken")
	case "cookie+csrf":
		req.Header.Set("X-CSRF-Token", "yes")
		fallthrough
	case "cookie":
		req.AddCookie(&http.Cookie{Name: "s", Value: "ok"})
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		c.t.Fatalf("%s %s: body: %v", method, path, err)
	}
	// A browser never reads an answer (a result's text) as anything but
	// JSON.
	if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" || resp.Header.Get("Content-Type") != "application/json" {
		c.t.Errorf("%s %s: Content-Type %q, X-Content-Type-Options %q, want application/json and nosniff", method, path, resp.Header.Get("Content-Type"), got)
	}
	return resp.StatusCode, out
}

func (c httpClient) ok(method, path, auth, body string) map[string]any {
	c.t.Helper()
	code, out := c.do(method, path, auth, body)
	if code/100 != 2 {
		c.t.Fatalf("%s %s: %d %v", method, path, code, out)
	}
	return out
}

func names(out map[string]any, key, field string) []string {
	var got []string
	list, _ := out[key].([]any)
	for _, x := range list {
		got = append(got, fmt.Sprint(x.(map[string]any)[field]))
	}
	return got
}

// The routes the dashboard reads and acts through: each answers what
// its NATS endpoint does, takes the bearer token or a session (which
// must carry its CSRF token to change anything), and refuses what it
// does not take.
func TestHTTPRoutes(t *testing.T) {
	h := start(t, api.Config{})
	stop := make(chan struct{})
	mux := http.NewServeMux()
	h.svc.MountHTTP(mux, api.HTTPConfig{Token: "t0ken", Sessions: cookieAuth{}, Stop: stop, MaxStreams: 2})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) })
	c := httpClient{t: t, base: srv.URL}
	h.applyDemo(t)
	for i := range 7 {
		st := record.StatusDone
		if i%3 == 0 {
			st = record.StatusBlocked
		}
		h.putSession(t, session(fmt.Sprintf("s%d", i), st, 1, "call_1", "rule"), nil)
	}

	t.Run("sessions paged", func(t *testing.T) {
		c.t = t
		var got []string
		cursor := 0.0
		pages := 0
		for {
			q := "/v1/sessions?agent=demo&limit=3"
			if cursor > 0 {
				q += fmt.Sprintf("&cursor=%d", int64(cursor))
			}
			out := c.ok("GET", q, "cookie", "")
			got = append(got, names(out, "sessions", "session")...)
			pages++
			next, _ := out["next"].(float64)
			if next == 0 || pages > 5 {
				break
			}
			cursor = next
		}
		slices.Sort(got)
		if pages != 3 || strings.Join(got, ",") != "s0,s1,s2,s3,s4,s5,s6" {
			t.Fatalf("%d pages: %v", pages, got)
		}
		out := c.ok("GET", "/v1/sessions?status=blocked", "bearer", "")
		if blocked := names(out, "sessions", "session"); len(blocked) != 3 {
			t.Fatalf("blocked: %v", out)
		}
		if code, out := c.do("GET", "/v1/sessions?page=2", "bearer", ""); code != 400 || !strings.Contains(fmt.Sprint(out["message"]), `unknown query parameter "page"`) {
			t.Errorf("?page=2: %d %v", code, out)
		}
	})

	t.Run("show and blobs", func(t *testing.T) {
		c.t = t
		r := ref(t, "demo", "octo/repo#1")
		blob, err := h.names.ResultBlob(r, "call_9", "d1gest")
		if err != nil {
			t.Fatal(err)
		}
		h.putSession(t, session("octo/repo#1", record.StatusDone, 1, "", ""), []record.Entry{
			{ID: 1, Kind: record.KindUser, Text: "hi", Time: time.Now().UTC()},
			{ID: 2, Kind: record.KindToolResult, Name: "shell", CallID: "call_9", Result: "the first lines", Blob: blob, Time: time.Now().UTC()},
		})
		store, err := h.js.ObjectStore(ctx(t), h.names.ObjectBlobs())
		if err != nil {
			t.Fatal(err)
		}
		whole := strings.Repeat("é", 100) + "end"
		if _, err := store.PutBytes(ctx(t), blob, []byte(whole)); err != nil {
			t.Fatal(err)
		}
		base := "/v1/agents/demo/sessions/octo%2Frepo%231"
		out := c.ok("GET", base+"?from=2", "cookie", "")
		if tr, _ := out["transcript"].([]any); len(tr) != 1 || tr[0].(map[string]any)["blob"] != blob || out["session"] != "octo/repo#1" {
			t.Fatalf("show from 2: %v", out)
		}
		// Pages of 51 bytes never end inside a character.
		var text strings.Builder
		offset := 0.0
		for n := 0; ; n++ {
			page := c.ok("GET", fmt.Sprintf("%s/blobs/%s?offset=%d&limit=51", base, blob, int(offset)), "cookie", "")
			text.WriteString(page["text"].(string))
			if page["size"] != float64(len(whole)) || n > 10 {
				t.Fatalf("page %v", page)
			}
			next, ok := page["next"].(float64)
			if !ok {
				break
			}
			offset = next
		}
		if text.String() != whole {
			t.Fatalf("blob read back %q", text.String())
		}
		// Another session's handle is not this one's to read.
		if code, out := c.do("GET", "/v1/agents/demo/sessions/s1/blobs/"+blob, "cookie", ""); code != 404 {
			t.Fatalf("a blob of another session: %d %v", code, out)
		}
		if code, out := c.do("GET", base+"/blobs/"+blob+"?limit=2000000", "cookie", ""); code != 400 {
			t.Fatalf("a page over the bound: %d %v", code, out)
		}
		if code, _ := c.do("GET", "/v1/agents/demo/sessions/nosuch", "cookie", ""); code != 404 {
			t.Fatalf("show of no session: %d", code)
		}
	})

	t.Run("agents, schedules, events, dead letters", func(t *testing.T) {
		c.t = t
		if got := c.ok("GET", "/v1/agents", "cookie", ""); len(got["agents"].([]any)) != 1 {
			t.Fatalf("agents %v", got)
		}
		if got := c.ok("GET", "/v1/agents/demo/history", "cookie", ""); got["newest"] != float64(1) {
			t.Fatalf("history %v", got)
		}
		if code, _ := c.do("GET", "/v1/agents/nosuch/history", "cookie", ""); code != 404 {
			t.Fatalf("history of no agent: %d", code)
		}
		if got := c.ok("GET", "/v1/schedules", "cookie", ""); got["schedules"] == nil {
			t.Fatalf("schedules %v", got)
		}
		if code, out := c.do("POST", "/v1/agents/demo/schedules/nightly/resume", "cookie+csrf", ""); code != 404 {
			t.Fatalf("resume of no schedule: %d %v", code, out)
		}
		if code, out := c.do("POST", "/v1/agents/demo/schedules/nightly/explode", "cookie+csrf", ""); code != 404 || !strings.Contains(fmt.Sprint(out["message"]), "no action") {
			t.Fatalf("an unknown action: %d %v", code, out)
		}
		if got := c.ok("GET", "/v1/events?since=2h&limit=10", "cookie", ""); got["records"] == nil {
			t.Fatalf("events %v", got)
		}
		if code, _ := c.do("GET", "/v1/events?since=yesterday", "cookie", ""); code != 400 {
			t.Fatalf("events since a word: %d", code)
		}
		if got := c.ok("GET", "/v1/dlq?reason=no_session&limit=5", "cookie", ""); got["letters"] == nil {
			t.Fatalf("dlq %v", got)
		}
		for path, want := range map[string]int{"/v1/dlq/0": 400, "/v1/dlq/x": 400, "/v1/dlq/99": 404, "/v1/dlq?reason=bogus": 400} {
			if code, out := c.do("GET", path, "cookie", ""); code != want {
				t.Errorf("%s: %d %v, want %d", path, code, out, want)
			}
		}
	})

	t.Run("a session acts with its CSRF token", func(t *testing.T) {
		c.t = t
		ctl := "/v1/agents/demo/sessions/s0/control"
		if code, out := c.do("POST", ctl, "cookie", `{"verb":"approve","call_id":"call_1"}`); code != 403 {
			t.Fatalf("without the CSRF token: %d %v", code, out)
		}
		if code, out := c.do("POST", ctl, "", `{"verb":"approve","call_id":"call_1"}`); code != 401 {
			t.Fatalf("signed out: %d %v", code, out)
		}
		out := c.ok("POST", ctl, "cookie+csrf", `{"verb":"approve","call_id":"call_1"}`)
		if m := h.ctlMsg(t, uint64(out["seq"].(float64))); m.Verb != "approve" || m.CallID != "call_1" {
			t.Fatalf("stored %+v", m)
		}
		// A bearer token needs no cookie and no CSRF token (no browser
		// sends it by itself).
		c.ok("POST", "/v1/agents/demo/sessions/s3/control", "bearer", `{"verb":"approve","call_id":"call_1"}`)
	})

	t.Run("status stream", func(t *testing.T) {
		c.t = t
		sctx, cancel := context.WithCancel(ctx(t))
		defer cancel()
		open := func(query string) (*bufio.Reader, func()) {
			req, _ := http.NewRequestWithContext(sctx, "GET", srv.URL+"/v1/sessions/stream"+query, nil)
			req.AddCookie(&http.Cookie{Name: "s", Value: "ok"})
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			return bufio.NewReader(resp.Body), func() { resp.Body.Close() }
		}
		// events reads the stream's events (name and data) into a channel.
		events := func(r *bufio.Reader) <-chan [2]string {
			ch := make(chan [2]string, 16)
			go func() {
				defer close(ch)
				var name string
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					line = strings.TrimRight(line, "\n")
					switch {
					case strings.HasPrefix(line, "event: "):
						name = line[7:]
					case strings.HasPrefix(line, "data: "):
						ch <- [2]string{name, line[6:]}
					}
				}
			}()
			return ch
		}
		next := func(ch <-chan [2]string) [2]string {
			select {
			case ev, ok := <-ch:
				if !ok {
					t.Fatal("stream ended")
				}
				return ev
			case <-time.After(10 * time.Second):
				t.Fatal("no event within 10s")
			}
			return [2]string{}
		}
		all, closeAll := open("")
		defer closeAll()
		one, closeOne := open("?agent=demo&session=s2")
		defer closeOne()
		allEv, oneEv := events(all), events(one)
		if next(allEv)[0] != "ready" || next(oneEv)[0] != "ready" {
			t.Fatal("no ready event first")
		}
		// A third stream is one too many for MaxStreams 2.
		if code, out := c.do("GET", "/v1/sessions/stream", "cookie", ""); code != 503 {
			t.Fatalf("a third stream: %d %v", code, out)
		}
		announce := func(session string, st record.Status) {
			b, _ := json.Marshal(worker.StatusChange{Agent: "demo", Session: session, Status: st, Since: time.Now().UTC(), Turns: 2})
			if err := h.nc.Publish(h.names.Status(ref(t, "demo", session)), b); err != nil {
				t.Fatal(err)
			}
		}
		announce("s1", record.StatusWorking)
		announce("s2", record.StatusDone)
		var got []string
		for range 2 {
			ev := next(allEv)
			var sc worker.StatusChange
			if ev[0] != "status" || json.Unmarshal([]byte(ev[1]), &sc) != nil {
				t.Fatalf("event %v", ev)
			}
			got = append(got, sc.Session+"="+string(sc.Status))
		}
		if strings.Join(got, " ") != "s1=working s2=done" {
			t.Fatalf("every session's changes: %v", got)
		}
		if ev := next(oneEv); ev[0] != "status" || !bytes.Contains([]byte(ev[1]), []byte(`"session":"s2"`)) {
			t.Fatalf("one session's stream: %v", ev)
		}
		for q, want := range map[string]int{"?session=s2": 400, "?status=bogus": 400, "?colour=red": 400} {
			if code, out := c.do("GET", "/v1/sessions/stream"+q, "cookie", ""); code != want {
				t.Errorf("stream%s: %d %v, want %d", q, code, out, want)
			}
		}
		if code, _ := c.do("GET", "/v1/sessions/stream", "", ""); code != 401 {
			t.Errorf("stream signed out: %d", code)
		}
	})
}
