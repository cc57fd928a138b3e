package gate

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// connServer serves on 127.0.0.1 behind LimitConns(limits): GET /
// answers at once, GET /hold waits until release is closed. idle
// receives each connection the server marks idle.
func connServer(t *testing.T, limits ConnLimits) (addr string, idle <-chan struct{}, release chan struct{}) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := LimitConns(l, limits)
	idles := make(chan struct{}, 64)
	release = make(chan struct{})
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/hold" {
				<-release
			}
			_, _ = io.WriteString(w, "ok")
		}),
		ConnState: func(c net.Conn, st http.ConnState) {
			conns.ConnState(c, st)
			if st == http.StateIdle {
				idles <- struct{}{}
			}
		},
	}
	go func() { _ = srv.Serve(conns) }()
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
		_ = srv.Close()
	})
	return l.Addr().String(), idles, release
}

// dialFrom connects to addr from the loopback address from.
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", from, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// get sends GET path on c and reads the answer; an error when c was
// closed instead.
func get(c net.Conn, path string) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: jetloop\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	return err
}

func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// Idle keep-alive connections, however many one sender holds, give way to
// new ones: of another address at the total bound, of its own address at
// the per-address bound.
func TestIdleConnectionsGiveWay(t *testing.T) {
	addr, idle, _ := connServer(t, ConnLimits{Total: 4, PerAddr: 3})
	var attacker []net.Conn
	for range 3 {
		c := dialFrom(t, "127.0.0.1", addr)
		if err := get(c, "/"); err != nil {
			t.Fatal(err)
		}
		await(t, idle, "an idle connection")
		attacker = append(attacker, c)
	}
	// The per-address bound: a fourth connection of the same address is
	// served, one of its idle ones closed.
	c := dialFrom(t, "127.0.0.1", addr)
	if err := get(c, "/"); err != nil {
		t.Fatalf("a connection past the per-address bound was not served: %v", err)
	}
	await(t, idle, "an idle connection")
	if n := countClosed(attacker); n != 1 {
		t.Fatalf("%d idle connections of the address closed for one past its bound, want 1", n)
	}
	attacker = append(attacker, c)
	// The total bound (4 open with the next): connections of another
	// address are served, each closing an idle one of the first.
	for range 2 {
		o := dialFrom(t, "127.0.0.2", addr)
		if err := get(o, "/"); err != nil {
			t.Fatalf("a connection of another address was not served past idle ones: %v", err)
		}
		await(t, idle, "an idle connection")
	}
	if n := countClosed(attacker); n != 2 {
		t.Fatalf("%d of the first address's 4 connections closed for the second address's 2 (one at the total bound), want 2", n)
	}
}

// countClosed counts the connections the server closed. Every close it
// counts happened before an answer the test read.
func countClosed(cs []net.Conn) int {
	n := 0
	for _, c := range cs {
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := c.Read(make([]byte, 1)); errors.Is(err, io.EOF) {
			n++
		}
	}
	return n
}

// Busy connections are not evicted: past the bound a new connection is
// closed at once.
func TestBusyConnectionsHoldTheirPlace(t *testing.T) {
	addr, idle, release := connServer(t, ConnLimits{Total: 8, PerAddr: 2})
	held := make(chan error, 2)
	for range 2 {
		c := dialFrom(t, "127.0.0.1", addr)
		go func() { held <- get(c, "/hold") }()
	}
	// The listener accepts in order: both are counted before the third.
	c := dialFrom(t, "127.0.0.1", addr)
	if err := get(c, "/"); err == nil {
		t.Fatal("a third connection of an address bounded to 2 busy ones was served")
	}
	close(release)
	for range 2 {
		select {
		case err := <-held:
			if err != nil {
				t.Fatalf("a busy connection was cut: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("timed out waiting for the held requests")
		}
		await(t, idle, "an idle connection")
	}
}
