package ingest

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jetloop/jetloop/events"
)

// FuzzGitHubReceiver feeds the GitHub receiver what anyone on the
// internet can send it: any event name, delivery, signature header and
// body, signed with the right secret or not. It never panics; an unsigned
// or wrongly signed delivery is refused as unauthorized whatever its body;
// every error is one the receiver maps to a 4xx; and what it accepts can be
// published.
func FuzzGitHubReceiver(f *testing.F) {
	f.Add("pull_request", "72d3162e-cc78-11e3-81ab-4c9367dc0958", "", true, []byte(`{"action":"opened","number":2,"pull_request":{"number":2},"repository":{"full_name":"o/r"}}`))
	f.Add("ping", "d", "", true, []byte(`{"zen":"x"}`))
	f.Add("push", "d", "sha256=00", false, []byte(`{"ref":"refs/heads/main"}`))
	f.Add("push", "d", "sha1=abc", false, []byte(`{}`))
	f.Add("issues", "d", "sha256=", false, []byte(``))
	secret := []byte("fuzz-secret")
	s := &Server{cfg: Config{GitHubSecret: secret}}
	s.cfg.setDefaults()
	f.Fuzz(func(t *testing.T, name, delivery, sig string, signed bool, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/webhooks/github", bytes.NewReader(body))
		r.Header.Set(HeaderGitHubEvent, name)
		r.Header.Set(HeaderGitHubDelivery, delivery)
		if signed {
			sig = Sign(secret, body)
		}
		r.Header.Set(HeaderGitHubSignature, sig)
		d, ans, err := s.github(r, body)
		if !signed && sig != Sign(secret, body) {
			if !errors.Is(err, ErrUnauthorized) {
				t.Fatalf("signature %q for a body it does not sign: got %v, want ErrUnauthorized", sig, err)
			}
			return
		}
		if err != nil {
			if !errors.Is(err, ErrBadRequest) && !errors.Is(err, ErrUnauthorized) {
				t.Fatalf("error %v is neither ErrBadRequest nor ErrUnauthorized", err)
			}
			return
		}
		if ans != nil {
			if ans.status/100 != 2 {
				t.Fatalf("immediate answer %d is not 2xx", ans.status)
			}
			return
		}
		if d.Event.ID() != delivery {
			t.Fatalf("event id %q is not the delivery %q", d.Event.ID(), delivery)
		}
		if _, err := events.ToMsg("jl.in.a.s", d.Event); err != nil {
			t.Fatalf("accepted a delivery that cannot be published: %v", err)
		}
	})
}
