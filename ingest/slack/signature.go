package slack

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Headers of a Slack request.
const (
	HeaderSignature = "X-Slack-Signature"
	HeaderTimestamp = "X-Slack-Request-Timestamp"
	HeaderRetryNum  = "X-Slack-Retry-Num"
)

// Sign returns the X-Slack-Signature of body sent at timestamp (the
// X-Slack-Request-Timestamp value, Unix seconds): "v0=" and the hex
// HMAC-SHA256 of "v0:<timestamp>:<body>" keyed with the signing secret.
func Sign(secret []byte, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("v0:" + timestamp + ":"))
	mac.Write(body)
	return "v0=" + hex.EncodeToString(mac.Sum(nil))
}

// Verify reports, in constant time, whether signature is Sign(secret,
// timestamp, body). It does not check the timestamp's age.
func Verify(secret []byte, timestamp string, body []byte, signature string) bool {
	got, ok := strings.CutPrefix(signature, "v0=")
	if !ok || len(got) != sha256.Size*2 {
		return false
	}
	sig, err := hex.DecodeString(got)
	if err != nil {
		return false
	}
	want, _ := hex.DecodeString(strings.TrimPrefix(Sign(secret, timestamp, body), "v0="))
	return hmac.Equal(sig, want)
}
