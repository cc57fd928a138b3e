package bench

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/worker"
)

// benchIdle runs Sessions sessions once each (a scripted answer) on an
// in-process worker and measures the heap the worker holds for them once
// they rest: the heap with the worker running less the heap after it
// stopped (the in-process server's share is in both). Idle sessions are
// records in KV, so it should be close to nothing.
func benchIdle(ctx context.Context, e *env) (map[string]float64, error) {
	n := e.cfg.Sessions
	def := policies.Definition{Name: "idle", Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{{Text: "ok"}}}}
	watch, err := e.watchStatus()
	if err != nil {
		return nil, err
	}
	defer watch.stop()
	stop, err := e.runWorker(ctx, worker.Config{Definitions: fixedDefs{"idle": def}, Agents: []string{"idle"}, MaxSessions: 512})
	if err != nil {
		return nil, err
	}
	defer stop()
	start := time.Now()
	for i := range n {
		ref, _ := streams.NewSessionRef("idle", fmt.Sprintf("s%d", i))
		if _, err := worker.Send(ctx, e.js, e.names, ref, worker.Request{Text: "hi"}); err != nil {
			return nil, err
		}
	}
	done := map[string]bool{}
	timeout := time.NewTimer(30 * time.Minute)
	defer timeout.Stop()
	for len(done) < n {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timeout.C:
			return nil, fmt.Errorf("%d of %d sessions done within 30 minutes", len(done), n)
		case m := <-watch.ch:
			if ch, ok := decodeStatus(m.Data); ok && ch.Agent == "idle" && ch.Status == record.StatusDone && !done[ch.Session] {
				done[ch.Session] = true
				if len(done)%1000 == 0 {
					e.cfg.Log.Info("idle sessions done", "done", len(done), "of", n)
				}
			}
		}
	}
	elapsed := time.Since(start)
	// Every input acknowledged, nothing in flight.
	name, err := e.names.InConsumerName("idle")
	if err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(5 * time.Minute); ; {
		cs, err := e.js.Consumer(ctx, e.names.StreamIn(), name)
		if err != nil {
			return nil, err
		}
		info, err := cs.Info(ctx)
		if err != nil {
			return nil, err
		}
		if info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d inputs unacknowledged, %d pending", info.NumAckPending, info.NumPending)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The runs' goroutines end once their sessions rest.
	deadline := time.Now().Add(10 * time.Second)
	for last, stable := runtime.NumGoroutine(), 0; stable < 5 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		if g := runtime.NumGoroutine(); g == last {
			stable++
		} else {
			last, stable = g, 0
		}
	}
	var running, stopped runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&running)
	goroutines := runtime.NumGoroutine()
	stop()
	runtime.GC()
	runtime.ReadMemStats(&stopped)
	held := float64(running.HeapInuse) - float64(stopped.HeapInuse)
	return map[string]float64{
		"sessions":           float64(n),
		"held-MB":            held / (1 << 20),
		"held-bytes/session": held / float64(n),
		"goroutines-held":    float64(goroutines - runtime.NumGoroutine()),
		"sessions/s":         float64(n) / elapsed.Seconds(),
	}, nil
}
