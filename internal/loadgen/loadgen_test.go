package loadgen

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/natstest"
)

// server is a net/http server on loopback that answers each request
// with the status its X-Delivery header starts with ("404-7"), a body
// naming the delivery, and `Connection: close` when the delivery ends in
// "-close"; "big" answers a body of bigBody bytes, "chunked" a body
// without Content-Length. It checks what every request carries.
type server struct {
	*httptest.Server
	conns    atomic.Int64 // connections accepted
	requests atomic.Int64
	dropped  atomic.Bool   // a "drop" delivery was read and left unanswered once
	hang     chan struct{} // closed when the test ends: what "hang" waits for
	mu       sync.Mutex
	bad      []string // what a request lacked
}

const bigBody = 200 << 10

var body = bytes.Repeat([]byte("webhook body "), 3000) // about 39 KB, more than one write of most sockets

func newServer(t *testing.T) *server {
	s := &server{hang: make(chan struct{})}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		d := r.Header.Get("X-Delivery")
		switch d {
		case "early":
			// Refused from its headers, its body unread, as the
			// ingest's gate refuses a request.
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, "busy")
			return
		case "hang":
			<-s.hang
			return
		}
		got, err := io.ReadAll(r.Body)
		if err != nil || !bytes.Equal(got, body) || r.ContentLength != int64(len(body)) || r.Header.Get("X-Hub-Signature-256") != "sha256=abc" || r.Method != http.MethodPost || r.URL.Path != "/webhooks/github" || r.Host != "ingest.test" {
			s.mu.Lock()
			s.bad = append(s.bad, fmt.Sprintf("%s: %s %s host %s, %d bytes (%v), signature %q", d, r.Method, r.URL, r.Host, len(got), err, r.Header.Get("X-Hub-Signature-256")))
			s.mu.Unlock()
		}
		switch d {
		case "drop":
			// Read whole, then the connection closed without an
			// answer, the first time.
			if !s.dropped.Swap(true) {
				nc, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					nc.Close()
				}
				return
			}
			w.WriteHeader(http.StatusAccepted)
			return
		case "big":
			w.Header().Set("Content-Length", strconv.Itoa(bigBody))
			_, _ = w.Write(bytes.Repeat([]byte("b"), bigBody))
			return
		case "chunked":
			_, _ = w.Write([]byte("part"))
			w.(http.Flusher).Flush()
			_, _ = w.Write([]byte("rest"))
			return
		}
		if strings.HasSuffix(d, "-close") {
			w.Header().Set("Connection", "close")
		}
		code, _ := strconv.Atoi(d[:3])
		w.WriteHeader(code)
		fmt.Fprintf(w, "answer to %s", d)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(func() {
		close(s.hang)
		s.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, b := range s.bad {
			t.Errorf("request not as sent: %s", b)
		}
	})
	return s
}

func request(t *testing.T) *Request {
	t.Helper()
	r, err := NewRequest(http.MethodPost, "ingest.test", "/webhooks/github", http.Header{
		"X-Hub-Signature-256": {"sha256=abc"},
		"Content-Type":        {"application/json"},
	}, "X-Delivery", body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func addr(s *server) string { return strings.TrimPrefix(s.URL, "http://") }

func TestStatusesOnOneConnection(t *testing.T) {
	s := newServer(t)
	r := request(t)
	c := NewConn(addr(s), 10*time.Second)
	defer c.Close()
	statuses := []int{202, 200, 404, 503, 400, 202, 204, 500, 202}
	for round := range 3 {
		for i, want := range statuses {
			d := fmt.Sprintf("%d-%d-%d", want, round, i)
			got, err := c.Do(r, d)
			if err != nil {
				t.Fatalf("%s: %v", d, err)
			}
			if got != want {
				t.Fatalf("%s: status %d", d, got)
			}
			wantBody := "answer to " + d
			if want == http.StatusNoContent {
				wantBody = ""
			}
			if string(c.Body()) != wantBody {
				t.Fatalf("%s: body %q, want %q", d, c.Body(), wantBody)
			}
		}
	}
	if n := int64(3 * len(statuses)); s.requests.Load() != n {
		t.Fatalf("server saw %d requests, want %d", s.requests.Load(), n)
	}
	if c.Dials() != 1 || s.conns.Load() != 1 {
		t.Fatalf("%d dials, %d connections at the server; want one kept alive", c.Dials(), s.conns.Load())
	}
}

func TestExpect(t *testing.T) {
	s := newServer(t)
	r := request(t)
	c := NewConn(addr(s), 10*time.Second)
	defer c.Close()
	if err := c.Expect(r, "202-a", http.StatusAccepted); err != nil {
		t.Fatal(err)
	}
	err := c.Expect(r, "503-b", http.StatusAccepted)
	var se *StatusError
	if !errors.As(err, &se) || se.Status != 503 || se.Body != "answer to 503-b" {
		t.Fatalf("Expect of a 503: %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "503 Service Unavailable") || !strings.Contains(msg, "answer to 503-b") {
		t.Fatalf("error %q names neither the status nor the body", msg)
	}
	// A refusal is an answer like another: the connection carries on.
	if err := c.Expect(r, "202-c", http.StatusAccepted); err != nil || c.Dials() != 1 {
		t.Fatalf("after a refusal: %v, %d dials", err, c.Dials())
	}
}

func TestServerClosesConnection(t *testing.T) {
	s := newServer(t)
	r := request(t)
	c := NewConn(addr(s), 10*time.Second)
	defer c.Close()
	// Every third answer says `Connection: close`: the next request
	// dials again.
	closes := 0
	for i := range 10 {
		d := fmt.Sprintf("202-%d", i)
		if i%3 == 2 {
			d += "-close"
			closes++
		}
		if err := c.Expect(r, d, http.StatusAccepted); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
	}
	if c.Dials() != closes+1 || s.conns.Load() != int64(closes+1) {
		t.Fatalf("%d dials, %d connections at the server, want %d", c.Dials(), s.conns.Load(), closes+1)
	}
	// The server closes the idle connection: the request goes on a new
	// one, once.
	before := s.requests.Load()
	s.CloseClientConnections()
	// The close reaches the client's socket at once on loopback, unless
	// the kernel defers it: no event announces it.
	natstest.WaitFor(t, 10*time.Second, func() error {
		if !idleClosed(c.nc) {
			return errors.New("the server's close has not reached the idle connection")
		}
		return nil
	})
	if err := c.Expect(r, "202-after-idle-close", http.StatusAccepted); err != nil {
		t.Fatal(err)
	}
	if c.Dials() != closes+2 || s.requests.Load() != before+1 {
		t.Fatalf("after the server closed the idle connection: %d dials, %d requests", c.Dials(), s.requests.Load()-before)
	}
}

// TestRequestReadAndUnansweredNotSentAgain: a request the server read
// whole and never answered (its connection closed after) is an error, as
// net/http's client makes it for a POST, and not sent again on a new
// connection, where an answer to the copy would count it as answered.
func TestRequestReadAndUnansweredNotSentAgain(t *testing.T) {
	s := newServer(t)
	r := request(t)
	c := NewConn(addr(s), 10*time.Second)
	defer c.Close()
	if err := c.Expect(r, "202-first", http.StatusAccepted); err != nil {
		t.Fatal(err)
	}
	status, err := c.Do(r, "drop")
	if err == nil {
		t.Fatalf("a request closed unanswered was answered %d (%d requests at the server)", status, s.requests.Load())
	}
	if !strings.Contains(err.Error(), addr(s)) {
		t.Fatalf("error %q does not name the address", err)
	}
	if n := s.requests.Load(); n != 2 {
		t.Fatalf("server saw %d requests, want 2 (the unanswered one not sent again)", n)
	}
	// The next request goes on a new connection.
	if err := c.Expect(r, "202-next", http.StatusAccepted); err != nil || c.Dials() != 2 {
		t.Fatalf("after the unanswered request: %v, %d dials", err, c.Dials())
	}
}

// TestIdleAnswerNotTakenForTheNext: a server that, as it closes an idle
// connection, writes an answer no request asked for (a 408, as some
// servers do) has that answer and the connection dropped before the
// next request is written: the next request goes on a new connection
// and gets its own answer (net/http's client does the same).
func TestIdleAnswerNotTakenForTheNext(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	idle := make(chan struct{}) // the unasked-for answer is written
	var wg sync.WaitGroup
	defer func() {
		l.Close()
		wg.Wait()
	}()
	wg.Go(func() {
		for n := 0; ; n++ {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(nc)
			req, err := http.ReadRequest(br)
			if err == nil {
				_, err = io.Copy(io.Discard, req.Body)
			}
			if err != nil {
				t.Errorf("connection %d: %v", n, err)
				nc.Close()
				return
			}
			fmt.Fprintf(nc, "HTTP/1.1 202 Accepted\r\nContent-Length: %d\r\n\r\n%s", len(req.Header.Get("X-Delivery")), req.Header.Get("X-Delivery"))
			if n == 0 {
				fmt.Fprint(nc, "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
				close(idle)
			}
			nc.Close()
		}
	})
	r, err := NewRequest(http.MethodPost, "ingest.test", "/webhooks/github", nil, "X-Delivery", body)
	if err != nil {
		t.Fatal(err)
	}
	c := NewConn(l.Addr().String(), 10*time.Second)
	defer c.Close()
	if err := c.Expect(r, "first", http.StatusAccepted); err != nil || string(c.Body()) != "first" {
		t.Fatalf("first: %v, body %q", err, c.Body())
	}
	select {
	case <-idle:
	case <-time.After(10 * time.Second):
		t.Fatal("the server wrote no idle answer")
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if !idleClosed(c.nc) {
			return errors.New("the idle answer has not reached the connection")
		}
		return nil
	})
	if err := c.Expect(r, "second", http.StatusAccepted); err != nil || string(c.Body()) != "second" {
		t.Fatalf("second: %v, body %q", err, c.Body())
	}
	if c.Dials() != 2 {
		t.Fatalf("%d dials, want 2", c.Dials())
	}
}

// TestEarlyAnswer: an answer written before the body was read (a
// refusal from the headers, with `Connection: close`) is read as the
// answer, and the next request goes on a new connection.
func TestEarlyAnswer(t *testing.T) {
	s := newServer(t)
	r := request(t)
	c := NewConn(addr(s), 10*time.Second)
	defer c.Close()
	for i := range 3 {
		if err := c.Expect(r, fmt.Sprintf("202-%d", i), http.StatusAccepted); err != nil {
			t.Fatal(err)
		}
		err := c.Expect(r, "early", http.StatusAccepted)
		var se *StatusError
		if !errors.As(err, &se) || se.Status != http.StatusServiceUnavailable || se.Body != "busy" {
			t.Fatalf("early answer %d: %v", i, err)
		}
	}
	if c.Dials() != 3 || s.requests.Load() != 6 {
		t.Fatalf("%d dials, %d requests; want 3 and 6", c.Dials(), s.requests.Load())
	}
}

// TestTimeout: a request not answered within the Conn's timeout is an
// error that says so, and it was sent once.
func TestTimeout(t *testing.T) {
	s := newServer(t)
	r := request(t)
	c := NewConn(addr(s), 10*time.Second)
	defer c.Close()
	if err := c.Expect(r, "202-a", http.StatusAccepted); err != nil {
		t.Fatal(err)
	}
	// Only the request meant to go unanswered has the short timeout.
	c.timeout = 300 * time.Millisecond
	_, err := c.Do(r, "hang")
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("unanswered request: %v, want a timeout", err)
	}
	if n := s.requests.Load(); n != 2 {
		t.Fatalf("server saw %d requests, want 2", n)
	}
}

func TestServerWithoutKeepAlive(t *testing.T) {
	s := newServer(t)
	s.Config.SetKeepAlivesEnabled(false)
	r := request(t)
	c := NewConn(addr(s), 10*time.Second)
	defer c.Close()
	for i := range 5 {
		if err := c.Expect(r, fmt.Sprintf("202-%d", i), http.StatusAccepted); err != nil {
			t.Fatal(err)
		}
	}
	if c.Dials() != 5 {
		t.Fatalf("%d dials for 5 answers with Connection: close", c.Dials())
	}
}

func TestBodyBiggerThanARead(t *testing.T) {
	s := newServer(t)
	r := request(t)
	c := NewConn(addr(s), 10*time.Second)
	defer c.Close()
	for i := range 3 {
		status, err := c.Do(r, "big")
		if err != nil || status != 200 {
			t.Fatalf("big answer %d: %d, %v", i, status, err)
		}
		if len(c.Body()) != KeepBody || strings.Trim(string(c.Body()), "b") != "" {
			t.Fatalf("big answer %d: kept %d bytes", i, len(c.Body()))
		}
		// The body was read to its end: the next answer on the same
		// connection is read from its start.
		if err := c.Expect(r, fmt.Sprintf("202-%d", i), http.StatusAccepted); err != nil {
			t.Fatal(err)
		}
	}
	if c.Dials() != 1 {
		t.Fatalf("%d dials", c.Dials())
	}
}

func TestChunkedRefused(t *testing.T) {
	s := newServer(t)
	r := request(t)
	c := NewConn(addr(s), 10*time.Second)
	defer c.Close()
	_, err := c.Do(r, "chunked")
	if !errors.Is(err, errFraming) || !strings.Contains(err.Error(), "chunked") {
		t.Fatalf("chunked answer: %v", err)
	}
	// The connection it came on is dropped, and the next request works.
	if err := c.Expect(r, "202-next", http.StatusAccepted); err != nil || c.Dials() != 2 {
		t.Fatalf("after a refused answer: %v, %d dials", err, c.Dials())
	}
}

func TestDialFailure(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := l.Addr().String()
	l.Close()
	c := NewConn(a, 5*time.Second)
	if _, err := c.Do(request(t), "x"); err == nil || !strings.Contains(err.Error(), "dial "+a) {
		t.Fatalf("dial of a closed port: %v", err)
	}
}

func TestNewRequestRefuses(t *testing.T) {
	tests := []struct {
		name                 string
		method, host, target string
		header               http.Header
		vary                 string
	}{
		{name: "method with a space", method: "PO ST", host: "h", target: "/", vary: "X-D"},
		// Answers to these have no body whatever their Content-Length
		// says, or are a tunnel: the reader would wait for a body that
		// never comes.
		{name: "HEAD", method: "HEAD", host: "h", target: "/", vary: "X-D"},
		{name: "CONNECT", method: "CONNECT", host: "h", target: "/", vary: "X-D"},
		{name: "target not a path", method: "POST", host: "h", target: "http://h/", vary: "X-D"},
		{name: "target with CRLF", method: "POST", host: "h", target: "/a\r\nX: y", vary: "X-D"},
		{name: "no host", method: "POST", target: "/", vary: "X-D"},
		{name: "value with LF", method: "POST", host: "h", target: "/", header: http.Header{"X-A": {"a\nb"}}, vary: "X-D"},
		{name: "name not a token", method: "POST", host: "h", target: "/", header: http.Header{"X A": {"a"}}, vary: "X-D"},
		{name: "own Content-Length", method: "POST", host: "h", target: "/", header: http.Header{"Content-Length": {"1"}}, vary: "X-D"},
		{name: "own Connection", method: "POST", host: "h", target: "/", header: http.Header{"Connection": {"close"}}, vary: "X-D"},
		{name: "varying header fixed too", method: "POST", host: "h", target: "/", header: http.Header{"X-D": {"1"}}, vary: "X-D"},
		{name: "no varying header", method: "POST", host: "h", target: "/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewRequest(tt.method, tt.host, tt.target, tt.header, tt.vary, nil); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	s := newServer(t)
	c := NewConn(addr(s), 5*time.Second)
	defer c.Close()
	if _, err := c.Do(request(t), "a\r\nX-Injected: 1"); err == nil {
		t.Fatal("a varying value with CRLF was sent")
	}
}

// TestReadAnswer holds the reader to the framings it reads and the ones
// it refuses, on answers no net/http server would write.
func TestReadAnswer(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		status int
		keep   bool
		body   string
		err    string // in the error; "" for none
		rest   string // what is left unread
	}{
		{name: "HTTP/1.1", in: "HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\nokNEXT", status: 202, keep: true, body: "ok", rest: "NEXT"},
		{name: "bare LF, no reason", in: "HTTP/1.1 202\nContent-Length: 0\n\nNEXT", status: 202, keep: true, rest: "NEXT"},
		{name: "Connection close", in: "HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 0\r\n\r\n", status: 200},
		{name: "HTTP/1.0", in: "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", status: 200, body: "x"},
		{name: "HTTP/1.0 keep-alive", in: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx", status: 200, keep: true, body: "x"},
		{name: "HTTP/1.0 close before keep-alive", in: "HTTP/1.0 200 OK\r\nConnection: close, keep-alive\r\nContent-Length: 0\r\n\r\n", status: 200},
		{name: "HTTP/1.0 close on a line of its own", in: "HTTP/1.0 200 OK\r\nConnection: close\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n", status: 200},
		{name: "interim answers skipped", in: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 1\r\n\r\nk", status: 202, keep: true, body: "k"},
		{name: "204 without length", in: "HTTP/1.1 204 No Content\r\n\r\nNEXT", status: 204, keep: true, rest: "NEXT"},
		{name: "same length twice", in: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\ncontent-length: 1\r\n\r\nx", status: 200, keep: true, body: "x"},
		{name: "delimited by close", in: "HTTP/1.1 200 OK\r\n\r\nuntil the end", err: "without Content-Length"},
		{name: "chunked", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\n\r\n", err: "Transfer-Encoding"},
		{name: "upgrade", in: "HTTP/1.1 101 Switching Protocols\r\n\r\n", err: "101"},
		{name: "two lengths", in: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy", err: "Content-Length 1 and 2"},
		{name: "signed length", in: "HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\nx", err: "Content-Length"},
		{name: "folded header", in: "HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 0\r\n\r\n", err: "folded"},
		{name: "not HTTP", in: "SSH-2.0-OpenSSH\r\n\r\n", err: "status line"},
		{name: "HTTP/2 status line", in: "HTTP/2 200\r\n\r\n", err: "status line"},
		{name: "status of two digits", in: "HTTP/1.1 20 OK\r\n\r\n", err: "status line"},
		{name: "status 099", in: "HTTP/1.1 099 x\r\nContent-Length: 0\r\n\r\n", err: "status line"},
		{name: "header without colon", in: "HTTP/1.1 200 OK\r\nbroken\r\n\r\n", err: "header line"},
		{name: "cut in the head", in: "HTTP/1.1 200 OK\r\nContent-Len", err: "unexpected EOF"},
		{name: "cut in the body", in: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", err: "unexpected EOF"},
		{name: "empty", in: "", err: "unexpected EOF"},
		{name: "line too long", in: "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", maxHeaderLine) + "\r\n\r\n", err: "longer than"},
		{name: "too many headers", in: "HTTP/1.1 200 OK\r\n" + strings.Repeat("X: a\r\n", maxHeaderLines+1) + "\r\n", err: "header lines"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			br := bufio.NewReaderSize(strings.NewReader(tt.in), maxHeaderLine)
			b := make([]byte, 0, KeepBody)
			status, keep, err := readAnswer(br, &b)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			rest, _ := io.ReadAll(br)
			if status != tt.status || keep != tt.keep || string(b) != tt.body || string(rest) != tt.rest {
				t.Fatalf("status %d keep %v body %q rest %q, want %d %v %q %q", status, keep, b, rest, tt.status, tt.keep, tt.body, tt.rest)
			}
		})
	}
}

// FuzzReadAnswer feeds the reader arbitrary answers: it returns an error,
// or an answer that net/http's reader reads the same way (interim
// answers skipped): the same status, the connection kept or closed
// alike, the kept bytes the start of its body, and the same bytes left
// after it. It never keeps more than KeepBody bytes.
func FuzzReadAnswer(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\nabc",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"HTTP/1.1 204\n\n",
		"HTTP/1.0 200 OK\r\nConnection: close, keep-alive\r\nContent-Length: 1\r\n\r\nxNEXT",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(in), maxHeaderLine)
		b := make([]byte, 0, KeepBody)
		status, keep, err := readAnswer(br, &b)
		if err != nil {
			return
		}
		if status < 200 || status > 999 || len(b) > KeepBody {
			t.Fatalf("status %d, %d bytes kept", status, len(b))
		}
		rest, _ := io.ReadAll(br)
		nr := bufio.NewReader(bytes.NewReader(in))
		var resp *http.Response
		for {
			resp, err = http.ReadResponse(nr, &http.Request{Method: http.MethodPost})
			if err != nil && strings.Contains(err.Error(), "malformed MIME header") {
				return // a header value net/http refuses and this reader passes over
			}
			if err != nil {
				t.Fatalf("read %d (keep %v); net/http: %v", status, keep, err)
			}
			if resp.StatusCode >= 200 {
				break
			}
		}
		nbody, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("read %d (keep %v); net/http's body: %v", status, keep, err)
		}
		nrest, _ := io.ReadAll(nr)
		if resp.StatusCode != status || resp.Close == keep || !bytes.HasPrefix(nbody, b) || !bytes.Equal(rest, nrest) {
			t.Fatalf("read %d keep %v body %q rest %q; net/http %d close %v body %q rest %q", status, keep, b, rest, resp.StatusCode, resp.Close, nbody, nrest)
		}
	})
}

// TestBodyAfterFailedAnswer: an answer cut off inside its body is an
// error, and Body then holds nothing, neither the failed answer's part
// nor the answer before it.
func TestBodyAfterFailedAnswer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				br := bufio.NewReader(nc)
				for i := 0; ; i++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					if i == 0 {
						_, _ = io.WriteString(nc, "HTTP/1.1 202 Accepted\r\nContent-Length: 5\r\n\r\nfirst")
						continue
					}
					// Promises 100 bytes, writes 7, closes.
					_, _ = io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
					return
				}
			}()
		}
	}()
	r := request(t)
	c := NewConn(l.Addr().String(), 10*time.Second)
	defer c.Close()
	if err := c.Expect(r, "first", http.StatusAccepted); err != nil || string(c.Body()) != "first" {
		t.Fatalf("first answer: %v, body %q", err, c.Body())
	}
	if _, err := c.Do(r, "cut"); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("answer cut off in its body: %v, want %v", err, io.ErrUnexpectedEOF)
	}
	if b := c.Body(); len(b) != 0 {
		t.Fatalf("Body after a failed answer holds %q, want nothing", b)
	}
}

// TestBodyAfterRefusedValue: a request refused before it is sent (its
// header value has a CR, LF or NUL) failed too, and Body then holds
// nothing, not the answer before it.
func TestBodyAfterRefusedValue(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, "first")
	}))
	defer srv.Close()
	r := request(t)
	c := NewConn(strings.TrimPrefix(srv.URL, "http://"), 10*time.Second)
	defer c.Close()
	if err := c.Expect(r, "first", http.StatusAccepted); err != nil || string(c.Body()) != "first" {
		t.Fatalf("first answer: %v, body %q", err, c.Body())
	}
	if _, err := c.Do(r, "bad\r\nvalue"); err == nil {
		t.Fatal("a header value with CR LF sent")
	}
	if b := c.Body(); len(b) != 0 {
		t.Fatalf("Body after a refused request holds %q, want nothing", b)
	}
}
