package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jetloop/jetloop/internal/openaifake"
	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/worker"
)

// Measurements of a session's cost over its age.
const (
	// Age: events into one persistent session; the runtime's time per
	// event late in its life against early.
	Age = "age"
	// Window: ticks of a monitoring session on the OpenAI provider; the
	// input of every call, with a context policy and without.
	Window = "window"
)

// Defaults of the age and window measurements.
const (
	DefaultAgeEvents    = 2000
	DefaultWindowTicks  = 500
	windowCompactTokens = 8000
	// ageSample is how many of the first and of the last events the age
	// measurement averages.
	ageSample = 100
)

// probe is a replay-safe tool whose every result is 4 KB, as a monitor's
// check of an endpoint might be.
var probe = tools.NewFunc(tools.Spec{Name: "probe", Description: "check the endpoint", Schema: json.RawMessage(`{"type":"object"}`), ReplaySafe: true, State: tools.Stateless},
	func(_ context.Context, c tools.Call) (tools.Result, error) {
		return tools.Result{Content: c.ID + " " + strings.Repeat("status 200, latency 41 ms; ", 4096/27)}, nil
	})

// benchAge sends events one after another into one persistent session
// whose scripted model calls the probe and answers, under a context
// policy, and measures each event from its publish to the session at
// rest: the mean of the last ageSample against the first. Raw: the
// JetStream operations one such event needs at least (see rawEvents).
func benchAge(ctx context.Context, e *env) (map[string]float64, error) {
	n := max(e.cfg.AgeEvents, 2*ageSample)
	first, last := 1, 4
	call := policies.ScriptEntry{Text: "Checking.", ToolCalls: []policies.ScriptToolCall{{Name: "probe"}}}
	def := policies.Definition{Name: "age", Tools: []string{"probe"},
		Model:   policies.Model{Provider: "scripted", ScriptScope: "run", Script: []policies.ScriptEntry{call, {Text: "Nothing changed."}}},
		Context: &policies.ContextPolicy{MaskAfterTurns: 4, CompactAtTokens: 4000, KeepFirstTurns: &first, KeepLastTurns: &last}}
	stop, err := e.runWorker(ctx, worker.Config{Definitions: fixedDefs{"age": def}, Tools: worker.ToolMap{"probe": probe}, Agents: []string{"age"}})
	if err != nil {
		return nil, err
	}
	defer stop()
	watch, err := e.watchStatus()
	if err != nil {
		return nil, err
	}
	defer watch.stop()
	ref, _ := streams.NewSessionRef("age", "monitor")
	per := make([]time.Duration, 0, n)
	progress := time.Now()
	for i := range n {
		t0 := time.Now()
		if _, err := worker.Send(ctx, e.js, e.names, ref, worker.Request{Text: fmt.Sprintf("tick %d", i)}); err != nil {
			return nil, err
		}
		if _, err := watch.until(ctx, ref, record.StatusDone, time.Minute); err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		per = append(per, time.Since(t0))
		if time.Since(progress) > 10*time.Second {
			e.cfg.Log.Info("age: events", "done", i+1, "of", n)
			progress = time.Now()
		}
	}
	st, _, err := loadState(ctx, e, ref)
	if err != nil {
		return nil, err
	}
	stop()
	raw, err := rawEvents(ctx, e, ageSample)
	if err != nil {
		return nil, fmt.Errorf("raw events: %w", err)
	}
	firstMean, lastMean := mean(per[:ageSample]), mean(per[len(per)-ageSample:])
	rawEvent := mean(raw)
	return map[string]float64{
		"events":        float64(n),
		"first-ms":      ms64(firstMean),
		"last-ms":       ms64(lastMean),
		"last/first":    float64(lastMean) / float64(firstMean),
		"raw-event-ms":  ms64(rawEvent),
		"ratio-to-raw":  float64(lastMean) / float64(rawEvent),
		"entries":       float64(st.NextEntry - 1),
		"live-entries":  float64(liveCount(st)),
		"compacted":     boolf(st.Summary != 0),
		"summarised":    float64(st.Summarised),
		"run-turns/evt": 2,
	}, nil
}

// benchWindow runs ticks through a persistent monitoring session on the
// OpenAI provider, against an in-process server of its wire format that
// records every request, twice: with a context policy, and without one.
// Each tick the model calls the probe (4 KB) and answers. It reports the
// input of the calls as the provider counted it: with the policy, the
// largest (it stays under compact_at_tokens plus one tick's worth) and
// the last; without, the first and the last, and the growth per tick.
func benchWindow(ctx context.Context, e *env) (map[string]float64, error) {
	ticks := max(e.cfg.WindowTicks, 10)
	first, last := 1, 4
	with := &policies.ContextPolicy{MaskAfterTurns: 4, CompactAtTokens: windowCompactTokens, KeepFirstTurns: &first, KeepLastTurns: &last}
	out := map[string]float64{"ticks": float64(ticks), "compact-at-tokens": windowCompactTokens}
	for _, run := range []struct {
		name   string
		policy *policies.ContextPolicy
	}{{"with", with}, {"without", nil}} {
		reqs, err := windowRun(ctx, e, run.name, run.policy, ticks)
		if err != nil {
			return nil, fmt.Errorf("%s a context policy: %w", run.name, err)
		}
		var calls []openaifake.Request
		compactions := 0
		for _, r := range reqs {
			if strings.HasPrefix(r.System(), "You compact the history") {
				compactions++
				continue
			}
			calls = append(calls, r)
		}
		if len(calls) < 2 {
			return nil, fmt.Errorf("%s a context policy: %d model calls", run.name, len(calls))
		}
		var largest int64
		for _, r := range calls {
			largest = max(largest, r.PromptTokens)
		}
		firstIn, lastIn := calls[0].PromptTokens, calls[len(calls)-1].PromptTokens
		out[run.name+"-first-tokens"] = float64(firstIn)
		out[run.name+"-last-tokens"] = float64(lastIn)
		out[run.name+"-max-tokens"] = float64(largest)
		out[run.name+"-tokens/tick"] = float64(lastIn-firstIn) / float64(ticks-1)
		out[run.name+"-compactions"] = float64(compactions)
		out[run.name+"-last-request-KB"] = float64(calls[len(calls)-1].Bytes) / 1024
	}
	return out, nil
}

// windowRun is one run of benchWindow, on a session of its own.
func windowRun(ctx context.Context, e *env, name string, policy *policies.ContextPolicy, ticks int) ([]openaifake.Request, error) {
	fake := openaifake.New(func(_ int, req openaifake.Request) openaifake.Reply {
		switch {
		case strings.HasPrefix(req.System(), "You compact the history"):
			return openaifake.Reply{Text: "Summary: the endpoint answered 200 at every check, latency steady around 41 ms."}
		case req.Last().Role == "tool":
			return openaifake.Reply{Text: "No drift since the last check."}
		}
		return openaifake.Reply{Text: "Checking.", ToolCalls: []openaifake.Call{{Name: "probe"}}}
	})
	defer fake.Close()
	agent := "window-" + name
	def := policies.Definition{Name: agent, Tools: []string{"probe"}, System: "Every tick, check the endpoint with probe and say what drifted.",
		Model:   policies.Model{Provider: "openai", Name: "gpt-4o-mini", BaseURL: fake.BaseURL(), APIKeyEnv: "JETLOOP_BENCH_NO_KEY"},
		Context: policy}
	stop, err := e.runWorker(ctx, worker.Config{Definitions: fixedDefs{agent: def}, Tools: worker.ToolMap{"probe": probe}, Agents: []string{agent},
		Models: func(spec policies.Model) (model.Model, error) {
			return model.NewOpenAI(spec, model.WithGetenv(func(string) string { return "bench" }))
		}})
	if err != nil {
		return nil, err
	}
	defer stop()
	watch, err := e.watchStatus()
	if err != nil {
		return nil, err
	}
	defer watch.stop()
	ref, _ := streams.NewSessionRef(agent, "health")
	progress := time.Now()
	for i := range ticks {
		if _, err := worker.Send(ctx, e.js, e.names, ref, worker.Request{Text: fmt.Sprintf("tick %d: check the endpoint", i)}); err != nil {
			return nil, err
		}
		if _, err := watch.until(ctx, ref, record.StatusDone, time.Minute); err != nil {
			return nil, fmt.Errorf("tick %d: %w", i, err)
		}
		if time.Since(progress) > 10*time.Second {
			e.cfg.Log.Info("window: ticks", "run", name, "done", i+1, "of", ticks)
			progress = time.Now()
		}
	}
	return fake.Requests(), nil
}

// rawEvents does, n times, the JetStream operations one event of
// benchAge needs at least, in sequence: its publish, the state write that
// records it, then for each of its three steps (model call, tool call,
// model call) the entry the step's settlement creates and the state
// write that names it (the next step's intent riding on it). It returns
// each event's duration.
func rawEvents(ctx context.Context, e *env, n int) ([]time.Duration, error) {
	kv, err := e.js.KeyValue(ctx, e.names.BucketSessions())
	if err != nil {
		return nil, err
	}
	ref, _ := streams.NewSessionRef("age", "raw")
	key := e.names.StateKey(ref)
	st := record.NewState("age", "raw", time.Now().UTC())
	b, _ := json.Marshal(st)
	rev, err := kv.Create(ctx, key, b)
	if err != nil {
		return nil, err
	}
	out := make([]time.Duration, 0, n)
	text := strings.Repeat("x", 200)
	for i := range n {
		t0 := time.Now()
		if _, err := e.js.Publish(ctx, e.names.In(ref), []byte(fmt.Sprintf(`{"text":"tick %d"}`, i))); err != nil {
			return nil, err
		}
		for step := range 4 {
			if step > 0 {
				en := record.Entry{ID: st.NextEntry, Kind: record.KindAssistant, Text: text, Time: time.Now().UTC()}
				eb, _ := json.Marshal(en)
				if _, err := kv.Create(ctx, e.names.LogKey(ref, en.ID), eb); err != nil {
					return nil, err
				}
				st.NextEntry++
			}
			st.Steps++
			sb, _ := json.Marshal(st)
			if rev, err = kv.Update(ctx, key, sb, rev); err != nil {
				return nil, err
			}
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}

func loadState(ctx context.Context, e *env, ref streams.SessionRef) (record.State, uint64, error) {
	s, err := record.Open(ctx, e.js, e.names)
	if err != nil {
		return record.State{}, 0, err
	}
	return s.Load(ctx, ref)
}

func liveCount(st record.State) int {
	n := 0
	for _, sp := range st.Live() {
		n += int(sp.To - sp.From + 1)
	}
	return n
}

func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return sum(ds) / time.Duration(len(ds))
}

func ms64(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func boolf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
