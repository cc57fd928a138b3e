package record

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// FuzzParseAck holds parseAck to encoding/json's reading of the same
// answer: whatever the hand-read form accepts, encoding/json reads as
// the same sequence of a stream, without an error.
func FuzzParseAck(f *testing.F) {
	for _, s := range []string{
		`{"stream":"KV_jl_sessions","seq":42}`,
		`{"stream":"KV_jl_sessions","seq":42,"duplicate":true}`,
		`{"stream":"KV_jl_sessions","domain":"hub","seq":7}`,
		`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"},"stream":"KV_x","seq":0}`,
		`{"stream":"","seq":1}`,
		`{"stream":"a","seq":01}`,
		`{"stream":"a","seq":18446744073709551616}`,
		`{"stream":"a\u0022","seq":1}`,
		`{"stream":"a","seq":1}x`,
		`{"stream":"a","seq":1} `,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		seq, ok := plainAck(b)
		var ref struct {
			Error  *jetstream.APIError `json:"error,omitempty"`
			Stream string              `json:"stream"`
			Seq    uint64              `json:"seq"`
		}
		refErr := json.Unmarshal(b, &ref)
		if ok && (refErr != nil || ref.Error != nil || ref.Stream == "" || ref.Seq != seq) {
			t.Fatalf("%q read by hand as %d; encoding/json: %+v, %v", b, seq, ref, refErr)
		}
		got, err := parseAck(b)
		switch {
		case refErr != nil || ref.Error == nil && ref.Stream == "":
			if !errors.Is(err, jetstream.ErrInvalidJSAck) {
				t.Fatalf("%q: %d, %v; want ErrInvalidJSAck", b, got, err)
			}
		case ref.Error != nil:
			var apiErr *jetstream.APIError
			if !errors.As(err, &apiErr) || *apiErr != *ref.Error {
				t.Fatalf("%q: %v; want %v", b, err, ref.Error)
			}
		case err != nil || got != ref.Seq:
			t.Fatalf("%q: %d, %v; want %d", b, got, err, ref.Seq)
		}
	})
}

// TestPublishReadsTheServersAnswers publishes through the store's
// publish to a real server: a landed write's answer is read by hand, and
// a refused conditional write's is the server's error, a conflict.
func TestPublishReadsTheServersAnswers(t *testing.T) {
	s, ref := testStore(t)
	ctx := context.Background()
	subject := "$KV." + s.bucket + "." + s.names.StateKey(ref)
	resp, err := s.nc.RequestMsg(&nats.Msg{Subject: subject, Data: []byte("x")}, writeAttemptTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := plainAck(resp.Data); !ok {
		t.Fatalf("the server's answer %s is not read by hand", resp.Data)
	}
	m := &nats.Msg{Subject: subject, Header: nats.Header{}, Data: []byte("y")}
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	if _, err := publish(ctx, s.nc, m); !IsConflict(err) {
		t.Fatalf("create over an existing key: %v, want a conflict", err)
	}
	seq, err := publish(ctx, s.nc, &nats.Msg{Subject: subject, Data: []byte("z")})
	if err != nil || seq == 0 {
		t.Fatalf("publish: %d, %v", seq, err)
	}
	if _, err := publish(ctx, s.nc, &nats.Msg{Subject: "nowhere.at.all", Data: []byte("z")}); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("publish where no stream listens: %v, want ErrNoStreamResponse", err)
	}
}
