package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools"
)

// handModel answers each call with what the benchmark hands it, and shows
// the benchmark every request.
type handModel struct {
	calls   chan model.Request
	answers chan model.Response
}

func (h *handModel) Complete(ctx context.Context, req model.Request) (model.Response, error) {
	select {
	case h.calls <- req:
	case <-ctx.Done():
		return model.Response{}, ctx.Err()
	}
	select {
	case a := <-h.answers:
		return a, nil
	case <-ctx.Done():
		return model.Response{}, ctx.Err()
	}
}

// watchedTool runs a tool and says when each call began and returned.
type watchedTool struct {
	tools.Tool
	began    chan struct{}
	returned chan time.Time
}

func (w *watchedTool) Call(ctx context.Context, c tools.Call) (tools.Result, error) {
	w.began <- struct{}{}
	res, err := w.Tool.Call(ctx, c)
	w.returned <- time.Now()
	return res, err
}

// percentiles reports the p50 and p99 of ds, in microseconds, as metrics
// named name-p50-µs and name-p99-µs.
func percentiles(b *testing.B, name string, ds []time.Duration) {
	b.Helper()
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	at := func(q float64) float64 {
		i := min(len(ds)-1, int(q*float64(len(ds))))
		return float64(ds[i].Nanoseconds()) / 1e3
	}
	b.ReportMetric(at(0.50), name+"-p50-µs")
	b.ReportMetric(at(0.99), name+"-p99-µs")
}

// BenchmarkControlLatency measures, in one run against one server, the
// latency from a control publish (control.Publish, which waits for the
// JL_CTL ack) to its effect, b.N times each, as p50 and p99:
//
//   - raw: to the message's delivery by an ordered consumer on JL_CTL, the
//     floor any control path stands on;
//   - steer: a steer published while the session's model call is in
//     flight, which is then answered with a no-op tool call, to the next
//     model call holding the steer's text: the span covers the answer's
//     settlement, the steer's application, the tool step, the steer's
//     flush into the transcript and the next model intent;
//   - cancel: a cancel published while a shell call runs sleep 30, to the
//     shell's return with its process group gone (cancel-tool), and to the
//     session's cancelled status message (cancel-final).
//
// It runs on file storage with the server's defaults (every state write
// is fsynced by a single node), and on memory storage, which shows the
// worker's own share without the disk.
func BenchmarkControlLatency(b *testing.B) {
	b.Run("file", func(b *testing.B) { controlLatency(b, streams.Options{}) })
	b.Run("memory", func(b *testing.B) { controlLatency(b, streams.Options{Memory: true}) })
}

func controlLatency(b *testing.B, opts streams.Options) {
	js, names := benchServer(b, opts)
	ctx := context.Background()
	hand := &handModel{calls: make(chan model.Request), answers: make(chan model.Response)}
	noop := tools.NewFunc(tools.Spec{Name: "noop", Description: "nothing", Schema: json.RawMessage(`{"type":"object"}`), ReplaySafe: true, State: tools.Stateless},
		func(context.Context, tools.Call) (tools.Result, error) { return tools.Result{Content: "ok"}, nil })
	var shell tools.Tool
	for _, t := range tools.Builtins(tools.BuiltinConfig{}) {
		if t.Spec().Name == "shell" {
			shell = t
		}
	}
	sleeper := &watchedTool{Tool: shell, began: make(chan struct{}, 1), returned: make(chan time.Time, 1)}
	sleep := policies.ScriptEntry{Text: "sleeping", ToolCalls: []policies.ScriptToolCall{{Name: "shell", Args: map[string]any{"command": "echo $$ > pid.txt; exec sleep 30"}}}}
	defs := benchDefs{
		"steer":  {Name: "steer", Tools: []string{"noop"}, Model: policies.Model{Provider: "hand"}},
		"cancel": {Name: "cancel", Tools: []string{"shell"}, Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{sleep}}},
	}
	w, _ := benchWorker(b, js, Config{Definitions: defs, Agents: []string{"steer", "cancel"},
		Tools: ToolMap{"noop": noop, "shell": sleeper},
		Models: func(spec policies.Model) (model.Model, error) {
			if spec.Provider == "hand" {
				return hand, nil
			}
			return model.NewScripted(spec)
		}})

	// raw
	rawRef, _ := streams.NewSessionRef("raw", "s1")
	got := make(chan uint64, 1)
	oc, err := js.OrderedConsumer(ctx, names.StreamCtl(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{names.Ctl(rawRef)}, DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		b.Fatal(err)
	}
	cc, err := oc.Consume(func(m jetstream.Msg) {
		meta, _ := m.Metadata()
		got <- meta.Sequence.Stream
	})
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Stop()
	var raw, steer, cancelTool, cancelFinal []time.Duration
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		seq, err := control.Publish(ctx, js, names, rawRef, control.Message{Verb: control.Steer, Text: fmt.Sprintf("raw %d", i)})
		if err != nil {
			b.Fatal(err)
		}
		for s := range got {
			if s == seq {
				break
			}
		}
		raw = append(raw, time.Since(t0))
	}

	// steer
	ref, _ := streams.NewSessionRef("steer", "s1")
	if _, err := Send(ctx, js, names, ref, Request{Text: "go"}); err != nil {
		b.Fatal(err)
	}
	<-hand.calls
	for i := range b.N {
		text := fmt.Sprintf("steer %d", i)
		t0 := time.Now()
		if _, err := control.Publish(ctx, js, names, ref, control.Message{Verb: control.Steer, Text: text}); err != nil {
			b.Fatal(err)
		}
		hand.answers <- model.Response{Text: "again", ToolCalls: []model.ToolCall{{ID: fmt.Sprintf("c%d", i), Name: "noop", Args: json.RawMessage(`{}`)}}}
		req := <-hand.calls
		steer = append(steer, time.Since(t0))
		if last := req.Messages[len(req.Messages)-1]; last.Role != model.RoleUser || !strings.Contains(last.Text, text) {
			b.Fatalf("call after steer %d ends with %+v", i, last)
		}
	}
	hand.answers <- model.Response{Text: "done"}
	waitState(b, w.store, ref, record.StatusDone)

	// cancel
	statuses, err := js.Conn().SubscribeSync(names.StatusAll())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = statuses.Unsubscribe() }()
	for i := range b.N {
		ref, _ := streams.NewSessionRef("cancel", fmt.Sprintf("s%d", i))
		if _, err := Send(ctx, js, names, ref, Request{Text: "sleep"}); err != nil {
			b.Fatal(err)
		}
		<-sleeper.began
		at, st, _ := strings.Cut(ref.Key(), ".")
		pidFile := filepath.Join(w.cfg.WorkDir, at, st, "pid.txt")
		for {
			if b, err := os.ReadFile(pidFile); err == nil && len(b) > 0 {
				break
			}
			time.Sleep(200 * time.Microsecond)
		}
		t0 := time.Now()
		if _, err := control.Publish(ctx, js, names, ref, control.Message{Verb: control.Cancel}); err != nil {
			b.Fatal(err)
		}
		cancelTool = append(cancelTool, (<-sleeper.returned).Sub(t0))
		for {
			m, err := statuses.NextMsg(time.Minute)
			if err != nil {
				b.Fatal(err)
			}
			var ch StatusChange
			if json.Unmarshal(m.Data, &ch) == nil && ch.Agent == "cancel" && ch.Session == ref.Session && ch.Status == record.StatusCancelled {
				break
			}
		}
		cancelFinal = append(cancelFinal, time.Since(t0))
	}
	b.StopTimer()
	percentiles(b, "raw", raw)
	percentiles(b, "steer", steer)
	percentiles(b, "cancel-tool", cancelTool)
	percentiles(b, "cancel-final", cancelFinal)
}
