package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/worker"
)

// statusWatch follows the jl.status messages of an agent: which sessions
// are working at each change, and what every session went through.
type statusWatch struct {
	mu         sync.Mutex
	working    map[string]bool
	maxWorking int
	seen       map[string][]worker.StatusChange
	started    []string // sessions in the order they began working
}

func watchStatus(t *testing.T, url string, names streams.Names, agent string) *statusWatch {
	t.Helper()
	nc, _ := natstest.Connect(t, url)
	w := &statusWatch{working: map[string]bool{}, seen: map[string][]worker.StatusChange{}}
	sub, err := nc.Subscribe(names.StatusAll(), func(m *nats.Msg) {
		var c worker.StatusChange
		if json.Unmarshal(m.Data, &c) != nil || c.Agent != agent {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if c.Status == record.StatusWorking && !w.working[c.Session] {
			w.started = append(w.started, c.Session)
		}
		w.working[c.Session] = c.Status == record.StatusWorking
		n := 0
		for _, on := range w.working {
			if on {
				n++
			}
		}
		w.maxWorking = max(w.maxWorking, n)
		w.seen[c.Session] = append(w.seen[c.Session], c)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return w
}

// TestConcurrencyLimitAcrossWorkers: with concurrency {limit: 1}, three
// sessions' runs on two workers go one at a time; the two that come while
// the first runs are queued, saying for what, and then run, in the order
// their events came.
func TestConcurrencyLimitAcrossWorkers(t *testing.T) {
	e := setup(t)
	def := policies.Definition{Name: "one", Concurrency: &policies.Concurrency{Limit: 1},
		Model: scripted(policies.ScriptEntry{Text: "Thinking.", Delay: policies.Duration(time.Second)})}
	w := watchStatus(t, e.url, e.names, "one")
	for _, id := range []string{"w1", "w2"} {
		e.start(t, worker.Config{ID: id, Definitions: defs{"one": def}, Agents: []string{"one"}})
	}
	var refs []streams.SessionRef
	for i, s := range []string{"s1", "s2", "s3"} {
		ref := e.ref(t, "one", s)
		refs = append(refs, ref)
		e.send(t, ref, "go")
		if i == 0 {
			e.waitStatus(t, ref, record.StatusWorking)
		}
	}
	// While the first runs, the others are queued and say for what.
	natstest.WaitFor(t, 30*time.Second, func() error {
		all, err := record.List(context.Background(), e.js, e.names)
		if err != nil {
			return err
		}
		queued := 0
		for _, s := range all {
			if s.Status == record.StatusQueued {
				if !strings.Contains(s.WaitingFor, "concurrency slot of agent one (limit 1") {
					return fmt.Errorf("%s waits for %q", s.Session, s.WaitingFor)
				}
				queued++
			}
		}
		if queued != 2 {
			return fmt.Errorf("%d queued: %+v", queued, all)
		}
		return nil
	})
	for _, ref := range refs {
		tr := e.waitStatus(t, ref, record.StatusDone)
		if kinds(tr) != "user,assistant" {
			t.Errorf("%s: %s", ref, kinds(tr))
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.maxWorking != 1 {
		t.Errorf("%d runs at once under limit 1", w.maxWorking)
	}
	if got := strings.Join(w.started, ","); got != "s1,s2,s3" {
		t.Errorf("runs began in the order %s, want the order of their events", got)
	}
	for _, s := range []string{"s2", "s3"} {
		queued := false
		for _, c := range w.seen[s] {
			queued = queued || c.Status == record.StatusQueued
		}
		if !queued {
			t.Errorf("%s never queued: %+v", s, w.seen[s])
		}
	}
}

// TestConcurrencyKeyAndWaitingHoldNoSlot: the limit applies per key, and
// a session blocked waiting for a human gives its slot back, so another
// of its key runs; its resume takes a slot again.
func TestConcurrencyKeyAndWaitingHoldNoSlot(t *testing.T) {
	e := setup(t)
	def := policies.Definition{Name: "keyed", Tools: []string{"ask"},
		Concurrency: &policies.Concurrency{Limit: 1, Key: "event.subject.split('-')[0]"},
		Model: scripted(policies.ScriptEntry{Text: "Asking.", ToolCalls: []policies.ScriptToolCall{{Name: "ask", Args: map[string]any{"question": "which?"}}}},
			policies.ScriptEntry{Text: "Done."})}
	e.start(t, worker.Config{Definitions: defs{"keyed": def}, Agents: []string{"keyed"}, Tools: worker.ToolMap{"ask": asker{}}})
	a1, a2, b1 := e.ref(t, "keyed", "a-1"), e.ref(t, "keyed", "a-2"), e.ref(t, "keyed", "b-1")
	e.send(t, a1, "go")
	e.waitStatus(t, a1, record.StatusBlocked)
	// a-1 blocks holding nothing: a-2, of the same key, runs (and blocks).
	e.send(t, a2, "go")
	e.waitStatus(t, a2, record.StatusBlocked)
	// b-1 has a key of its own.
	e.send(t, b1, "go")
	e.waitStatus(t, b1, record.StatusBlocked)
	for _, ref := range []streams.SessionRef{a1, a2, b1} {
		publish(t, e, ref, control.Message{Verb: control.Resume, Text: "this one"})
	}
	for _, ref := range []streams.SessionRef{a1, a2, b1} {
		e.waitStatus(t, ref, record.StatusDone)
	}
}

// A queued session that will not run after all (cancelled while it
// waits) gives up its place in the queue: the session behind it gets the
// slot as soon as the running one ends, not when the place lapses.
func TestCancelledQueuedSessionGivesUpItsPlace(t *testing.T) {
	e := setup(t)
	def := policies.Definition{Name: "one", Concurrency: &policies.Concurrency{Limit: 1},
		Model: scripted(policies.ScriptEntry{Text: "Thinking.", Delay: policies.Duration(2 * time.Second)})}
	e.start(t, worker.Config{Definitions: defs{"one": def}, Agents: []string{"one"}})
	s1, s2, s3 := e.ref(t, "one", "s1"), e.ref(t, "one", "s2"), e.ref(t, "one", "s3")
	e.send(t, s1, "go")
	e.waitStatus(t, s1, record.StatusWorking)
	e.send(t, s2, "go")
	e.waitStatus(t, s2, record.StatusQueued)
	e.send(t, s3, "go")
	e.waitStatus(t, s3, record.StatusQueued)
	publish(t, e, s2, control.Message{Verb: control.Cancel})
	e.waitStatus(t, s2, record.StatusCancelled)
	e.waitStatus(t, s1, record.StatusDone)
	// Well before s2's place would lapse (minutes).
	e.waitStatus(t, s3, record.StatusDone)
}
