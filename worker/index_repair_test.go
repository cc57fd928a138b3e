package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/logtest"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/worker"
)

// TestIndexRepairedAfterACrashBetweenWrites leaves in jl_status what a
// worker killed between a session's state write (working to blocked) and
// its index write leaves: the entry still under working, and the mark
// written before the state. The session rests blocked, so no input ever
// has a worker take (and heal) it; another worker, starting, heals it
// from the mark, and "which sessions are blocked" answers it.
func TestIndexRepairedAfterACrashBetweenWrites(t *testing.T) {
	e := setup(t)
	led := &ledger{path: filepath.Join(t.TempDir(), "ledger")}
	cfg := worker.Config{ID: "w1", WorkDir: t.TempDir(), Definitions: defs{"gated": gatedDef()}, Tools: worker.ToolMap{"ledger": led}, Agents: []string{"gated"}}
	h := logtest.New(t, nil, slog.LevelDebug)
	t.Cleanup(h.Stop)
	cfg.Log = slog.New(h)
	ctx, cancel := context.WithCancel(context.Background())
	w1, err := worker.New(ctx, e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w1.Run(ctx) }()
	ref := e.ref(t, "gated", "s1")
	e.send(t, ref, "write it")
	e.waitStatus(t, ref, record.StatusBlocked)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the worker did not stop")
	}

	bctx := context.Background()
	kv, err := e.js.KeyValue(bctx, e.names.BucketStatus())
	if err != nil {
		t.Fatal(err)
	}
	blockedKey, _ := e.names.StatusKey(string(record.StatusBlocked), ref)
	workingKey, _ := e.names.StatusKey(string(record.StatusWorking), ref)
	ent, err := kv.Get(bctx, blockedKey)
	if err != nil {
		t.Fatal(err)
	}
	var sum map[string]any
	if err := json.Unmarshal(ent.Value(), &sum); err != nil {
		t.Fatal(err)
	}
	sum["status"] = string(record.StatusWorking)
	b, _ := json.Marshal(sum)
	if _, err := kv.Put(bctx, workingKey, b); err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(bctx, blockedKey); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(bctx, "_dirty."+ref.Key(), nil); err != nil {
		t.Fatal(err)
	}
	if sel, err := record.Select(bctx, e.js, e.names, record.Query{Status: record.StatusBlocked}); err != nil || len(sel.Sessions) != 0 {
		t.Fatalf("the crash left %+v blocked (%v), want none", sel.Sessions, err)
	}

	e.start(t, worker.Config{ID: "w2", Definitions: defs{"gated": gatedDef()}, Tools: worker.ToolMap{"ledger": led}, Agents: []string{"gated"}})
	natstest.WaitFor(t, 30*time.Second, func() error {
		b, err := record.Select(bctx, e.js, e.names, record.Query{Status: record.StatusBlocked})
		if err != nil {
			return err
		}
		w, err := record.Select(bctx, e.js, e.names, record.Query{Status: record.StatusWorking})
		if err != nil {
			return err
		}
		if len(b.Sessions) != 1 || b.Sessions[0].Session != "s1" || len(w.Sessions) != 0 {
			return fmt.Errorf("index: blocked %+v, working %+v", b.Sessions, w.Sessions)
		}
		return nil
	})
	if _, err := kv.Get(bctx, "_dirty."+ref.Key()); err == nil {
		t.Fatal("the mark is still there after the repair")
	}
}
