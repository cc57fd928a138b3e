package ingest_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
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

// Request bodies in flight are bounded by their declared sizes, not only
// by their number: while one large delivery is being received, another
// that would exceed the budget is answered 503 at once.
func TestBodiesInFlightBoundedByBytes(t *testing.T) {
	// A gate that lets a slow body take its time, so that only the bytes
	// budget answers.
	g, err := gate.New(gate.Config{Grace: time.Minute,
		Unverified: gate.Limits{Requests: 64, Bytes: 30 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	h := startConfig(t, nil, func(c *ingest.Config) { c.Gate, c.Timeout = g, time.Minute }, reviewerYAML)
	big := githubHeaders("push", "big", []byte("x")) // signed for other bytes: refused once read
	first, pw := sendSlowly(t, h.url+"/webhooks/github", big, 20<<20)
	// Once the first request has taken its share, a second one no longer
	// fits; that moment is not observable otherwise. (Should the second
	// have come in first, the first is refused: send it again.)
	natstest.WaitFor(t, 30*time.Second, func() error {
		select {
		case got := <-first:
			first, pw = sendSlowly(t, h.url+"/webhooks/github", big, 20<<20)
			return fmt.Errorf("first request answered %d while its body was being sent", got)
		default:
		}
		status, pw2 := sendSlowly(t, h.url+"/webhooks/github", githubHeaders("push", "second", []byte("x")), 20<<20)
		select {
		case got := <-status:
			if got == http.StatusServiceUnavailable {
				return nil
			}
			return fmt.Errorf("second request: %d", got)
		case <-time.After(2 * time.Second):
			pw2.Close()
			<-status
			return errors.New("second request not refused yet")
		}
	})
	// Cut short, the first request ends (with an error on the client).
	pw.Close()
	select {
	case <-first:
	case <-time.After(30 * time.Second):
		t.Fatal("first request never ended")
	}
	// Once the server has let go of the first one, the budget has room
	// again.
	natstest.WaitFor(t, 30*time.Second, func() error {
		status, pw2 := sendSlowly(t, h.url+"/webhooks/github", githubHeaders("push", "third", []byte("x")), 20<<20)
		select {
		case got := <-status:
			return fmt.Errorf("a request that fits the budget again: %d", got)
		case <-time.After(time.Second):
			// Still being read: it was let in.
			pw2.Close()
			<-status
			return nil
		}
	})
}
