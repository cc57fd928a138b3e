package worker

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
)

type benchDefs map[string]policies.Definition

func (d benchDefs) Get(_ context.Context, agent string) (policies.Definition, error) {
	def, ok := d[agent]
	if !ok {
		return def, fmt.Errorf("agent %q: %w", agent, ErrNotFound)
	}
	def.Version = 1
	return def, nil
}

func benchServer(b *testing.B, opts streams.Options) (jetstream.JetStream, streams.Names) {
	b.Helper()
	srv := natstest.RunServer(b)
	_, js := natstest.Connect(b, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := streams.Provision(ctx, js, opts); err != nil {
		b.Fatal(err)
	}
	return js, streams.Default()
}

func benchWorker(b *testing.B, js jetstream.JetStream, cfg Config) (*Worker, func()) {
	b.Helper()
	cfg.ID, cfg.WorkDir = "bench", b.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := New(ctx, js, cfg)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	b.Cleanup(stop)
	return w, stop
}

func waitState(b *testing.B, s *record.Store, ref streams.SessionRef, want record.Status) record.State {
	b.Helper()
	var st record.State
	err := natstest.Poll(context.Background(), 10*time.Minute, func() error {
		var err error
		st, _, err = s.Load(context.Background(), ref)
		if err == nil && st.Status != want {
			err = fmt.Errorf("status %s", st.Status)
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return st
}

// The steps' benchmark against their raw operations is
// bench.BenchmarkStepVsRaw (go test -bench StepVsRaw ./bench): one and
// eight sessions, both sync settings, one node and a three-node cluster.

// BenchmarkIdleSessions runs 10,000 sessions once each (a scripted answer)
// and reports the heap the worker holds for them once they rest, as the
// difference between the heap with the worker running and after it
// stopped (the in-process server's share is in both): idle sessions
// should hold nothing (target: under 10 MB). The streams are in memory,
// so the server's atomic batches do not dominate the run.
func BenchmarkIdleSessions(b *testing.B) {
	const sessions = 10_000
	for b.Loop() {
		js, names := benchServer(b, streams.Options{Memory: true})
		def := policies.Definition{Name: "idle", Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{{Text: "ok"}}}}
		w, stop := benchWorker(b, js, Config{Definitions: benchDefs{"idle": def}, Agents: []string{"idle"}, MaxSessions: 512})
		ctx := context.Background()
		var last streams.SessionRef
		for i := range sessions {
			ref, _ := streams.NewSessionRef("idle", fmt.Sprintf("s%d", i))
			if _, err := Send(ctx, js, names, ref, Request{Text: "hi"}); err != nil {
				b.Fatal(err)
			}
			last = ref
		}
		waitState(b, w.store, last, record.StatusDone)
		err := natstest.Poll(ctx, 10*time.Minute, func() error {
			cs, err := js.Consumer(ctx, names.StreamIn(), "worker_idle")
			if err != nil {
				return err
			}
			info, err := cs.Info(ctx)
			if err != nil {
				return err
			}
			w.mu.Lock()
			running := len(w.runners)
			w.mu.Unlock()
			if info.NumAckPending+int(info.NumPending) > 0 || running > 0 {
				return fmt.Errorf("%d unacked, %d pending, %d running", info.NumAckPending, info.NumPending, running)
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		list, err := record.List(ctx, js, names)
		if err != nil || len(list) != sessions {
			b.Fatalf("%d sessions listed, want %d: %v", len(list), sessions, err)
		}
		list = nil
		var running, stopped runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&running)
		goroutines := runtime.NumGoroutine()
		stop()
		runtime.GC()
		runtime.ReadMemStats(&stopped)
		held := float64(running.HeapInuse) - float64(stopped.HeapInuse)
		b.ReportMetric(held/(1<<20), "MB-held")
		b.ReportMetric(float64(goroutines-runtime.NumGoroutine()), "goroutines-held")
	}
}
