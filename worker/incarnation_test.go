package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/worker"
)

// TestLiveTwinDoesNotTakeTheSession starts a second worker with the id of
// one that runs a session's model call: the first incarnation still
// answers on its liveness subject, so the second leaves the lease alone
// (two processes with one id are a misconfiguration, not a restart), and
// the call is made once, by the first.
func TestLiveTwinDoesNotTakeTheSession(t *testing.T) {
	e := setup(t)
	def := policies.Definition{Name: "demo", Model: scripted(policies.ScriptEntry{Text: "hi"})}
	first := newProbe(true)
	e.start(t, worker.Config{ID: "w1", Definitions: defs{"demo": def}, Agents: []string{"demo"}, Models: first.factory})
	ref := e.ref(t, "demo", "s1")
	e.send(t, ref, "hello")
	select {
	case <-first.calling:
	case <-time.After(30 * time.Second):
		t.Fatal("the model call did not start")
	}
	twin := newProbe(false)
	m, reg := registry(t)
	logs := &lockedBuffer{}
	e.start(t, worker.Config{ID: "w1", Definitions: defs{"demo": def}, Agents: []string{"demo"}, Models: twin.factory, Metrics: m,
		Log: slog.New(slog.NewTextHandler(logs, nil))})
	natstest.WaitFor(t, 30*time.Second, func() error {
		if !strings.Contains(logs.String(), "another process runs with this worker's id") {
			return fmt.Errorf("the twin has not met the live lease yet:\n%s", logs.String())
		}
		return nil
	})
	if v := metricValue(t, reg, "jetloop_worker_sessions_reclaimed_total"); v != 0 {
		t.Fatalf("the twin took %v sessions from a live worker", v)
	}
	close(first.hold)
	e.waitStatus(t, ref, record.StatusDone)
	if n := len(twin.requests()); n != 0 {
		t.Fatalf("the twin made %d model calls", n)
	}
	if n := len(first.requests()); n != 1 {
		t.Fatalf("the model was called %d times", n)
	}
}

// lockedBuffer is a bytes.Buffer safe for a logger and a test at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestPausedTwinIsAskedOnce holds leases of four sessions under this
// worker's id by an incarnation whose process keeps its connection but
// does not run (stopped with SIGSTOP: its liveness subject has a
// subscriber that never answers). The restarted twin asks that
// incarnation once whether it lives, not once a lease: each question
// waits for an answer that never comes, and the worker does not consume
// until its start is over.
func TestPausedTwinIsAskedOnce(t *testing.T) {
	e := setup(t)
	nc, _ := natstest.Connect(t, e.url)
	subject, err := e.names.Incarnation("w1", "paused")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	asked := 0
	if _, err := nc.Subscribe(subject, func(*nats.Msg) { mu.Lock(); asked++; mu.Unlock() }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kv, err := e.js.KeyValue(ctx, e.names.BucketLeases())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for i := range 4 {
		ref := e.ref(t, "demo", fmt.Sprintf("s%d", i))
		b, _ := json.Marshal(map[string]any{"owner": "w1", "incarnation": "paused", "acquired": now, "renewed": now})
		if _, err := kv.Put(ctx, e.names.LeaseKey(ref), b); err != nil {
			t.Fatal(err)
		}
	}
	def := policies.Definition{Name: "demo", Model: scripted(policies.ScriptEntry{Text: "hi"})}
	logs := &lockedBuffer{}
	e.start(t, worker.Config{ID: "w1", Definitions: defs{"demo": def}, Agents: []string{"demo"},
		Log: slog.New(slog.NewTextHandler(logs, nil))})
	natstest.WaitFor(t, time.Minute, func() error {
		if !strings.Contains(logs.String(), "worker running") {
			return fmt.Errorf("the worker has not started:\n%s", logs.String())
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if asked != 1 {
		t.Fatalf("the paused incarnation was asked %d times whether it lives, want once", asked)
	}
}
