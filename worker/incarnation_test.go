package worker_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

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
