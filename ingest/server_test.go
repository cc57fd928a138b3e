package ingest_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/ingest/gate"
	"github.com/jetloop/jetloop/internal/natstest"
)

// sendSlowly starts a POST whose body (of the declared length) never
// comes in full, and returns its answer once the server gives one; closing the
// returned writer ends the request.
func sendSlowly(t *testing.T, url string, header map[string]string, length int64) (<-chan int, *io.PipeWriter) {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, url, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = length
	for k, v := range header {
		req.Header.Set(k, v)
	}
	status := make(chan int, 1)
	// A first part of the body, more than the client buffers, makes the
	// client send the headers; the rest never comes.
	go func() { _, _ = pw.Write(make([]byte, min(length, 64<<10))) }()
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			status <- 0
			return
		}
		resp.Body.Close()
		status <- resp.StatusCode
	}()
	t.Cleanup(func() { pw.CloseWithError(errors.New("test over")) })
	return status, pw
}

// A sender without credentials is answered from its headers alone: it
// cannot hold memory or a request slot while it trickles a large body.
func TestUnauthenticatedRequestRefusedBeforeItsBody(t *testing.T) {
	h := startDefs(t, nil, reviewerYAML)
	tests := []struct {
		name, path string
		header     map[string]string
		length     int64
		want       int
	}{
		{name: "events without a token", path: "/events", header: map[string]string{"Content-Type": "application/json"}, length: 512 << 10, want: http.StatusUnauthorized},
		{name: "request with a wrong token", path: "/v1/agents/pr-reviewer/sessions/s/messages", header: map[string]string{"Authorization": "Bearer nope"}, length: 512 << 10, want: http.StatusUnauthorized},
		{name: "webhook without a signature", path: "/webhooks/github", header: map[string]string{ingest.HeaderGitHubEvent: "push", ingest.HeaderGitHubDelivery: "d"}, length: 20 << 20, want: http.StatusUnauthorized},
		{name: "webhook over GitHub's limit", path: "/webhooks/github", header: githubHeaders("push", "d", nil), length: ingest.MaxGitHubBody + 1, want: http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _ := sendSlowly(t, h.url+tt.path, tt.header, tt.length)
			select {
			case got := <-status:
				if got != tt.want {
					t.Fatalf("status %d, want %d", got, tt.want)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("no answer while the body was still being sent")
			}
		})
	}
}

// Request bodies in flight are bounded by the bytes they sent, not those
// they declared: while one large delivery is being received, another whose
// body would take the budget past its bound is answered 503 midway, and a
// request that declares a large body but trickles it holds nothing more.
func TestBodiesInFlightBoundedByBytes(t *testing.T) {
	// A gate that lets a slow body take its time, so that only the bytes
	// budget answers.
	g, err := gate.New(gate.Config{Grace: time.Minute,
		Unverified: gate.Limits{Requests: 64, Bytes: 30 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	h := startConfig(t, nil, func(c *ingest.Config) { c.Gate, c.Timeout = g, time.Minute }, reviewerYAML)
	// Declared large, trickled: each holds what it sent, so three that
	// declare 60 MiB together fit a 30 MiB pool.
	var trickled []<-chan int
	for i := range 3 {
		status, _ := sendSlowly(t, h.url+"/webhooks/github", githubHeaders("push", fmt.Sprintf("declared-%d", i), []byte("x")), 20<<20)
		trickled = append(trickled, status)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if r, _, _, _ := g.Unverified().InUse(netip.Addr{}); r < 3 {
			return fmt.Errorf("the pool holds %d requests", r)
		}
		return nil
	})
	for i, st := range trickled {
		select {
		case got := <-st:
			t.Fatalf("trickled body %d declaring 20 MiB answered %d", i, got)
		default:
		}
	}
	// 20 MiB sent of a body not yet whole: the next 12 MiB do not fit.
	first, pw := sendPart(t, h.url+"/webhooks/github", githubHeaders("push", "big", []byte("x")), 20<<20+1, 20<<20)
	natstest.WaitFor(t, 30*time.Second, func() error {
		if r, b, _, _ := g.Unverified().InUse(netip.Addr{}); b < 20<<20 {
			return fmt.Errorf("the pool holds %d requests and %d bytes", r, b)
		}
		return nil
	})
	second, _ := sendPart(t, h.url+"/webhooks/github", githubHeaders("push", "second", []byte("x")), 12<<20, 12<<20)
	select {
	case got := <-second:
		if got != http.StatusServiceUnavailable {
			t.Fatalf("a body past the pool's bytes: %d, want 503", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a body past the pool's bytes was not refused")
	}
	pw.Close()
	select {
	case <-first:
	case <-time.After(30 * time.Second):
		t.Fatal("first request never ended")
	}
}

// sendPart posts a body declaring length bytes, sends the first send of
// them and holds the rest back.
func sendPart(t *testing.T, url string, header map[string]string, length, send int64) (<-chan int, *io.PipeWriter) {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, url, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = length
	for k, v := range header {
		req.Header.Set(k, v)
	}
	status := make(chan int, 1)
	go func() { _, _ = pw.Write(make([]byte, send)) }()
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			status <- 0
			return
		}
		resp.Body.Close()
		status <- resp.StatusCode
	}()
	t.Cleanup(func() { pw.CloseWithError(errors.New("test over")) })
	return status, pw
}
