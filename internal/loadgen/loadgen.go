package loadgen

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// KeepBody is how many bytes of an answer's body a Conn keeps (see
// Conn.Body): enough to say why a request was refused.
const KeepBody = 512

// maxHeaderLine bounds one line of an answer's head (the reader's
// buffer).
const maxHeaderLine = 4 << 10

// maxHeaderLines bounds the header lines of an answer.
const maxHeaderLines = 100

// Request is an HTTP/1.1 request built once and sent many times: its
// request line, headers and body are fixed, except the value of one
// header (Vary), given per request to Conn.Do. It is read-only once
// built, so every Conn may send it.
type Request struct {
	head []byte // request line and headers, up to the varying header's value
	tail []byte // the end of that header, the other headers, the blank line, the body
}

// NewRequest builds a request of method for target (an origin-form
// path, "/webhooks/github") to host (the Host header), with the headers
// in header, a header named vary whose value each request gives, and
// body (its Content-Length is set; the request keeps body, which must not
// change). HEAD and CONNECT (whose answers' Content-Length frames no
// body), header names and values with a CR, an LF or a NUL, names that
// are not tokens, and the headers the request sets itself (Host,
// Content-Length, Transfer-Encoding, Connection) are refused.
func NewRequest(method, host, target string, header http.Header, vary string, body []byte) (*Request, error) {
	if !token(method) {
		return nil, fmt.Errorf("loadgen: method %q is not a token", method)
	}
	if method == http.MethodHead || method == http.MethodConnect {
		return nil, fmt.Errorf("loadgen: method %s: its answer is not framed by its Content-Length, which is all this reader reads", method)
	}
	if !strings.HasPrefix(target, "/") || strings.ContainsAny(target, " \r\n\x00") {
		return nil, fmt.Errorf("loadgen: target %q is not a path", target)
	}
	if host == "" || !value(host) {
		return nil, fmt.Errorf("loadgen: host %q", host)
	}
	if !token(vary) {
		return nil, fmt.Errorf("loadgen: varying header %q is not a token", vary)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", method, target, host, len(body))
	for _, k := range slices.Sorted(maps.Keys(header)) {
		if !token(k) {
			return nil, fmt.Errorf("loadgen: header name %q is not a token", k)
		}
		switch http.CanonicalHeaderKey(k) {
		case "Host", "Content-Length", "Transfer-Encoding", "Connection", http.CanonicalHeaderKey(vary):
			return nil, fmt.Errorf("loadgen: header %s is the request's own", k)
		}
		for _, v := range header[k] {
			if !value(v) {
				return nil, fmt.Errorf("loadgen: header %s: value %q has a CR, LF or NUL", k, v)
			}
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	fmt.Fprintf(&b, "%s: ", vary)
	head := bytes.Clone(b.Bytes())
	tail := make([]byte, 0, 4+len(body))
	tail = append(tail, "\r\n\r\n"...)
	tail = append(tail, body...)
	return &Request{head: head, tail: tail}, nil
}

// token reports whether s is an HTTP token (RFC 9110 §5.6.2).
func token(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// value reports whether s may be a header value on one line.
func value(s string) bool { return !strings.ContainsAny(s, "\r\n\x00") }

// Conn is one worker's keep-alive connection to addr: requests are sent
// one at a time, each answer read whole before the next request. It dials
// when it has no connection (at the first request, and after an answer
// with `Connection: close`). It is not safe for concurrent use.
type Conn struct {
	addr    string
	timeout time.Duration
	nc      net.Conn
	br      *bufio.Reader
	reused  bool // nc has carried an answer already (and may have been closed since)
	dials   int
	vec     [3][]byte
	bufs    net.Buffers
	val     []byte
	body    []byte
}

// NewConn returns a Conn to addr (host:port, TCP) whose dial, write and
// read of each request must end within timeout (none for 0). It dials at
// the first request.
func NewConn(addr string, timeout time.Duration) *Conn {
	return &Conn{addr: addr, timeout: timeout, body: make([]byte, 0, KeepBody)}
}

// Dials is the number of connections the Conn has dialled.
func (c *Conn) Dials() int { return c.dials }

// Body is the start (up to KeepBody bytes) of the last answer's body; it
// is overwritten by the next request, and empty after a request that
// failed (no part of an answer cut off or refused is kept).
func (c *Conn) Body() []byte { return c.body }

// Close closes the connection, if there is one. The Conn may be used
// again: it dials anew.
func (c *Conn) Close() error {
	if c.nc == nil {
		return nil
	}
	err := c.nc.Close()
	c.nc, c.reused = nil, false
	return err
}

// Do sends r with val as its varying header's value and reads the answer:
// its status code, the start of its body in Body. Before a request is
// written on a connection that has carried an answer, the connection is
// looked at without waiting: one the server closed while it was idle (or
// that holds bytes no request asked for) is closed and dialled again. A
// request once written is never sent again: a failure after it (the
// connection closed before its answer, a timeout, an answer this reader
// refuses) closes the connection and is returned, as net/http's client
// does for a POST, so no request the server did not answer is counted
// as answered.
func (c *Conn) Do(r *Request, val string) (int, error) {
	if !value(val) {
		c.body = c.body[:0]
		return 0, fmt.Errorf("loadgen: header value %q has a CR, LF or NUL", val)
	}
	c.val = append(c.val[:0], val...)
	status, err := c.try(r)
	if err != nil {
		c.body = c.body[:0]
		_ = c.Close()
		return 0, err
	}
	return status, nil
}

// Expect is Do, and a *StatusError if the answer's status is not want.
func (c *Conn) Expect(r *Request, val string, want int) error {
	status, err := c.Do(r, val)
	if err != nil {
		return err
	}
	if status != want {
		return &StatusError{Status: status, Want: want, Body: string(c.body)}
	}
	return nil
}

// StatusError is an answer of another status than the one expected.
type StatusError struct {
	Status, Want int
	Body         string // its start, up to KeepBody bytes
}

// Error names the status, the one wanted and the start of the body.
func (e *StatusError) Error() string {
	return fmt.Sprintf("answered %d %s, want %d: %q", e.Status, http.StatusText(e.Status), e.Want, e.Body)
}

// try sends r once on the connection (dialled if there is none, or if
// the one there was closed while idle) and reads its answer.
func (c *Conn) try(r *Request) (int, error) {
	if c.nc != nil {
		// The deadline first: the look at the idle connection is a read.
		if err := c.deadline(); err != nil {
			return 0, err
		}
		if c.reused && (c.br.Buffered() > 0 || idleClosed(c.nc)) {
			_ = c.Close()
		}
	}
	if c.nc == nil {
		d := net.Dialer{Timeout: c.timeout}
		nc, err := d.Dial("tcp", c.addr)
		if err != nil {
			return 0, fmt.Errorf("loadgen: dial %s: %w", c.addr, err)
		}
		c.dials++
		c.nc, c.reused = nc, false
		if c.br == nil {
			c.br = bufio.NewReaderSize(nc, maxHeaderLine)
		} else {
			c.br.Reset(nc)
		}
		if err := c.deadline(); err != nil {
			return 0, err
		}
	}
	c.vec = [3][]byte{r.head, c.val, r.tail}
	c.bufs = c.vec[:]
	if _, err := c.bufs.WriteTo(c.nc); err != nil {
		return 0, fmt.Errorf("loadgen: write to %s: %w", c.addr, err)
	}
	status, keep, err := readAnswer(c.br, &c.body)
	if err != nil {
		return 0, fmt.Errorf("loadgen: answer from %s: %w", c.addr, err)
	}
	if !keep {
		_ = c.Close()
	} else {
		c.reused = true
	}
	return status, nil
}

// deadline sets the connection's deadline for one request, if the Conn
// has a timeout.
func (c *Conn) deadline() error {
	if c.timeout <= 0 {
		return nil
	}
	if err := c.nc.SetDeadline(time.Now().Add(c.timeout)); err != nil {
		return fmt.Errorf("loadgen: %s: %w", c.addr, err)
	}
	return nil
}

// errFraming is an answer whose end this reader cannot find or will not
// read.
var errFraming = errors.New("unsupported framing")

// readAnswer reads one answer from br: interim 1xx answers are skipped;
// of the final one it returns the status, whether the connection may
// carry another request, and the start of the body in *body (the rest
// read and discarded).
func readAnswer(br *bufio.Reader, body *[]byte) (status int, keep bool, err error) {
	for {
		status, keep, length, err := readHead(br)
		if err != nil {
			return 0, false, err
		}
		if status >= 100 && status < 200 {
			if status == http.StatusSwitchingProtocols {
				return 0, false, fmt.Errorf("%w: 101 Switching Protocols", errFraming)
			}
			continue
		}
		if status == http.StatusNoContent || status == http.StatusNotModified {
			length = 0
		}
		if length < 0 {
			return 0, false, fmt.Errorf("%w: a %d answer without Content-Length (delimited by closing the connection)", errFraming, status)
		}
		k := min(length, KeepBody)
		*body = (*body)[:k]
		if n, err := io.ReadFull(br, *body); err != nil {
			*body = (*body)[:n]
			return 0, false, fmt.Errorf("body of %d bytes, %d read: %w", length, n, unexpected(err))
		}
		if n, err := br.Discard(int(length - k)); err != nil {
			return 0, false, fmt.Errorf("body of %d bytes, %d read: %w", length, k+int64(n), unexpected(err))
		}
		return status, keep, nil
	}
}

// unexpected turns the end of the stream inside an answer into
// io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readHead reads an answer's status line and headers: the status,
// whether the connection stays open after it, and its Content-Length
// (-1 when it has none).
func readHead(br *bufio.Reader) (status int, keep bool, length int64, err error) {
	line, err := readLine(br)
	if err != nil {
		return 0, false, 0, fmt.Errorf("status line: %w", err)
	}
	// HTTP/1.1 SP 3DIGIT SP reason (the reason may be empty, and so may
	// the space before it).
	if len(line) < 12 || string(line[:7]) != "HTTP/1." || (line[7] != '0' && line[7] != '1') || line[8] != ' ' || (len(line) > 12 && line[12] != ' ') {
		return 0, false, 0, fmt.Errorf("status line %q", start(line))
	}
	for _, d := range line[9:12] {
		if d < '0' || d > '9' {
			return 0, false, 0, fmt.Errorf("status line %q", start(line))
		}
	}
	status = int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
	if status < 100 {
		return 0, false, 0, fmt.Errorf("status line %q", start(line))
	}
	// HTTP/1.1 keeps the connection unless the answer says close;
	// HTTP/1.0 closes it unless it says keep-alive and not close (close
	// wins wherever it is, as net/http reads it).
	http10 := line[7] == '0'
	var closes, keepAlive bool
	length = -1
	for n := 0; ; n++ {
		line, err := readLine(br)
		if err != nil {
			return 0, false, 0, fmt.Errorf("header: %w", err)
		}
		if len(line) == 0 {
			return status, !closes && (!http10 || keepAlive), length, nil
		}
		if n == maxHeaderLines {
			return 0, false, 0, fmt.Errorf("more than %d header lines", maxHeaderLines)
		}
		if line[0] == ' ' || line[0] == '\t' {
			return 0, false, 0, fmt.Errorf("header line folded: %q", start(line))
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !token(string(line[:colon])) {
			return 0, false, 0, fmt.Errorf("header line %q", start(line))
		}
		name, v := line[:colon], bytes.Trim(line[colon+1:], " \t")
		switch {
		case ascii(name, "Content-Length"):
			l, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil || l < 0 || (len(v) > 0 && v[0] == '+') {
				return 0, false, 0, fmt.Errorf("Content-Length %q", start(v))
			}
			if length >= 0 && l != length {
				return 0, false, 0, fmt.Errorf("Content-Length %d and %d", length, l)
			}
			length = l
		case ascii(name, "Transfer-Encoding"):
			return 0, false, 0, fmt.Errorf("%w: Transfer-Encoding %q (this client reads answers framed by Content-Length)", errFraming, start(v))
		case ascii(name, "Connection"):
			for tok := range bytes.SplitSeq(v, []byte(",")) {
				switch tok = bytes.Trim(tok, " \t"); {
				case ascii(tok, "close"):
					closes = true
				case ascii(tok, "keep-alive"):
					keepAlive = true
				}
			}
		}
	}
}

// readLine reads one line of an answer's head, without its CRLF (or LF).
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return nil, fmt.Errorf("line longer than %d bytes: %q", maxHeaderLine, start(line))
	case err != nil:
		return nil, unexpected(err)
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// ascii reports whether b is s, ASCII case aside.
func ascii(b []byte, s string) bool {
	return len(b) == len(s) && strings.EqualFold(string(b), s)
}

// start is the start of b, for an error.
func start(b []byte) []byte { return b[:min(len(b), 64)] }
