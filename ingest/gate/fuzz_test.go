package gate_test

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/jetloop/jetloop/ingest/gate"
)

// FuzzParseNetworks: any file is refused with an error naming it, or read
// as at least one network, each of which allows its own first address.
func FuzzParseNetworks(f *testing.F) {
	f.Add([]byte("192.30.252.0/22\n# comment\n2a0a:a440::/29\n"))
	f.Add([]byte(`{"hooks":["192.30.252.0/22","2a0a:a440::/29"]}`))
	f.Add([]byte("10.0.0.1\n::ffff:10.0.0.0/104\n"))
	f.Add([]byte("{}"))
	f.Add([]byte("300.1.1.1/8"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := gate.ParseNetworks("f", b)
		if err != nil {
			if n.Len() != 0 {
				t.Fatalf("error %v with %d networks", err, n.Len())
			}
			return
		}
		if n.Len() == 0 {
			t.Fatal("no error and no networks: every sender would be refused")
		}
	})
}

// FuzzAdmit: any remote address, declared length and body is admitted and
// read whole within the limit, or refused with an error of this package,
// and the pool holds nothing once the request is done.
func FuzzAdmit(f *testing.F) {
	f.Add("192.0.2.1:1234", int64(5), []byte("hello"))
	f.Add("[2001:db8::1%eth0]:80", int64(-1), []byte("x"))
	f.Add("not an address", int64(100), []byte(""))
	f.Add("192.0.2.1:1", int64(1<<40), []byte("x"))
	g, err := gate.New(gate.Config{Unverified: gate.Limits{Requests: 4, Bytes: 1 << 20, PerAddrRequests: 2, PerAddrBytes: 1 << 20}})
	if err != nil {
		f.Fatal(err)
	}
	const limit = 1 << 10
	f.Fuzz(func(t *testing.T, remote string, length int64, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		r.RemoteAddr = remote
		r.ContentLength = length
		if length >= 0 && length != int64(len(body)) {
			r.ContentLength = -1 // a declared length the body keeps is what a server sees
		}
		defer func() {
			if req, by, _, _ := g.Unverified().InUse(netip.Addr{}); req != 0 || by != 0 {
				t.Fatalf("pool holds %d requests, %d bytes after the request", req, by)
			}
		}()
		adm, err := g.Admit(g.Unverified(), r, limit)
		if err != nil {
			if gate.Status(err) == 0 {
				t.Fatalf("admit: %v has no status", err)
			}
			return
		}
		defer adm.Release()
		w := httptest.NewRecorder()
		got, err := adm.ReadBody(w, r, limit, time.Now().Add(time.Minute))
		switch {
		case len(body) > limit:
			if !errors.Is(err, gate.ErrTooLarge) {
				t.Fatalf("body of %d bytes over %d: %v", len(body), limit, err)
			}
		case err != nil:
			t.Fatalf("read: %v", err)
		case !bytes.Equal(got, body):
			t.Fatalf("read %d bytes of %d", len(got), len(body))
		}
	})
}
