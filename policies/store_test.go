package policies_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
)

func newStore(t *testing.T) (*policies.Store, jetstream.JetStream) {
	t.Helper()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s.ClientURL())
	ctx := context.Background()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	st, err := policies.NewStore(ctx, js, streams.Default())
	if err != nil {
		t.Fatal(err)
	}
	return st, js
}

func def(name, when string) policies.Definition {
	return policies.Definition{
		Name:     name,
		Model:    policies.Model{Provider: "scripted"},
		Triggers: []policies.Trigger{{Name: "t", When: when}},
	}
}

func TestStoreVersions(t *testing.T) {
	st, _ := newStore(t)
	ctx := context.Background()
	if _, err := st.Get(ctx, "a"); !errors.Is(err, policies.ErrNotFound) {
		t.Fatalf("get before put: %v", err)
	}
	v1, err := st.Put(ctx, def("a", "true"), policies.WithSource("a.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := st.Put(ctx, def("a", "true"))
	if err != nil || again != v1 {
		t.Fatalf("unchanged put: version %d (%v), want %d", again, err, v1)
	}
	v2, err := st.Put(ctx, def("a", "false"))
	if err != nil || v1 != 1 || v2 != 2 {
		t.Fatalf("versions %d then %d (%v), want 1 then 2", v1, v2, err)
	}
	got, err := st.Get(ctx, "a")
	if err != nil || got.Version != v2 || got.Revision == 0 || got.Triggers[0].When != "false" {
		t.Fatalf("get: %+v %v", got, err)
	}
	old, err := st.Version(ctx, "a", v1)
	if err != nil || old.Definition.Triggers[0].When != "true" || old.Source != "a.yaml" || old.Hash == "" {
		t.Fatalf("get version %d: %+v %v", v1, old, err)
	}
	if _, err := st.Version(ctx, "a", 9); !errors.Is(err, policies.ErrNotFound) {
		t.Fatalf("version 9: %v", err)
	}

	// A refused definition leaves the previous version serving.
	if _, err := st.Put(ctx, def("a", "event.nope")); !errors.Is(err, policies.ErrInvalid) {
		t.Fatalf("bad put: %v", err)
	}
	if got, _ := st.Get(ctx, "a"); got.Version != v2 {
		t.Fatalf("after refused put: version %d, want %d", got.Version, v2)
	}

	if _, err := st.Put(ctx, def("b", "true")); err != nil {
		t.Fatal(err)
	}
	recs, err := st.Records(ctx)
	if err != nil || len(recs) != 2 || recs[0].Definition.Name != "a" || recs[1].Definition.Name != "b" {
		t.Fatalf("records: %+v %v", recs, err)
	}
	if err := st.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if list, _ := st.List(ctx); len(list) != 1 {
		t.Fatalf("after delete: %d definitions", len(list))
	}
}

// A version written around the store (by another release, or by hand)
// that does not compile is skipped: readers keep the last good one.
func TestStoreSkipsStoredVersionThatDoesNotCompile(t *testing.T) {
	st, js := newStore(t)
	ctx := context.Background()
	good, err := st.Put(ctx, def("a", "true"))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, streams.Default().BucketAgents())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "a", []byte(`{"definition":{"name":"a","model":{"provider":"scripted"},"triggers":[{"name":"t","when":"event.nope"}]}}`)); err != nil {
		t.Fatal(err)
	}
	got, err := st.Get(ctx, "a")
	if err != nil || got.Version != good {
		t.Fatalf("get: version %d (%v), want %d", got.Version, err, good)
	}
}

func TestStoreWatch(t *testing.T) {
	st, _ := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := st.Put(ctx, def("a", "true")); err != nil {
		t.Fatal(err)
	}
	ch, err := st.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := func() policies.Change {
		t.Helper()
		select {
		case c := <-ch:
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("no change delivered")
		}
		return policies.Change{}
	}
	if c := next(); c.Agent != "a" || c.Compiled == nil {
		t.Fatalf("initial: %+v", c)
	}
	if c := next(); c.Agent != "" {
		t.Fatalf("want the synced marker, got %+v", c)
	}
	v, err := st.Put(ctx, def("a", "false"))
	if err != nil {
		t.Fatal(err)
	}
	if c := next(); c.Compiled == nil || c.Compiled.Definition.Version != v {
		t.Fatalf("update: %+v", c)
	}
	if err := st.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if c := next(); !c.Deleted || c.Agent != "a" {
		t.Fatalf("delete: %+v", c)
	}
	cancel()
	for range ch {
	}
}

// A process that starts while the newest stored version of an agent does
// not compile serves the newest earlier one that does, instead of
// dropping the agent until the next apply.
func TestWatchStartsOnTheLastGoodVersion(t *testing.T) {
	st, js := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	good, err := st.Put(ctx, def("a", "true"))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, streams.Default().BucketAgents())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "a", []byte(`{"definition":{"name":"a","model":{"provider":"scripted"},"triggers":[{"name":"t","when":"event.nope"}]}}`)); err != nil {
		t.Fatal(err)
	}
	ch, err := st.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var c policies.Change
	select {
	case c = <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no change delivered")
	}
	if c.Agent != "a" || c.Compiled == nil || c.Compiled.Definition.Version != good || c.Refused == nil {
		t.Fatalf("initial change %+v, want version %d with the newer one refused", c, good)
	}
	cancel()
	for range ch {
	}
}

func ExampleParse() {
	c, err := policies.Parse("bad.yaml", []byte(`name: reviewer
model: {provider: scripted}
triggers:
  - name: opened
    when: event.type == "com.github.pull_request.opened" && event.data.pull_request.draft = false
`))
	fmt.Println(c == nil, err)
	// Output: true bad.yaml:5:91: triggers[0].when: CEL: Syntax error: token recognition error at: '= ' (and 1 more)
}

// Concurrent applies of one agent on a replicated bucket, where a stale
// revision reports error code 10164, each store a version.
func TestPutUnderContentionOnReplicatedBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 3-node cluster")
	}
	c := natstest.RunCluster(t, 3)
	c.WaitReady()
	nc, err := c.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := streams.Provision(ctx, js, streams.Options{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	st, err := policies.NewStore(ctx, js, streams.Default())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			if _, err := st.Put(ctx, def("a", fmt.Sprintf("event.id == %q", fmt.Sprint(i)))); err != nil {
				t.Errorf("put %d: %v", i, err)
			}
		})
	}
	wg.Wait()
}
