package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/worker"
)

// Headers of a JetStream atomic batch.
const (
	hdrBatchID     = "Nats-Batch-Id"
	hdrBatchSeq    = "Nats-Batch-Sequence"
	hdrBatchCommit = "Nats-Batch-Commit"
)

// fixedDefs serves fixed definitions to an in-process worker.
type fixedDefs map[string]policies.Definition

func (d fixedDefs) Get(_ context.Context, agent string) (policies.Definition, error) {
	def, ok := d[agent]
	if !ok {
		return def, fmt.Errorf("agent %q: %w", agent, worker.ErrNotFound)
	}
	def.Version = 1
	return def, nil
}

// noop is a replay-safe tool that does nothing.
var noop = tools.NewFunc(tools.Spec{Name: "noop", Description: "does nothing", Schema: json.RawMessage(`{"type":"object"}`), ReplaySafe: true, State: tools.Stateless},
	func(context.Context, tools.Call) (tools.Result, error) { return tools.Result{Content: "ok"}, nil })

// runWorker runs an in-process worker until the returned stop is called.
func (e *env) runWorker(ctx context.Context, cfg worker.Config) (func(), error) {
	cfg.ID, cfg.Names = "bench", e.names
	cfg.WorkDir = filepath.Join(e.dir, "work")
	if cfg.Models == nil {
		cfg.Models = func(spec policies.Model) (model.Model, error) { return model.NewScripted(spec) }
	}
	ctx, cancel := context.WithCancel(ctx)
	w, err := worker.New(ctx, e.js, cfg)
	if err != nil {
		cancel()
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = w.Run(ctx) })
	var once sync.Once
	return func() { once.Do(func() { cancel(); wg.Wait() }) }, nil
}

// statusWatch follows jl.status.> for status changes.
type statusWatch struct {
	sub *nats.Subscription
	ch  chan *nats.Msg
}

func (e *env) watchStatus() (*statusWatch, error) {
	ch := make(chan *nats.Msg, 64<<10)
	sub, err := e.nc.ChanSubscribe(e.names.StatusAll(), ch)
	if err != nil {
		return nil, err
	}
	return &statusWatch{sub: sub, ch: ch}, nil
}

// until waits for a change of ref to status st.
func (w *statusWatch) until(ctx context.Context, ref streams.SessionRef, st record.Status, timeout time.Duration) (time.Time, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-t.C:
			return time.Time{}, fmt.Errorf("%s not %s within %s", ref, st, timeout)
		case m := <-w.ch:
			var ch worker.StatusChange
			if json.Unmarshal(m.Data, &ch) == nil && ch.Agent == ref.Agent && ch.Session == ref.Session && ch.Status == st {
				return time.Now(), nil
			}
		}
	}
}

func (w *statusWatch) stop() { _ = w.sub.Unsubscribe() }

// benchStep runs one session whose scripted model (no delay) calls the
// no-op tool every turn until its turn budget ends it, on one in-process
// worker, then the raw operations of as many steps on a session of their
// own, and compares.
func benchStep(ctx context.Context, e *env) (map[string]float64, error) {
	turns := max(1, e.cfg.Steps/2)
	call := policies.ScriptEntry{Text: "again", ToolCalls: []policies.ScriptToolCall{{Name: "noop", Args: map[string]any{"n": 1}}}}
	def := policies.Definition{Name: "bench", Tools: []string{"noop"}, Budget: policies.Budget{MaxTurns: turns},
		Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{call}, Then: &call}}
	stop, err := e.runWorker(ctx, worker.Config{Definitions: fixedDefs{"bench": def}, Tools: worker.ToolMap{"noop": noop}, Agents: []string{"bench"}})
	if err != nil {
		return nil, err
	}
	defer stop()
	watch, err := e.watchStatus()
	if err != nil {
		return nil, err
	}
	defer watch.stop()
	ref, _ := streams.NewSessionRef("bench", "steps")
	start := time.Now()
	if _, err := worker.Send(ctx, e.js, e.names, ref, worker.Request{Text: "go"}); err != nil {
		return nil, err
	}
	end, err := watch.until(ctx, ref, record.StatusBudgetExceeded, 10*time.Minute)
	if err != nil {
		return nil, err
	}
	tr, err := record.Show(ctx, e.js, e.names, ref)
	if err != nil {
		return nil, err
	}
	steps := 0
	for _, en := range tr.Transcript {
		if en.Kind == record.KindAssistant || en.Kind == record.KindToolResult {
			steps++
		}
	}
	workerRate := float64(steps) / end.Sub(start).Seconds()
	stop()

	raw, err := rawSteps(ctx, e, 2*turns)
	if err != nil {
		return nil, fmt.Errorf("raw steps: %w", err)
	}
	rawRate := float64(len(raw)) / sum(raw).Seconds()
	return map[string]float64{
		"steps/s":         workerRate,
		"raw-steps/s":     rawRate,
		"ratio":           workerRate / rawRate,
		"raw-step-p50-ms": percentile(raw, 0.5),
		"raw-step-p99-ms": percentile(raw, 0.99),
	}, nil
}

// rawSteps does the JetStream operations of n steps, alternately a model
// step (two entries) and a tool step (one), each an intent written by
// compare-and-set and a settlement of its entries and the next state in
// one atomic batch conditional on the state's revision; it returns each
// step's duration.
func rawSteps(ctx context.Context, e *env, n int) ([]time.Duration, error) {
	kv, err := e.js.KeyValue(ctx, e.names.BucketSessions())
	if err != nil {
		return nil, err
	}
	ref, _ := streams.NewSessionRef("bench", "raw")
	key := e.names.StateKey(ref)
	st := record.NewState("bench", "raw", time.Now().UTC())
	st.Status = record.StatusWorking
	b, _ := json.Marshal(st)
	rev, err := kv.Create(ctx, key, b)
	if err != nil {
		return nil, err
	}
	out := make([]time.Duration, 0, n)
	for i := range n {
		t0 := time.Now()
		st.Pending = &record.Intent{Kind: record.StepModel, Step: st.Steps + 1, Turn: st.Turns, Entry: st.NextEntry, Owner: "raw", Started: time.Now().UTC()}
		b, _ := json.Marshal(st)
		if rev, err = kv.Update(ctx, key, b, rev); err != nil {
			return nil, err
		}
		entries := 2 - i%2
		var msgs []*nats.Msg
		for range entries {
			en := record.Entry{ID: st.NextEntry, Kind: record.KindAssistant, Turn: st.Turns, Time: time.Now().UTC(),
				Text: "again", Name: "noop", CallID: "call_1", Args: json.RawMessage(`{"n":1}`)}
			st.NextEntry++
			eb, _ := json.Marshal(en)
			msgs = append(msgs, &nats.Msg{Subject: streams.KVSubject(e.names.BucketSessions(), e.names.LogKey(ref, en.ID)), Header: nats.Header{}, Data: eb})
		}
		st.Pending, st.Steps = nil, st.Steps+1
		sb, _ := json.Marshal(st)
		m := &nats.Msg{Subject: streams.KVSubject(e.names.BucketSessions(), key), Header: nats.Header{}, Data: sb}
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
		msgs = append(msgs, m)
		if rev, err = publishBatch(ctx, e.nc, msgs); err != nil {
			return nil, err
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}

// publishBatch publishes msgs as one atomic batch: the commit, last, is the
// only request, and its answer acknowledges them all.
func publishBatch(ctx context.Context, nc *nats.Conn, msgs []*nats.Msg) (uint64, error) {
	id := nuid.Next()
	for i, m := range msgs {
		m.Header.Set(hdrBatchID, id)
		m.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
		if i < len(msgs)-1 {
			if err := nc.PublishMsg(m); err != nil {
				return 0, err
			}
		}
	}
	last := msgs[len(msgs)-1]
	last.Header.Set(hdrBatchCommit, "1")
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := nc.RequestMsgWithContext(rctx, last)
	if err != nil {
		return 0, err
	}
	var ack struct {
		Error *jetstream.APIError `json:"error,omitempty"`
		Seq   uint64              `json:"seq"`
	}
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return 0, fmt.Errorf("batch answer %q: %w", resp.Data, err)
	}
	if ack.Error != nil {
		return 0, ack.Error
	}
	return ack.Seq, nil
}

func sum(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}

// decodeStatus reads a status change message.
func decodeStatus(b []byte) (worker.StatusChange, bool) {
	var ch worker.StatusChange
	return ch, json.Unmarshal(b, &ch) == nil
}
