package gate_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/ingest/gate"
)

func TestPoolLimits(t *testing.T) {
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	p, err := gate.NewPool("test", gate.Limits{Requests: 4, Bytes: 100, PerAddrRequests: 2, PerAddrBytes: 60}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r1, err := p.Take(a, 10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Take(a, 51); !errors.Is(err, gate.ErrBusy) {
		t.Fatalf("over the address's bytes: %v", err)
	}
	r2, err := p.Take(a, 50)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Take(a, 0); !errors.Is(err, gate.ErrBusy) || !strings.Contains(err.Error(), "from 192.0.2.1") {
		t.Fatalf("over the address's requests: %v", err)
	}
	// Another address has its own share, within the total.
	r3, err := p.Take(b, 40)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Take(b, 1); !errors.Is(err, gate.ErrBusy) {
		t.Fatalf("over the total bytes: %v", err)
	}
	r1()
	r1() // a second release changes nothing
	if req, by, areq, aby := p.InUse(a); req != 2 || by != 90 || areq != 1 || aby != 50 {
		t.Fatalf("in use after one release: %d requests %d bytes, address %d %d", req, by, areq, aby)
	}
	r2()
	r3()
	if req, by, _, _ := p.InUse(a); req != 0 || by != 0 {
		t.Fatalf("in use after every release: %d requests %d bytes", req, by)
	}
}

// An IPv6 sender is counted by its /64, which one subscriber usually
// holds whole.
func TestPoolCountsIPv6BySlash64(t *testing.T) {
	p, err := gate.NewPool("test", gate.Limits{Requests: 10, Bytes: 100, PerAddrRequests: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Take(netip.MustParseAddr("2001:db8:1:2::1"), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Take(netip.MustParseAddr("2001:db8:1:2:ffff::9"), 1); !errors.Is(err, gate.ErrBusy) {
		t.Fatalf("same /64: %v", err)
	}
	if _, err := p.Take(netip.MustParseAddr("2001:db8:1:3::1"), 1); err != nil {
		t.Fatalf("another /64: %v", err)
	}
}

func TestNetworks(t *testing.T) {
	tests := []struct {
		name, in string
		allow    []string
		deny     []string
		err      string
	}{
		{name: "lines", in: "# GitHub\n192.30.252.0/22\n\n2a0a:a440::/29 # v6\n140.82.115.5\n",
			allow: []string{"192.30.252.1", "192.30.255.255", "2a0a:a440::1", "140.82.115.5", "::ffff:192.30.252.9"},
			deny:  []string{"192.30.251.255", "140.82.115.6", "2a0a:a448::1"}},
		{name: "github meta", in: `{"verifiable_password_authentication": false, "hooks": ["192.30.252.0/22", "185.199.108.0/22"], "web": ["1.2.3.4/32"]}`,
			allow: []string{"185.199.111.1"}, deny: []string{"1.2.3.4"}},
		{name: "bad line", in: "192.30.252.0/22\nnot-a-network\n", err: "networks:2: network \"not-a-network\""},
		{name: "empty", in: "# nothing\n", err: "no networks"},
		{name: "meta without hooks", in: `{"web": []}`, err: "no networks"},
		{name: "trailing data", in: `{"hooks": ["10.0.0.0/8"]} {}`, err: "data after"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := gate.ParseNetworks("networks", []byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range tt.allow {
				if !n.Allows(netip.MustParseAddr(a)) {
					t.Errorf("%s refused", a)
				}
			}
			for _, a := range tt.deny {
				if n.Allows(netip.MustParseAddr(a)) {
					t.Errorf("%s allowed", a)
				}
			}
		})
	}
	var zero gate.Networks
	if !zero.Allows(netip.MustParseAddr("203.0.113.7")) {
		t.Fatal("the zero Networks refuses an address")
	}
}

// serve runs a handler that admits and reads bodies through g.
func serve(t *testing.T, g *gate.Gate, limit int64) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		adm, err := g.Admit(g.Unverified(), r, limit)
		if err != nil {
			gate.Unread(w)
			http.Error(w, err.Error(), gate.Status(err))
			return
		}
		defer adm.Release()
		body, err := adm.ReadBody(w, r, limit, time.Now().Add(time.Minute))
		if err != nil {
			http.Error(w, err.Error(), gate.Status(err))
			return
		}
		fmt.Fprintf(w, "%d bytes", len(body))
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// A body that arrives at a fair rate is read whole; one that trickles is
// cut with 408 once the grace and the minimum rate allow no more, and its
// connection closed.
func TestReadBodyRate(t *testing.T) {
	g, err := gate.New(gate.Config{MinRate: 64 << 10, Grace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, g, 1<<20)
	body := strings.Repeat("x", 300<<10)
	resp, err := http.Post("http://"+addr+"/", "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "307200 bytes" {
		t.Fatalf("a fast body: %d %s", resp.StatusCode, b)
	}

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nabc")
	answered := make(chan *http.Response, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			answered <- nil
			return
		}
		answered <- resp
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case resp := <-answered:
			if resp == nil || resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
				t.Fatalf("a trickle: %+v, want 408 and the connection closed", resp)
			}
			return
		case <-tick.C:
			_, _ = conn.Write([]byte("y")) // 20 bytes a second
		case <-time.After(30 * time.Second):
			t.Fatal("a trickling body was never cut")
		}
	}
}

// A request refused before its body is read is answered at once, with the
// connection closed, though its body never comes.
func TestRefusedBeforeBodyClosesTheConnection(t *testing.T) {
	g, err := gate.New(gate.Config{Unverified: gate.Limits{Requests: 1, Bytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, g, 1<<20)
	release, err := g.Unverified().Take(netip.MustParseAddr("192.0.2.1"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab")
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a refused request: %v", err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close {
		t.Fatalf("answer %d (close %v), want 503 and the connection closed", resp.StatusCode, resp.Close)
	}
}

// A body is reused for another request's only when its request recycled
// it: one released without Recycle keeps its bytes however many bodies
// are read after it.
func TestReadBodyRecycle(t *testing.T) {
	g, err := gate.New(gate.Config{})
	if err != nil {
		t.Fatal(err)
	}
	read := func(fill byte) (*gate.Admission, []byte) {
		t.Helper()
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(strings.Repeat(string(fill), 4000)))
		adm, err := g.Admit(g.Unverified(), r, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		body, err := adm.ReadBody(httptest.NewRecorder(), r, 1<<20, time.Now().Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return adm, body
	}
	kept, first := read('a')
	kept.Release()
	kept.Release()
	for i := range 20 {
		fill := byte('b' + i)
		adm, body := read(fill)
		if strings.Trim(string(body), string(fill)) != "" || len(body) != 4000 {
			t.Fatalf("body %d: %q…, want 4000 × %q", i, body[:10], fill)
		}
		adm.Recycle()
		adm.Release()
	}
	if strings.Trim(string(first), "a") != "" {
		t.Fatalf("a body released without Recycle was reused: %q…", first[:10])
	}
}
