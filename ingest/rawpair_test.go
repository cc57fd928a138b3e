package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

// rawCreate is the raw pair's jl_dedupe create in its fastest form, the
// one the dedupe store makes: one publish to the key's subject with the
// headers the store's create sends (no earlier message of the key
// expected, the store's per-key TTL, streams.DefaultDedupeTTL as the
// ingest's store has it), the ack read by hand (not the KV API's Create,
// with its key check, options and header building), so that the ingest
// is compared with the best possible client of the same server
// operations.
func rawCreate(nc *nats.Conn, names streams.Names) func(ctx context.Context, key string, value []byte) error {
	pre := "$KV." + names.BucketDedupe() + "."
	ttl := streams.DefaultDedupeTTL.String()
	ackPre := []byte(`{"stream":`)
	return func(ctx context.Context, key string, value []byte) error {
		m := &nats.Msg{Subject: pre + key, Data: value, Header: nats.Header{
			"Nats-Expected-Last-Subject-Sequence": {"0"},
			jetstream.MsgTTLHeader:                {ttl},
		}}
		ack, err := nc.RequestMsgWithContext(ctx, m)
		if err != nil {
			return fmt.Errorf("create %s: %w", key, err)
		}
		if !bytes.HasPrefix(ack.Data, ackPre) {
			return fmt.Errorf("create %s: %s", key, ack.Data)
		}
		return nil
	}
}

// webhookRecord is the jl_dedupe message the ingest stored for the
// GitHub delivery of body with id delivery: the raw pair's create writes
// a value of its size.
func webhookRecord(t testing.TB, js jetstream.JetStream, names streams.Names, body []byte, delivery string) *jetstream.RawStreamMsg {
	t.Helper()
	var p struct {
		Repository struct {
			FullName string `json:"full_name"`
		} `json:"repository"`
	}
	if err := json.Unmarshal(body, &p); err != nil || p.Repository.FullName == "" {
		t.Fatalf("the webhook's repository: %q, %v", p.Repository.FullName, err)
	}
	return storedDedupe(t, js, names, names.DedupeKey("https://github.com/"+p.Repository.FullName, delivery))
}

// storedDedupe is the last message of key in jl_dedupe.
func storedDedupe(t testing.TB, js jetstream.JetStream, names streams.Names, key string) *jetstream.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, streams.KVStream(names.BucketDedupe()))
	if err != nil {
		t.Fatal(err)
	}
	// On a cluster a replica behind the leader may answer the direct get
	// before it holds the record.
	var m *jetstream.RawStreamMsg
	natstest.WaitFor(t, 10*time.Second, func() error {
		var err error
		m, err = s.GetLastMsgForSubject(ctx, "$KV."+names.BucketDedupe()+"."+key)
		if err != nil {
			return fmt.Errorf("jl_dedupe %s: %w", key, err)
		}
		return nil
	})
	return m
}

// TestRawCreateWritesAsTheStore: the raw pair's create stores what the
// ingest's record of a webhook stores, less the time and the id: the
// same headers (the per-key TTL) and a value of the same size, so the
// benchmark's ratio compares the same server operations.
func TestRawCreateWritesAsTheStore(t *testing.T) {
	h := start(t, time.Minute)
	body := fixture(t, "pull_request/opened.payload.json")
	if r := post(t, h.url+"/webhooks/github", githubHeaders("pull_request", "bench-1", body), body); r.status != 202 {
		t.Fatalf("webhook: %d %s", r.status, r.raw)
	}
	ing := webhookRecord(t, h.js, h.names, body, "bench-1")
	key := h.names.DedupeKey("https://github.com/bench", "raw-1")
	if err := rawCreate(h.js.Conn(), h.names)(context.Background(), key, ing.Data); err != nil {
		t.Fatal(err)
	}
	raw := storedDedupe(t, h.js, h.names, key)
	for _, hdr := range []string{jetstream.MsgTTLHeader, "KV-Operation"} {
		if a, b := raw.Header.Get(hdr), ing.Header.Get(hdr); a != b {
			t.Errorf("header %s: raw create %q, the ingest's record %q", hdr, a, b)
		}
	}
	if len(ing.Data) < 64 || len(raw.Data) != len(ing.Data) {
		t.Errorf("value: raw create %d bytes, the ingest's record %d (%s)", len(raw.Data), len(ing.Data), ing.Data)
	}
}
