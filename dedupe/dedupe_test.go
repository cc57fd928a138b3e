package dedupe_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

func TestMsgIDNamesEventAndSubject(t *testing.T) {
	e := event.New()
	e.SetID("guid-1")
	e.SetSource("https://github.com/octo/repo")
	e.SetType("com.github.push")
	other := e.Clone()
	other.SetID("guid-2")
	tests := []struct {
		name string
		a, b string
		same bool
	}{
		{name: "same event, same subject", a: dedupe.MsgID(e, "jl.in.a.s"), b: dedupe.MsgID(e.Clone(), "jl.in.a.s"), same: true},
		{name: "same event, other agent", a: dedupe.MsgID(e, "jl.in.a.s"), b: dedupe.MsgID(e, "jl.in.b.s")},
		{name: "other event", a: dedupe.MsgID(e, "jl.in.a.s"), b: dedupe.MsgID(other, "jl.in.a.s")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if (tt.a == tt.b) != tt.same {
				t.Fatalf("%q vs %q: same=%v, want %v", tt.a, tt.b, tt.a == tt.b, tt.same)
			}
		})
	}
}

func TestStoreRemembersForTTL(t *testing.T) {
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s.ClientURL())
	ctx := context.Background()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	st, err := dedupe.New(ctx, js, dedupe.Config{Names: streams.Default(), TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const src, id = "https://github.com/octo/repo", "72d3162e-cc78-11e3-81ab-4c9367dc0958"
	if _, seen, err := st.Seen(ctx, src, id); err != nil || seen {
		t.Fatalf("seen before record: %v %v", seen, err)
	}
	if err := st.Record(ctx, src, id, []byte(`{"admitted":[]}`)); err != nil {
		t.Fatal(err)
	}
	// A second record (a concurrent delivery that lost the race) is fine.
	if err := st.Record(ctx, src, id, nil); err != nil {
		t.Fatalf("second record: %v", err)
	}
	ent, seen, err := st.Seen(ctx, src, id)
	if err != nil || !seen || string(ent.Outcome) != `{"admitted":[]}` {
		t.Fatalf("seen after record: %+v %v %v", ent, seen, err)
	}
	if _, seen, _ := st.Seen(ctx, "https://github.com/other/repo", id); seen {
		t.Fatal("same id from another source counted as seen")
	}
	// The key expires with its TTL; nothing announces that, so poll.
	natstest.WaitFor(t, 10*time.Second, func() error {
		if _, seen, err := st.Seen(ctx, src, id); err != nil || seen {
			return errors.New("still remembered")
		}
		return nil
	})
}

// A claim is made once: a second claim of the id returns the first's entry
// and revision, and an id recorded with one digest and recorded again with
// another is ErrConflict.
func TestClaimAndDigest(t *testing.T) {
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s.ClientURL())
	ctx := context.Background()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	st, err := dedupe.New(ctx, js, dedupe.Config{Names: streams.Default()})
	if err != nil {
		t.Fatal(err)
	}
	a := dedupe.Digest([]byte("steer"), []byte("focus"))
	if a == dedupe.Digest([]byte("steerf"), []byte("ocus")) {
		t.Fatal("digest does not separate its parts")
	}
	_, rev, fresh, err := st.Claim(ctx, "src", "k1", nil, dedupe.WithDigest(a))
	if err != nil || !fresh {
		t.Fatalf("first claim: fresh %v, %v", fresh, err)
	}
	prev, rev2, fresh, err := st.Claim(ctx, "src", "k1", nil, dedupe.WithDigest("other"))
	if err != nil || fresh || rev2 != rev || prev.Digest != a {
		t.Fatalf("second claim: %+v rev %d fresh %v, %v", prev, rev2, fresh, err)
	}
	if err := st.Amend(ctx, "src", "k1", rev, dedupe.Entry{Outcome: []byte(`{"seq":7}`), Digest: a}); err != nil {
		t.Fatal(err)
	}
	if err := st.Amend(ctx, "src", "k1", rev, dedupe.Entry{Outcome: []byte(`{"seq":8}`), Digest: a}); err == nil {
		t.Fatal("an amend at a stale revision was written")
	}
	ent, ok, err := st.Seen(ctx, "src", "k1")
	if err != nil || !ok || string(ent.Outcome) != `{"seq":7}` || ent.Digest != a {
		t.Fatalf("after the amend: %+v %v %v", ent, ok, err)
	}
	if err := st.Record(ctx, "src", "k2", []byte(`{}`), dedupe.WithDigest(a)); err != nil {
		t.Fatal(err)
	}
	if err := st.Record(ctx, "src", "k2", []byte(`{}`), dedupe.WithDigest(a)); err != nil {
		t.Fatalf("the same request recorded again: %v", err)
	}
	if err := st.Record(ctx, "src", "k2", []byte(`{}`), dedupe.WithDigest("b")); !errors.Is(err, dedupe.ErrConflict) {
		t.Fatalf("another request under the id: %v, want ErrConflict", err)
	}
}

// TestKeyNamesWhatSourceAndIDName: a lookup or record by Key is one by
// the source and id it was made of, on a real server, and no other.
func TestKeyNamesWhatSourceAndIDName(t *testing.T) {
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s.ClientURL())
	ctx := context.Background()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	st, err := dedupe.New(ctx, js, dedupe.Config{Names: streams.Default()})
	if err != nil {
		t.Fatal(err)
	}
	const src = "https://github.com/octo/repo"
	k := st.Key(src, "d1")
	if _, seen, err := st.SeenKey(ctx, k); err != nil || seen {
		t.Fatalf("before the record: seen %v, %v", seen, err)
	}
	if err := st.RecordKey(ctx, k, []byte(`{"id":"d1"}`), dedupe.WithDigest("a")); err != nil {
		t.Fatal(err)
	}
	if ent, seen, err := st.Seen(ctx, src, "d1"); err != nil || !seen || string(ent.Outcome) != `{"id":"d1"}` || ent.Digest != "a" {
		t.Fatalf("Seen of what RecordKey recorded: %+v %v %v", ent, seen, err)
	}
	if err := st.Record(ctx, src, "d1", nil, dedupe.WithDigest("b")); !errors.Is(err, dedupe.ErrConflict) {
		t.Fatalf("Record of another request under the id RecordKey recorded: %v, want ErrConflict", err)
	}
	if err := st.RecordKey(ctx, st.Key(src, "d1"), nil, dedupe.WithDigest("b")); !errors.Is(err, dedupe.ErrConflict) {
		t.Fatalf("RecordKey of another request under the id: %v, want ErrConflict", err)
	}
	if err := st.Record(ctx, src, "d2", nil); err != nil {
		t.Fatal(err)
	}
	if _, seen, err := st.SeenKey(ctx, st.Key(src, "d2")); err != nil || !seen {
		t.Fatalf("SeenKey of what Record recorded: seen %v, %v", seen, err)
	}
	for _, other := range []dedupe.Key{st.Key(src, "d3"), st.Key("https://github.com/octo/other", "d1")} {
		if _, seen, err := st.SeenKey(ctx, other); err != nil || seen {
			t.Fatalf("SeenKey of another event: seen %v, %v", seen, err)
		}
	}
}

// TestKeysOfRecordsAlreadyStored: the keys are those records already in
// a bucket were written under, so each is found by Seen and by a Key, and
// a Record or Claim of its event is a duplicate, not a second record.
func TestKeysOfRecordsAlreadyStored(t *testing.T) {
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s.ClientURL())
	ctx := context.Background()
	names := streams.Default()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	st, err := dedupe.New(ctx, js, dedupe.Config{Names: names})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, names.BucketDedupe())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ source, id, key string }{
		{"https://github.com/octo/repo", "72d3162e-cc78-11e3-81ab-4c9367dc0958", "https=3A=2F=2Fgithub=2Ecom=2Focto=2Frepo.9514e6751b793abb198c32e333740b61"},
		{"https://example.com/" + strings.Repeat("a", 82), "d1", "hb6ecf7a3d081ec5d.8b53639f152c8fc6ef30802fde462ba0"},
		{"/sources/é x", "id 2", "=2Fsources=2F=C3=A9=20x.cb4aec889ac858d52812a44cc47d1c10"},
	} {
		if _, err := kv.Create(ctx, c.key, []byte(`{"at":"2026-12-01T00:00:00Z","outcome":{"id":"stored"},"digest":"a"}`)); err != nil {
			t.Fatal(err)
		}
		for how, seen := range map[string]func() (dedupe.Entry, bool, error){
			"Seen":    func() (dedupe.Entry, bool, error) { return st.Seen(ctx, c.source, c.id) },
			"SeenKey": func() (dedupe.Entry, bool, error) { return st.SeenKey(ctx, st.Key(c.source, c.id)) },
		} {
			if ent, ok, err := seen(); err != nil || !ok || string(ent.Outcome) != `{"id":"stored"}` {
				t.Fatalf("%s(%q, %q) of the record at %s: %+v %v %v", how, c.source, c.id, c.key, ent, ok, err)
			}
		}
		if err := st.RecordKey(ctx, st.Key(c.source, c.id), nil, dedupe.WithDigest("b")); !errors.Is(err, dedupe.ErrConflict) {
			t.Fatalf("RecordKey(%q, %q) of another request than the record at %s: %v, want ErrConflict", c.source, c.id, c.key, err)
		}
		if _, _, fresh, err := st.Claim(ctx, c.source, c.id, nil); err != nil || fresh {
			t.Fatalf("Claim(%q, %q) of the event recorded at %s: fresh %v, %v", c.source, c.id, c.key, fresh, err)
		}
	}
}
