package dedupe

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

// TestStoreFallsBackToTheKVAPI: a bucket the KV API reaches another way
// than the wire form (an API prefix, a client trace, no direct gets, a
// mirror of another bucket) is spoken to through the KV API, and Record,
// Seen and Claim work on it (but on the mirror, see there).
func TestStoreFallsBackToTheKVAPI(t *testing.T) {
	srv := natstest.RunServer(t)
	nc, js := natstest.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names := streams.Default()
	if _, err := streams.Provision(ctx, js, streams.Options{Names: names}); err != nil {
		t.Fatal(err)
	}
	const src = "https://github.com/octo/repo"
	works := func(t *testing.T, s *Store, id string) {
		t.Helper()
		if s.w != nil {
			t.Fatal("spoken to in the wire form")
		}
		if err := s.Record(ctx, src, id, []byte(`{"admitted":[]}`)); err != nil {
			t.Fatalf("record: %v", err)
		}
		natstest.WaitFor(t, 10*time.Second, func() error {
			_, seen, err := s.Seen(ctx, src, id)
			if err != nil {
				return err
			}
			if !seen {
				return errors.New("not seen yet")
			}
			return nil
		})
		if _, _, fresh, err := s.Claim(ctx, src, id, nil); err != nil || fresh {
			t.Fatalf("claim of a recorded id: fresh %v, %v", fresh, err)
		}
	}
	t.Run("api prefix", func(t *testing.T) {
		pjs, err := jetstream.NewWithAPIPrefix(nc, "$JS.API")
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(ctx, pjs, Config{Names: names})
		if err != nil {
			t.Fatal(err)
		}
		works(t, s, "prefix")
	})
	t.Run("client trace", func(t *testing.T) {
		tjs, err := jetstream.New(nc, jetstream.WithClientTrace(&jetstream.ClientTrace{}))
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(ctx, tjs, Config{Names: names})
		if err != nil {
			t.Fatal(err)
		}
		works(t, s, "trace")
	})
	t.Run("mirror", func(t *testing.T) {
		mirror, err := streams.NewNames("km")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: mirror.BucketDedupe(), Mirror: &jetstream.StreamSource{Name: names.BucketDedupe()}}); err != nil {
			t.Fatal(err)
		}
		s, err := New(ctx, js, Config{Names: mirror})
		if err != nil {
			t.Fatal(err)
		}
		// Only whether the wire form is left: the KV API itself reads a
		// mirror in the same account under the mirror's own subjects, so
		// it does not find what it wrote (to the origin).
		if s.w != nil {
			t.Fatal("a mirror is spoken to in the wire form")
		}
	})
	t.Run("no direct gets", func(t *testing.T) {
		st, err := js.Stream(ctx, streams.KVStream(names.BucketDedupe()))
		if err != nil {
			t.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		cfg.AllowDirect = false
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		s, err := New(ctx, js, Config{Names: names})
		if err != nil {
			t.Fatal(err)
		}
		works(t, s, "nodirect")
	})
}
