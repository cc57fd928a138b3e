package model_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetloop/jetloop/model"
)

// fakeServer is an in-process provider: the n-th request is answered by
// the n-th handler (the last one answers the rest), and every request is
// recorded.
type fakeServer struct {
	*httptest.Server
	handlers []http.HandlerFunc
	count    atomic.Int64
	reqs     chan recorded
}

// recorded is one request as the server saw it.
type recorded struct {
	method string
	path   string
	header http.Header
	body   []byte
}

func newFake(t *testing.T, handlers ...http.HandlerFunc) *fakeServer {
	t.Helper()
	f := &fakeServer{handlers: handlers, reqs: make(chan recorded, 64)}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(f.count.Add(1)) - 1
		body, _ := io.ReadAll(r.Body)
		select {
		case f.reqs <- recorded{method: r.Method, path: r.URL.Path, header: r.Header.Clone(), body: body}:
		default:
		}
		f.handlers[min(n, len(f.handlers)-1)](w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

// requests is how many requests the server has received.
func (f *fakeServer) requests() int { return int(f.count.Load()) }

// next returns the next recorded request.
func (f *fakeServer) next(t *testing.T) recorded {
	t.Helper()
	select {
	case r := <-f.reqs:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no request reached the server")
		return recorded{}
	}
}

// reply answers with status, headers and body.
func reply(status int, body string, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// cutOff sends the first n bytes of body and then drops the connection.
func cutOff(body string, n int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, body[:n])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
}

// hang holds the request until the client gives up; it reports arrival on
// arrived and the client's cancel on gone (either may be nil).
func hang(arrived, gone chan<- struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if arrived != nil {
			arrived <- struct{}{}
		}
		<-r.Context().Done()
		if gone != nil {
			gone <- struct{}{}
		}
	}
}

// fastRetries makes retries immediate enough for tests.
func fastRetries(attempts int) []model.Option {
	return []model.Option{
		model.WithMaxAttempts(attempts),
		model.WithBackoff(time.Millisecond, 2*time.Millisecond),
		model.WithLogger(slog.New(slog.DiscardHandler)),
	}
}

// env is a fixed environment for API keys.
func env(kv ...string) model.Option {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return model.WithGetenv(func(k string) string { return m[k] })
}
