package ingest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// streamedVerify is the signature check as it was before the MACs were
// reused: the hex decoded to a new slice, a new MAC per body.
func streamedVerify(secret, body []byte, sig string) bool {
	hexSig, ok := strings.CutPrefix(sig, "sha256=")
	if !ok || len(secret) == 0 {
		return false
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
}

// FuzzVerifySignature holds VerifySignature and the server's reused MACs,
// whatever body they last summed, to the check that made a MAC per body.
func FuzzVerifySignature(f *testing.F) {
	secret, body := []byte("It's a Secret to Everybody"), []byte("Hello, World!")
	f.Add(secret, body, Sign(secret, body), []byte("an earlier body"))
	f.Add(secret, body, strings.ToUpper(Sign(secret, body)[7:]), []byte{})
	f.Add(secret, body, "sha256="+strings.ToUpper(Sign(secret, body)[7:]), body)
	f.Add(secret, body, Sign(secret, body)[:40], body)
	f.Add(secret, body, "sha256=zz", body)
	f.Add([]byte{}, body, Sign(nil, body), body)
	f.Add(secret, []byte{}, Sign(secret, nil), body)
	f.Fuzz(func(t *testing.T, secret, body []byte, sig string, earlier []byte) {
		want := streamedVerify(secret, body, sig)
		if got := VerifySignature(secret, body, sig); got != want {
			t.Fatalf("VerifySignature(%q, %q, %q) = %v, want %v", secret, body, sig, got, want)
		}
		var macs signatureMACs
		macs.verify(secret, earlier, Sign(secret, earlier))
		macs.verify(append([]byte("another "), secret...), body, sig)
		for i := range 2 {
			if got := macs.verify(secret, body, sig); got != want {
				t.Fatalf("verify #%d after %q (%q, %q, %q) = %v, want %v", i, earlier, secret, body, sig, got, want)
			}
		}
		if len(secret) > 0 && !macs.verify(secret, body, Sign(secret, body)) {
			t.Fatalf("verify refuses the signature Sign wrote for %q under %q", body, secret)
		}
	})
}
