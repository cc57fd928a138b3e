package streams_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

func configs(t *testing.T, js jetstream.JetStream, opts streams.Options) map[string]jetstream.StreamConfig {
	t.Helper()
	out := map[string]jetstream.StreamConfig{}
	for _, res := range streams.Layout(opts) {
		s, err := js.Stream(context.Background(), res.StreamName())
		if err != nil {
			t.Fatalf("stream %s: %v", res.StreamName(), err)
		}
		out[res.StreamName()] = s.CachedInfo().Config
	}
	return out
}

func TestProvisionTwiceChangesNothing(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())

	first, err := streams.Provision(ctx, js, streams.Options{})
	if err != nil {
		t.Fatalf("first provision: %v", err)
	}
	for _, ch := range first {
		if ch.Action != streams.Created {
			t.Errorf("first provision: %s, want created", ch)
		}
	}
	before := configs(t, js, streams.Options{})

	second, err := streams.Provision(ctx, js, streams.Options{})
	if err != nil {
		t.Fatalf("second provision: %v", err)
	}
	if second.Changed() {
		t.Fatalf("second provision changed something: %v", second)
	}
	after := configs(t, js, streams.Options{})
	for name, b := range before {
		if fmt.Sprint(b) != fmt.Sprint(after[name]) {
			t.Errorf("stream %s config changed:\nbefore %+v\nafter  %+v", name, b, after[name])
		}
	}
}

func TestProvisionDeclaresDesignLayout(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	cfg := configs(t, js, streams.Options{})

	in := cfg["JL_IN"]
	if !in.AllowMsgSchedules || !in.AllowMsgTTL || !in.AllowRollup || in.Duplicates != 2*time.Minute || in.MaxAge != 0 {
		t.Errorf("JL_IN: schedules=%v ttl=%v rollup=%v dupes=%v maxage=%v", in.AllowMsgSchedules, in.AllowMsgTTL, in.AllowRollup, in.Duplicates, in.MaxAge)
	}
	if got := strings.Join(in.Subjects, " "); got != "jl.in.> jl.sched.> jl.debounce.> jl.throttle.> jl.timer.>" {
		t.Errorf("JL_IN subjects = %q", got)
	}
	if !cfg["KV_jl_sessions"].AllowAtomicPublish {
		t.Error("jl_sessions does not allow atomic batch publish")
	}
	for _, b := range []string{"KV_jl_leases", "KV_jl_dedupe"} {
		if !cfg[b].AllowMsgTTL {
			t.Errorf("%s does not allow per-key TTL", b)
		}
	}
	if cfg["KV_jl_dedupe"].MaxAge != 72*time.Hour {
		t.Errorf("jl_dedupe TTL = %v, want 72h", cfg["KV_jl_dedupe"].MaxAge)
	}
	if cfg["KV_jl_agents"].MaxMsgsPerSubject < 2 {
		t.Error("jl_agents keeps no history")
	}
	if cfg["JL_CTL"].Duplicates != 2*time.Minute {
		t.Errorf("JL_CTL dedupe window = %v", cfg["JL_CTL"].Duplicates)
	}

	// The engine features are really on: an atomic batch into jl_sessions
	// and a per-key TTL in jl_leases.
	leases, err := js.KeyValue(ctx, "jl_leases")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Create(ctx, "a.s", []byte("w1"), jetstream.KeyTTL(time.Minute)); err != nil {
		t.Fatalf("lease with TTL: %v", err)
	}
	if _, err := js.ObjectStore(ctx, "jl_blobs"); err != nil {
		t.Fatalf("jl_blobs: %v", err)
	}
}

func TestProvisionUpdatesManagedField(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "JL_CTL", Subjects: []string{"jl.ctl.>"}, Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
	change := func(report streams.Report) streams.Change {
		for _, ch := range report {
			if ch.Name == "JL_CTL" {
				return ch
			}
		}
		return streams.Change{}
	}
	// Without an explicit window the operator's window is kept; the
	// features jetloop depends on are switched on.
	report, err := streams.Provision(ctx, js, streams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := change(report); got.Action != streams.Updated || strings.Contains(strings.Join(got.Fields, ","), "duplicate_window") {
		t.Fatalf("JL_CTL: %s, want updated without duplicate_window", got)
	}
	report, err = streams.Provision(ctx, js, streams.Options{DedupeWindow: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if got := change(report); got.Action != streams.Updated || strings.Join(got.Fields, ",") != "duplicate_window" {
		t.Fatalf("JL_CTL: %s, want updated (duplicate_window)", got)
	}
}

func TestProvisionKeepsOperatorTuning(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	s, _ := js.Stream(ctx, "JL_AUDIT")
	cfg := s.CachedInfo().Config
	cfg.MaxAge = 90 * 24 * time.Hour
	cfg.Description = "ours"
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	report, err := streams.Provision(ctx, js, streams.Options{})
	if err != nil || report.Changed() {
		t.Fatalf("provision undid the operator's tuning: %v %v", report, err)
	}
}

func TestProvisionRefusesIncompatibleStream(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "JL_IN", Subjects: []string{"jl.in.>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	_, err := streams.Provision(ctx, js, streams.Options{})
	if !errors.Is(err, streams.ErrIncompatible) {
		t.Fatalf("got %v, want ErrIncompatible", err)
	}
	for _, want := range []string{"JL_IN", "storage"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

func TestProvisionConcurrently(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	errs := make(chan error, 3)
	for range 3 {
		_, js := natstest.Connect(t, srv.ClientURL())
		go func() {
			_, err := streams.Provision(ctx, js, streams.Options{})
			errs <- err
		}()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent provision: %v", err)
		}
	}
}

func TestClusterProvisionsAtR3AndSurvivesANodeLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := natstest.RunCluster(t, 3)
	nc, err := c.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	opts := streams.Options{Replicas: 3}
	if _, err := streams.Provision(ctx, js, opts); err != nil {
		t.Fatalf("provision at R3: %v", err)
	}
	for name, cfg := range configs(t, js, opts) {
		if cfg.Replicas != 3 {
			t.Errorf("%s has %d replicas, want 3", name, cfg.Replicas)
		}
	}
	if again, err := streams.Provision(ctx, js, opts); err != nil || again.Changed() {
		t.Fatalf("second provision on the cluster: %v %v", again, err)
	}
	// A component started without --replicas never scales it down.
	if again, err := streams.Provision(ctx, js, streams.Options{}); err != nil || again.Changed() {
		t.Fatalf("provision without replicas changed the cluster: %v %v", again, err)
	}

	// Stop the node that leads JL_IN, then the stream and a bucket still
	// take writes.
	s, err := js.Stream(ctx, "JL_IN")
	if err != nil {
		t.Fatal(err)
	}
	leader := s.CachedInfo().Cluster.Leader
	for i, n := range c.Nodes() {
		if n.Name() == leader {
			c.Stop(i)
		}
	}
	// Each attempt has its own deadline: a publish sent while no leader
	// exists gets no answer, and the next attempt must still happen.
	attempt := func(f func(ctx context.Context) error) func() error {
		return func() error {
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			return f(ctx)
		}
	}
	natstest.WaitFor(t, time.Minute, attempt(func(ctx context.Context) error {
		_, err := js.Publish(ctx, "jl.in.x.y", []byte("after"))
		return err
	}))
	kv, err := js.KeyValue(ctx, "jl_sessions")
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, time.Minute, attempt(func(ctx context.Context) error {
		_, err := kv.Put(ctx, "x.y.state", []byte("{}"))
		return err
	}))
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Cluster.Leader == leader || info.Cluster.Leader == "" {
		t.Fatalf("JL_IN leader is %q after stopping %q", info.Cluster.Leader, leader)
	}
}
