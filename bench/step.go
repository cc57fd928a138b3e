package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/worker"
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

// untilAll waits for every one of refs to change to status st.
func (w *statusWatch) untilAll(ctx context.Context, refs []streams.SessionRef, st record.Status, timeout time.Duration) (time.Time, error) {
	left := map[streams.SessionRef]bool{}
	for _, r := range refs {
		left[r] = true
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	for len(left) > 0 {
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-t.C:
			return time.Time{}, fmt.Errorf("%d of %d sessions not %s within %s", len(left), len(refs), st, timeout)
		case m := <-w.ch:
			var ch worker.StatusChange
			if json.Unmarshal(m.Data, &ch) == nil && ch.Status == st {
				if ref, err := streams.NewSessionRef(ch.Agent, ch.Session); err == nil {
					delete(left, ref)
				}
			}
		}
	}
	return time.Now(), nil
}

func (w *statusWatch) stop() { _ = w.sub.Unsubscribe() }

// StepSessions are the numbers of sessions the step measurement runs at
// once: one, and eight on one worker.
var StepSessions = []int{1, 8}

// benchStep measures durable steps (a scripted model without delay that
// calls a no-op, replay-safe tool every turn, until its turn budget ends
// the run) of one session and of eight at once on one in-process worker,
// then the operations the best possible implementation needs for as many
// steps (per step one KV create of the size of the step's entries and one
// compare-and-set of the size of its state), and compares.
func benchStep(ctx context.Context, e *env) (map[string]float64, error) {
	figs := map[string]float64{}
	for _, n := range StepSessions {
		sfx := ""
		if n > 1 {
			sfx = fmt.Sprintf("-%d", n)
		}
		w, raw, err := stepsVsRaw(ctx, e, n, max(n*4, e.cfg.Steps))
		if err != nil {
			return nil, fmt.Errorf("%d sessions: %w", n, err)
		}
		figs["steps/s"+sfx] = w.rate
		figs["step-p50-ms"+sfx] = percentile(w.durations, 0.5)
		figs["step-p99-ms"+sfx] = percentile(w.durations, 0.99)
		figs["raw-steps/s"+sfx] = raw.rate
		figs["raw-step-p50-ms"+sfx] = percentile(raw.durations, 0.5)
		figs["raw-step-p99-ms"+sfx] = percentile(raw.durations, 0.99)
		figs["ratio"+sfx] = w.rate / raw.rate
		figs["p50-ratio"+sfx] = figs["step-p50-ms"+sfx] / figs["raw-step-p50-ms"+sfx]
		figs["create-bytes"+sfx], figs["state-bytes"+sfx] = float64(w.createBytes), float64(w.stateBytes)
		figs["writes/step"+sfx] = float64(w.writes) / float64(w.steps)
		figs["session-writes/step"+sfx] = float64(w.sessionWrites) / float64(w.steps)
	}
	// The copies of what both ways write to.
	placed, err := e.placed(ctx, streams.KVStream(e.names.BucketSessions()))
	if err != nil {
		return nil, err
	}
	figs["replicas"] = placed
	return figs, nil
}

// stepRun is what one measured run of steps (or of their raw operations)
// did.
type stepRun struct {
	steps int
	rate  float64
	// durations are the steps' one by one.
	durations []time.Duration
	// createBytes and stateBytes are the sizes a step writes: its entries
	// (on average) and its state.
	createBytes, stateBytes int
	// writes are the messages JetStream stored during the steps' rounds,
	// in every stream, and sessionWrites those in jl_sessions (entries and
	// states): the raw pair's are two, both in jl_sessions.
	writes, sessionWrites int
}

// stepTurns bounds the turns of one measured session: the context of a
// long session costs more to build, which is no durable step's cost.
const stepTurns = 50

// measureSteps runs about steps steps on one worker, sessions sessions at
// once, in rounds of sessions of at most stepTurns turns. A step's
// duration is the time from the answer (or result) before it to its own:
// one effect and one settlement, read from the entries' times; the rate
// counts the steps after each session's first, over the rounds' time from
// the first of them to the last.
func measureSteps(ctx context.Context, e *env, sessions, steps int) (stepRun, error) {
	return measureStepRounds(ctx, e, sessions, steps, nil)
}

// stepsVsRaw measures about steps steps of sessions sessions at once
// (measureSteps) and, after each round of them, the raw operations of as
// many steps of the sizes measured so far (rawPairs): the two take turns,
// so both see the same load of a shared machine, and their ratio holds
// when the machine's speed changes during the run.
func stepsVsRaw(ctx context.Context, e *env, sessions, steps int) (stepRun, stepRun, error) {
	var raw stepRun
	var elapsed time.Duration
	w, err := measureStepRounds(ctx, e, sessions, steps, func(so stepRun) error {
		r, err := rawPairs(ctx, e, sessions, so.steps, so.createBytes, so.stateBytes)
		if err != nil {
			return fmt.Errorf("raw: %w", err)
		}
		raw.steps += r.steps
		raw.durations = append(raw.durations, r.durations...)
		raw.createBytes, raw.stateBytes = r.createBytes, r.stateBytes
		elapsed += time.Duration(float64(r.steps) / r.rate * float64(time.Second))
		return nil
	})
	if err != nil {
		return stepRun{}, stepRun{}, err
	}
	raw.rate = float64(raw.steps) / elapsed.Seconds()
	return w, raw, nil
}

// measureStepRounds is measureSteps calling after, if set, once each
// round is measured, with the steps of that round and the sizes so far.
func measureStepRounds(ctx context.Context, e *env, sessions, steps int, after func(stepRun) error) (stepRun, error) {
	turns := max(1, min(stepTurns, steps/sessions/2))
	rounds := max(1, steps/(sessions*turns*2))
	call := policies.ScriptEntry{Text: "again", ToolCalls: []policies.ScriptToolCall{{Name: "noop", Args: map[string]any{"n": 1}}}}
	def := policies.Definition{Name: "bench", Tools: []string{"noop"}, Budget: policies.Budget{MaxTurns: turns},
		Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{call}, Then: &call}}
	stop, err := e.runWorker(ctx, worker.Config{Definitions: fixedDefs{"bench": def}, Tools: worker.ToolMap{"noop": noop}, Agents: []string{"bench"},
		MaxSessions: max(sessions, worker.DefaultMaxSessions)})
	if err != nil {
		return stepRun{}, err
	}
	defer stop()
	watch, err := e.watchStatus()
	if err != nil {
		return stepRun{}, err
	}
	defer watch.stop()
	store, err := record.Open(ctx, e.js, e.names)
	if err != nil {
		return stepRun{}, err
	}
	var out stepRun
	var span time.Duration
	entryBytes, counted := 0, 0
	run := nuid.Next()
	for round := range rounds {
		refs := make([]streams.SessionRef, sessions)
		for i := range refs {
			refs[i], _ = streams.NewSessionRef("bench", fmt.Sprintf("steps-%s-%d-%d", run, round, i))
		}
		before, err := e.stored(ctx)
		if err != nil {
			return stepRun{}, err
		}
		for _, ref := range refs {
			if _, err := worker.Send(ctx, e.js, e.names, ref, worker.Request{Text: "go"}); err != nil {
				return stepRun{}, err
			}
		}
		if _, err := watch.untilAll(ctx, refs, record.StatusBudgetExceeded, 10*time.Minute); err != nil {
			return stepRun{}, err
		}
		var first, last time.Time
		for _, ref := range refs {
			tr, st, err := settled(ctx, e, store, ref, record.StatusBudgetExceeded)
			if err != nil {
				return stepRun{}, err
			}
			var prev time.Time
			for _, en := range tr.Transcript {
				if en.Step == 0 {
					continue
				}
				b, _ := json.Marshal(en)
				entryBytes += len(b)
				if en.Kind != record.KindAssistant && en.Kind != record.KindToolResult {
					continue
				}
				out.steps++
				switch {
				case !prev.IsZero():
					out.durations = append(out.durations, en.Time.Sub(prev))
				case first.IsZero() || en.Time.Before(first):
					first = en.Time
				}
				prev = en.Time
				if prev.After(last) {
					last = prev
				}
			}
			b, _ := json.Marshal(st)
			out.stateBytes = max(out.stateBytes, len(b))
		}
		span += last.Sub(first)
		stored, err := e.stored(ctx)
		if err != nil {
			return stepRun{}, err
		}
		for name, seq := range stored {
			n := int(seq - before[name])
			out.writes += n
			if name == streams.KVStream(e.names.BucketSessions()) {
				out.sessionWrites += n
			}
		}
		if after != nil && out.steps > 0 {
			if err := after(stepRun{steps: out.steps - counted, createBytes: entryBytes / out.steps, stateBytes: out.stateBytes}); err != nil {
				return stepRun{}, err
			}
		}
		counted = out.steps
	}
	if len(out.durations) == 0 || span <= 0 {
		return stepRun{}, fmt.Errorf("%d steps measured", out.steps)
	}
	out.rate = float64(len(out.durations)) / span.Seconds()
	out.createBytes = entryBytes / out.steps
	return out, nil
}

// stored returns the last sequence of every stream, by name: how many
// messages each has stored.
func (e *env) stored(ctx context.Context) (map[string]uint64, error) {
	out := map[string]uint64{}
	l := e.js.ListStreams(ctx)
	for info := range l.Info() {
		out[info.Config.Name] = info.State.LastSeq
	}
	if err := l.Err(); err != nil {
		return nil, fmt.Errorf("bench: list streams: %w", err)
	}
	return out, nil
}

// settled reads the transcript and the state of ref once they show
// status: a status change is heard once the leader stored it, and on a
// cluster a read may be answered by a replica that has not yet (a
// session not found, or its state before the change).
func settled(ctx context.Context, e *env, store *record.Store, ref streams.SessionRef, status record.Status) (record.Transcript, record.State, error) {
	ctx, cancel := context.WithTimeout(ctx, settledWait)
	defer cancel()
	var last error
	for {
		tr, err := record.Show(ctx, e.js, e.names, ref)
		var st record.State
		if err == nil {
			st, _, err = store.Load(ctx, ref)
		}
		switch {
		case err == nil && tr.Status == status && st.Status == status:
			return tr, st, nil
		case err == nil:
			last = fmt.Errorf("read as %s", st.Status)
		case errors.Is(err, record.ErrNotFound):
			last = err
		default:
			return record.Transcript{}, record.State{}, err
		}
		select {
		case <-ctx.Done():
			return record.Transcript{}, record.State{}, fmt.Errorf("%s not read as %s within %s: %w", ref, status, settledWait, last)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// settledWait bounds how long a replica's read may stay behind.
var settledWait = 10 * time.Second

// rawPairs makes, on sessions keys of their own at once, steps steps of
// what the best possible implementation needs: the create of a transcript
// entry of createBytes, then a compare-and-set of the state (stateBytes)
// over its revision.
func rawPairs(ctx context.Context, e *env, sessions, steps, createBytes, stateBytes int) (stepRun, error) {
	kv, err := e.js.KeyValue(ctx, e.names.BucketSessions())
	if err != nil {
		return stepRun{}, err
	}
	entry := bytes.Repeat([]byte("e"), max(1, createBytes))
	state := bytes.Repeat([]byte("s"), max(1, stateBytes))
	per := max(1, steps/sessions)
	run := nuid.Next()
	durations := make([][]time.Duration, sessions)
	errs := make([]error, sessions)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range sessions {
		wg.Go(func() {
			ref, _ := streams.NewSessionRef("bench", fmt.Sprintf("raw-%s-%d", run, i))
			rev, err := kv.Create(ctx, e.names.StateKey(ref), state)
			if err != nil {
				errs[i] = err
				return
			}
			for n := range per {
				t0 := time.Now()
				if _, err := kv.Create(ctx, e.names.LogKey(ref, uint64(n+1)), entry); err != nil {
					errs[i] = err
					return
				}
				if rev, err = kv.Update(ctx, e.names.StateKey(ref), state, rev); err != nil {
					errs[i] = err
					return
				}
				durations[i] = append(durations[i], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return stepRun{}, err
	}
	out := stepRun{steps: per * sessions, rate: float64(per*sessions) / elapsed.Seconds(), createBytes: createBytes, stateBytes: stateBytes}
	for _, d := range durations {
		out.durations = append(out.durations, d...)
	}
	return out, nil
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
