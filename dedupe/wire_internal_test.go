package dedupe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

// kvKey is the key check of jetstream's KV API (kv.go's validKeyRe and
// keyValid), which the store does not repeat for the keys names builds.
var kvKey = regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`)

func validKVKey(k string) bool {
	return k != "" && k[0] != '.' && k[len(k)-1] != '.' && kvKey.MatchString(k)
}

// FuzzDedupeKeyIsAValidKVKey: every key names builds passes the KV API's
// check, so the store can leave it out.
func FuzzDedupeKeyIsAValidKVKey(f *testing.F) {
	f.Add("https://github.com/octo/repo", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	f.Add("", "")
	f.Add(".", "..")
	f.Add(strings.Repeat("x", 300), "id")
	f.Add("a b*c>\x00\xff", "\n")
	f.Fuzz(func(t *testing.T, source, id string) {
		if k := streams.Default().DedupeKey(source, id); !validKVKey(k) {
			t.Fatalf("DedupeKey(%q, %q) = %q, not a valid KV key", source, id, k)
		}
	})
}

// pair is two deployments' dedupe buckets on one server, alike in all but
// their names: a speaks the wire form, b the KV API. The same operations
// on both must answer alike.
type pair struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	a, b   *Store
	bw     *wire // b's bucket in the wire form, to compare with b.kv
	poll   bool  // reads may reach a lagging replica: retry until they agree
	prefix [2]string
}

func newPair(t *testing.T, nc *nats.Conn, js jetstream.JetStream, replicas int, poll bool) *pair {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := &pair{nc: nc, js: js, poll: poll, prefix: [2]string{"ka", "kb"}}
	for i, pre := range p.prefix {
		names, err := streams.NewNames(pre)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := streams.Provision(ctx, js, streams.Options{Names: names, Replicas: replicas}); err != nil {
			t.Fatal(err)
		}
		s, err := New(ctx, js, Config{Names: names, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if s.w == nil {
			t.Fatalf("bucket %s is not spoken to in the wire form", names.BucketDedupe())
		}
		if i == 0 {
			p.a = s
		} else {
			p.bw, s.w = s.w, nil
			p.b = s
		}
	}
	return p
}

// gotGet is what a lookup answered, for comparing.
func gotGet(e entry, err error, created bool) string {
	s := fmt.Sprintf("value %q rev %d err %v notfound %v", e.value, e.revision, err, errors.Is(err, jetstream.ErrKeyNotFound))
	if created {
		s += " created " + e.created.String()
	}
	return s
}

// kvGet is what kv.Get answers, in the form of gotGet.
func kvGet(ctx context.Context, kv jetstream.KeyValue, key string) string {
	e, err := kv.Get(ctx, key)
	if err != nil {
		return gotGet(entry{}, err, true)
	}
	return gotGet(entry{value: e.Value(), revision: e.Revision(), created: e.Created()}, nil, true)
}

func wireGet(ctx context.Context, w *wire, key string) string {
	e, _, err := w.get(ctx, key)
	if err != nil {
		e = entry{}
	}
	return gotGet(e, err, true)
}

// seen is what Seen answered, less the time of the record, which the two
// buckets' records do not share.
func seen(ctx context.Context, s *Store, source, id string) string {
	e, ok, err := s.Seen(ctx, source, id)
	return fmt.Sprintf("seen %v outcome %s digest %q err %v", ok, e.Outcome, e.Digest, err)
}

// agree checks that every lookup of key answers alike: the wire form and
// kv.Get of each bucket exactly, Seen of the two buckets but for the
// record's time.
func (p *pair) agree(t *testing.T, source, id string) {
	t.Helper()
	ctx := context.Background()
	key := p.a.names.DedupeKey(source, id)
	check := func() error {
		if w, k := wireGet(ctx, p.a.w, key), kvGet(ctx, p.a.kv, key); w != k {
			return fmt.Errorf("bucket a: wire get %s, kv.Get %s", w, k)
		}
		if w, k := wireGet(ctx, p.bw, key), kvGet(ctx, p.b.kv, key); w != k {
			return fmt.Errorf("bucket b: wire get %s, kv.Get %s", w, k)
		}
		if a, b := seen(ctx, p.a, source, id), seen(ctx, p.b, source, id); a != b {
			return fmt.Errorf("Seen: wire %s, kv %s", a, b)
		}
		return nil
	}
	if !p.poll {
		if err := check(); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return
	}
	natstest.WaitFor(t, 10*time.Second, check)
}

// both runs op on both buckets and requires the same answer.
func (p *pair) both(t *testing.T, what string, op func(s *Store) string) {
	t.Helper()
	if a, b := op(p.a), op(p.b); a != b {
		t.Fatalf("%s: wire form %s, KV API %s", what, a, b)
	}
}

// publish stores a message of key with headers in s's bucket, as another
// writer of the bucket could.
func (p *pair) publish(t *testing.T, s *Store, key string, data []byte, hdr nats.Header, opts ...jetstream.PublishOpt) {
	t.Helper()
	m := &nats.Msg{Subject: "$KV." + s.names.BucketDedupe() + "." + key, Data: data, Header: hdr}
	if _, err := p.js.PublishMsg(context.Background(), m, opts...); err != nil {
		t.Fatalf("publish %s: %v", m.Subject, err)
	}
}

// op is one step of a history of the buckets.
type op struct {
	kind   string
	id     string
	digest string
}

func (p *pair) apply(t *testing.T, o op) {
	t.Helper()
	ctx := context.Background()
	const src = "https://github.com/octo/repo"
	key := p.a.names.DedupeKey(src, o.id)
	switch o.kind {
	case "record":
		p.both(t, fmt.Sprintf("Record %s digest %q", o.id, o.digest), func(s *Store) string {
			var opts []RecordOption
			if o.digest != "" {
				opts = append(opts, WithDigest(o.digest))
			}
			err := s.Record(ctx, src, o.id, []byte(`{"admitted":[]}`), opts...)
			return fmt.Sprintf("%v conflict %v", err, errors.Is(err, ErrConflict))
		})
	case "claim":
		p.both(t, "Claim "+o.id, func(s *Store) string {
			e, rev, fresh, err := s.Claim(ctx, src, o.id, []byte(`{"seq":1}`), WithDigest(o.digest))
			return fmt.Sprintf("outcome %s digest %q rev %d fresh %v err %v", e.Outcome, e.Digest, rev, fresh, err)
		})
	case "create":
		// The store's create and the KV API's Create, compared on
		// their own: revision and error.
		p.both(t, "create "+o.id, func(s *Store) string {
			rev, err := s.create(ctx, key, []byte("v"))
			return fmt.Sprintf("rev %d err %v exists %v", rev, err, errors.Is(err, jetstream.ErrKeyExists))
		})
	case "delete":
		p.both(t, "Delete "+o.id, func(s *Store) string { return fmt.Sprint(s.kv.Delete(ctx, key)) })
	case "purge":
		p.both(t, "Purge "+o.id, func(s *Store) string { return fmt.Sprint(s.kv.Purge(ctx, key)) })
	case "unreadable":
		p.both(t, "Put "+o.id, func(s *Store) string {
			_, err := s.kv.Put(ctx, key, []byte("not json"))
			return fmt.Sprint(err)
		})
	case "empty":
		p.both(t, "Put empty "+o.id, func(s *Store) string {
			_, err := s.kv.Put(ctx, key, nil)
			return fmt.Sprint(err)
		})
	case "marker-remove", "marker-purge", "marker-maxage", "op-other":
		hdr := nats.Header{}
		switch o.kind {
		case "marker-remove":
			hdr.Set(jetstream.MarkerReasonHeader, "Remove")
		case "marker-purge":
			hdr.Set(jetstream.MarkerReasonHeader, "Purge")
		case "marker-maxage":
			hdr.Set(jetstream.MarkerReasonHeader, "MaxAge")
		default:
			hdr.Set("KV-Operation", "COPY")
		}
		p.publish(t, p.a, key, nil, hdr)
		p.publish(t, p.b, key, nil, hdr)
	case "expire":
		// A value that expires: the server leaves a MaxAge marker.
		p.publish(t, p.a, key, []byte(`{"at":"2026-12-01T00:00:00Z"}`), nil, jetstream.WithMsgTTL(time.Second))
		p.publish(t, p.b, key, []byte(`{"at":"2026-12-01T00:00:00Z"}`), nil, jetstream.WithMsgTTL(time.Second))
		natstest.WaitFor(t, 15*time.Second, func() error {
			for _, s := range []*Store{p.a, p.b} {
				if _, err := s.kv.Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
					return fmt.Errorf("%s: %v, not yet expired", s.names.BucketDedupe(), err)
				}
			}
			return nil
		})
	default:
		t.Fatalf("unknown op %q", o.kind)
	}
	p.agree(t, src, o.id)
}

// forms is a history that reaches every answer of a lookup and of a
// create the server gives: none, a value, a delete, a purge, the markers,
// an expired value's marker, another operation, an unreadable and an
// empty value, and creates on each.
var forms = []op{
	{kind: "claim", id: "k0"}, // nothing there yet
	{kind: "record", id: "k1", digest: "d1"},
	{kind: "record", id: "k1", digest: "d1"}, // the same request again
	{kind: "record", id: "k1", digest: "d2"}, // conflict
	{kind: "claim", id: "k1", digest: "d2"},  // claimed before
	{kind: "create", id: "k1"},               // exists
	{kind: "delete", id: "k1"},
	{kind: "create", id: "k1"}, // on the delete
	{kind: "purge", id: "k1"},
	{kind: "record", id: "k1"}, // on the purge
	{kind: "marker-remove", id: "k2"},
	{kind: "claim", id: "k2"},
	{kind: "marker-purge", id: "k3"},
	{kind: "record", id: "k3"},
	{kind: "marker-maxage", id: "k3"},
	{kind: "create", id: "k3"},
	{kind: "op-other", id: "k4"}, // an operation the KV API takes for a value
	{kind: "create", id: "k4"},
	{kind: "unreadable", id: "k5"},
	{kind: "record", id: "k5", digest: "d1"},
	{kind: "empty", id: "k6"},
	{kind: "claim", id: "k6"},
	{kind: "expire", id: "k7"},
	{kind: "record", id: "k7"},
}

var kinds = []string{"record", "claim", "create", "delete", "purge", "unreadable", "empty", "marker-remove", "marker-purge", "op-other"}

// randomHistory is n random steps over a few ids; seed makes it
// repeatable.
func randomHistory(seed uint64, n int) []op {
	r := rand.New(rand.NewPCG(seed, 1))
	h := make([]op, n)
	for i := range h {
		h[i] = op{kind: kinds[r.IntN(len(kinds))], id: fmt.Sprintf("r%d", r.IntN(4)), digest: []string{"", "d1", "d2"}[r.IntN(3)]}
	}
	return h
}

// TestWireAnswersAsKVAPI: on one server and on a three-node cluster with
// buckets replicated three times, the lookup and the create in the wire
// form answer every form of the bucket's state as jetstream's KV API
// does (Get, Create with KeyTTL), and Seen, Record and Claim answer alike
// over a fixed history that reaches every form and a random one.
func TestWireAnswersAsKVAPI(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		s := natstest.RunServer(t)
		nc, js := natstest.Connect(t, s.ClientURL())
		p := newPair(t, nc, js, 1, false)
		for _, o := range forms {
			p.apply(t, o)
		}
		seed := uint64(time.Now().UnixNano())
		t.Logf("random history seed %d", seed)
		for _, o := range randomHistory(seed, 300) {
			p.apply(t, o)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		c := natstest.RunCluster(t, 3)
		nc, js := natstest.Connect(t, c.URLs())
		p := newPair(t, nc, js, 3, true)
		for _, o := range forms {
			p.apply(t, o)
		}
		seed := uint64(time.Now().UnixNano())
		t.Logf("random history seed %d", seed)
		for _, o := range randomHistory(seed, 80) {
			p.apply(t, o)
		}
	})
}

// TestWireReadsEveryAnswerAsKVAPI answers the lookup and the create from a
// responder in place of the bucket's stream with every form of answer,
// the server's and malformed ones, and requires the wire form to read
// each as jetstream's KV API reads it.
func TestWireReadsEveryAnswerAsKVAPI(t *testing.T) {
	srv := natstest.RunServer(t)
	nc, js := natstest.Connect(t, srv.ClientURL())
	p := newPair(t, nc, js, 1, false)
	s := p.a
	ctx := context.Background()
	if err := js.DeleteStream(ctx, streams.KVStream(s.names.BucketDedupe())); err != nil {
		t.Fatal(err)
	}
	key := s.names.DedupeKey("src", "id")
	// No stream and no responder: no responders, retried for a publish.
	if w, k := wireGet(ctx, s.w, key), kvGet(ctx, s.kv, key); w != k || !strings.Contains(w, "no responders") {
		t.Fatalf("no responders: wire %s, kv %s", w, k)
	}
	create := func() (string, string) {
		rev, err := s.w.create(ctx, key, []byte("v"))
		w := fmt.Sprintf("rev %d err %v exists %v", rev, err, errors.Is(err, jetstream.ErrKeyExists))
		rev, err = s.kv.Create(ctx, key, []byte("v"), jetstream.KeyTTL(s.ttl))
		return w, fmt.Sprintf("rev %d err %v exists %v", rev, err, errors.Is(err, jetstream.ErrKeyExists))
	}
	if w, k := create(); w != k {
		t.Fatalf("no responders: wire %s, kv %s", w, k)
	}

	type answer struct {
		hdr  nats.Header
		data string
	}
	var get, ack answer
	var seenHdr []nats.Header
	full := func(extra ...string) nats.Header {
		h := nats.Header{"Nats-Stream": {"KV_x"}, "Nats-Subject": {"$KV.x." + key}, "Nats-Sequence": {"9"}, "Nats-Time-Stamp": {"2026-12-01T10:00:00.123456789Z"}}
		for i := 0; i+1 < len(extra); i += 2 {
			h[extra[i]] = []string{extra[i+1]}
		}
		return h
	}
	gs, err := nc.Subscribe(s.w.getPre+">", func(m *nats.Msg) {
		_ = m.RespondMsg(&nats.Msg{Header: get.hdr, Data: []byte(get.data)})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Unsubscribe()
	ps, err := nc.Subscribe(s.w.putPre+">", func(m *nats.Msg) {
		seenHdr = append(seenHdr, m.Header)
		_ = m.RespondMsg(&nats.Msg{Header: ack.hdr, Data: []byte(ack.data)})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	gets := []answer{
		{hdr: nats.Header{"Status": {"404"}, "Description": {"Message Not Found"}}},
		{hdr: nats.Header{"Status": {"408"}, "Description": {"Bad Request"}}},
		{hdr: nats.Header{"Status": {"412"}}},
		{hdr: nats.Header{"Status": {"404"}}, data: "x"},
		{data: "no headers"},
		{hdr: nats.Header{"Nats-Subject": {"s"}}, data: "x"},
		{hdr: nats.Header{"Nats-Stream": {"KV_x"}}, data: "x"},
		{hdr: nats.Header{"Nats-Stream": {"KV_x"}, "Nats-Sequence": {"x"}}, data: "x"},
		{hdr: nats.Header{"Nats-Stream": {"KV_x"}, "Nats-Sequence": {"3"}}, data: "x"},
		{hdr: nats.Header{"Nats-Stream": {"KV_x"}, "Nats-Sequence": {"3"}, "Nats-Time-Stamp": {"yesterday"}}, data: "x"},
		{hdr: nats.Header{"Nats-Stream": {"KV_x"}, "Nats-Sequence": {"3"}, "Nats-Time-Stamp": {"2026-12-01T10:00:00Z"}}, data: "x"},
		{hdr: full(), data: `{"at":"2026-12-01T10:00:00Z"}`},
		{hdr: full(), data: ""},
		{hdr: full("KV-Operation", "DEL")},
		{hdr: full("KV-Operation", "PURGE")},
		{hdr: full("KV-Operation", "PUT"), data: "x"},
		{hdr: full("KV-Operation", "DEL", "Nats-Marker-Reason", "MaxAge")},
		{hdr: full("Nats-Marker-Reason", "MaxAge")},
		{hdr: full("Nats-Marker-Reason", "Purge")},
		{hdr: full("Nats-Marker-Reason", "Remove")},
		{hdr: full("Nats-Marker-Reason", "Other"), data: "x"},
	}
	acks := []answer{
		{data: `{"stream":"KV_x","seq":5}`},
		{data: `{"stream":"KV_x","seq":5,"duplicate":true}`},
		{data: `{"stream":"KV_x","seq":5,"domain":"hub"}`},
		{data: `{"stream":"KV_x","seq":5,"duplicate":"yes"}`},
		{data: `{"stream":"KV_x","seq":12345678901234567890}`},
		{data: `{"stream":"KV_x","seq":05}`},
		{data: `{"stream":"KV_x","seq":"5"}`},
		{data: `{"stream":"K\"V","seq":5}`},
		{data: `{"stream":"","seq":5}`},
		{data: `{"stream":"KV_x","seq":5} `},
		{data: `{"stream":"KV_x","seq":5}x`},
		{data: `{"seq":5}`},
		{data: `{}`},
		{data: `null`},
		{data: `not json`},
		{data: ``},
		{data: `{"type":5,"stream":"KV_x","seq":5}`},
		{data: `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"},"stream":"KV_x","seq":0}`},
		{data: `{"error":{"code":400,"err_code":10164,"description":"wrong last sequence"}}`},
		{data: `{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}`},
		{data: `{"error":{"code":400,"err_code":10071}}`},
	}
	for _, g := range gets {
		get = g
		if w, k := wireGet(ctx, s.w, key), kvGet(ctx, s.kv, key); w != k {
			t.Errorf("get answered %v %q: wire %s, kv %s", g.hdr, g.data, w, k)
		}
		for _, a := range acks {
			ack = a
			seenHdr = nil
			w, k := create()
			if w != k {
				t.Errorf("create answered %q after a get answered %v %q: wire %s, kv %s", a.data, g.hdr, g.data, w, k)
			}
			// The same publishes with the same headers.
			if n := len(seenHdr); n%2 != 0 {
				t.Fatalf("%d publishes", n)
			}
			for i := 0; i < len(seenHdr)/2; i++ {
				if a, b := fmt.Sprint(seenHdr[i]), fmt.Sprint(seenHdr[i+len(seenHdr)/2]); a != b {
					t.Errorf("publish %d: wire headers %s, kv %s", i, a, b)
				}
			}
		}
	}
}

// FuzzParseAck: what the ack reader takes without encoding/json, it reads
// as jetstream reads a publish's ack (publish.go's pubAckResponse).
func FuzzParseAck(f *testing.F) {
	for _, s := range []string{`{"stream":"KV_x","seq":5}`, `{"stream":"KV_x","seq":05}`, `{"stream":"K\"V","seq":5}`,
		`{"stream":"KV_x","seq":99999999999999999999}`, `{"stream":"KV_x","seq":5,"duplicate":true}`, `{"stream":"","seq":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, ok := parseAck(b)
		if !ok {
			return
		}
		var ack struct {
			Type  string              `json:"type"`
			Error *jetstream.APIError `json:"error,omitempty"`
			*jetstream.PubAck
		}
		if err := json.Unmarshal(b, &ack); err != nil || ack.Error != nil || ack.PubAck == nil || ack.Stream == "" || ack.Sequence != n {
			t.Fatalf("parseAck(%q) = %d, json reads %+v, %v", b, n, ack.PubAck, err)
		}
	})
}

// BenchmarkStore measures the client side of an event's lookup (of an id
// not seen) and record, in the wire form and through the KV API, on one
// embedded server (whose work is the same both ways).
func BenchmarkStore(b *testing.B) {
	srv := natstest.RunServer(b)
	_, js := natstest.Connect(b, srv.ClientURL())
	ctx := context.Background()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		b.Fatal(err)
	}
	st, err := New(ctx, js, Config{Names: streams.Default()})
	if err != nil {
		b.Fatal(err)
	}
	outcome := []byte(`{"id":"72d3162e-cc78-11e3-81ab-4c9367dc0958","admitted":[{"agent":"pr-reviewer","session":"octo/repo#12","seq":7}]}`)
	for _, form := range []string{"kv", "wire"} {
		s := *st
		if form == "kv" {
			s.w = nil
		}
		b.Run(form, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for i := 0; b.Loop(); i++ {
				id := fmt.Sprintf("%s-%d-%d", form, i, time.Now().UnixNano())
				if _, ok, err := s.Seen(ctx, "https://github.com/octo/repo", id); err != nil || ok {
					b.Fatal(ok, err)
				}
				if err := s.Record(ctx, "https://github.com/octo/repo", id, outcome); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// processCPU is the CPU time the process (client and server) has spent.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// wrappedJS hands out a KeyValue of its own, as a test or tracing
// wrapper does.
type wrappedJS struct{ jetstream.JetStream }

type wrappedKV struct{ jetstream.KeyValue }

func (j wrappedJS) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := j.JetStream.KeyValue(ctx, bucket)
	return wrappedKV{kv}, err
}

// A KeyValue that is not jetstream's own is called as it is: the store
// speaks the wire form only in place of jetstream's own Get and Create.
func TestWrappedKeyValueIsCalled(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	ctx := context.Background()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		js   jetstream.JetStream
		wire bool
	}{{"jetstream's own KeyValue", js, true}, {"a wrapped KeyValue", wrappedJS{js}, false}} {
		s, err := New(ctx, tt.js, Config{Names: streams.Default()})
		if err != nil {
			t.Fatal(err)
		}
		if (s.w != nil) != tt.wire {
			t.Errorf("%s: wire form %v, want %v", tt.name, s.w != nil, tt.wire)
		}
	}
}
