package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/worker"
)

// handModel answers each call with what the measurement hands it, and
// shows the measurement every request.
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

// recv waits for one value of ch, or fails after timeout.
func recv[T any](ctx context.Context, ch <-chan T, timeout time.Duration, what string) (T, error) {
	var zero T
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case v := <-ch:
		return v, nil
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-t.C:
		return zero, fmt.Errorf("no %s within %s", what, timeout)
	}
}

// send hands v to ch, or fails after timeout.
func send[T any](ctx context.Context, ch chan<- T, v T, timeout time.Duration, what string) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case ch <- v:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("%s not taken within %s", what, timeout)
	}
}

// benchControl measures, Control times each, the latency from a control
// publish (control.Publish, which waits for the JL_CTL ack) to:
//
//   - raw: the message's delivery to an ordered consumer on JL_CTL, the
//     floor any control path stands on;
//   - steer: a steer published while the session's model call is in
//     flight (then answered with a no-op tool call) to the next model call
//     holding the steer's text: it spans the answer's settlement, the
//     steer's application, the tool step, the steer's flush into the
//     transcript and the next model intent;
//   - cancel-tool: a cancel published while a shell call runs sleep 30 to
//     the shell's return, its process group gone;
//   - cancel-final: the same cancel to the session's cancelled status.
func benchControl(ctx context.Context, e *env) (map[string]float64, error) {
	n := e.cfg.Control
	const wait = time.Minute
	hand := &handModel{calls: make(chan model.Request), answers: make(chan model.Response)}
	var shell tools.Tool
	for _, t := range tools.Builtins(tools.BuiltinConfig{}) {
		if t.Spec().Name == "shell" {
			shell = t
		}
	}
	if shell == nil {
		return nil, errors.New("no shell tool among the built-ins")
	}
	sleeper := &watchedTool{Tool: shell, began: make(chan struct{}, 1), returned: make(chan time.Time, 1)}
	sleep := policies.ScriptEntry{Text: "sleeping", ToolCalls: []policies.ScriptToolCall{{Name: "shell", Args: map[string]any{"command": "echo $$ > pid.txt; exec sleep 30"}}}}
	defs := fixedDefs{
		"steer":  {Name: "steer", Tools: []string{"noop"}, Model: policies.Model{Provider: "hand"}},
		"cancel": {Name: "cancel", Tools: []string{"shell"}, Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{sleep}}},
	}
	stop, err := e.runWorker(ctx, worker.Config{Definitions: defs, Agents: []string{"steer", "cancel"},
		Tools: worker.ToolMap{"noop": noop, "shell": sleeper},
		Models: func(spec policies.Model) (model.Model, error) {
			if spec.Provider == "hand" {
				return hand, nil
			}
			return model.NewScripted(spec)
		}})
	if err != nil {
		return nil, err
	}
	defer stop()

	// raw
	rawRef, _ := streams.NewSessionRef("raw", "s1")
	got := make(chan uint64, 16)
	oc, err := e.js.OrderedConsumer(ctx, e.names.StreamCtl(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{e.names.Ctl(rawRef)}, DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		return nil, err
	}
	cc, err := oc.Consume(func(m jetstream.Msg) {
		if md, err := m.Metadata(); err == nil {
			got <- md.Sequence.Stream
		}
	})
	if err != nil {
		return nil, err
	}
	defer cc.Stop()
	var raw, steer, cancelTool, cancelFinal []time.Duration
	for i := range n {
		t0 := time.Now()
		seq, err := control.Publish(ctx, e.js, e.names, rawRef, control.Message{Verb: control.Steer, Text: fmt.Sprintf("raw %d", i)})
		if err != nil {
			return nil, err
		}
		for {
			s, err := recv(ctx, got, wait, "raw delivery")
			if err != nil {
				return nil, err
			}
			if s == seq {
				break
			}
		}
		raw = append(raw, time.Since(t0))
	}

	// steer
	ref, _ := streams.NewSessionRef("steer", "s1")
	if _, err := worker.Send(ctx, e.js, e.names, ref, worker.Request{Text: "go"}); err != nil {
		return nil, err
	}
	if _, err := recv(ctx, hand.calls, wait, "first model call"); err != nil {
		return nil, err
	}
	for i := range n {
		text := fmt.Sprintf("steer %d", i)
		t0 := time.Now()
		if _, err := control.Publish(ctx, e.js, e.names, ref, control.Message{Verb: control.Steer, Text: text}); err != nil {
			return nil, err
		}
		answer := model.Response{Text: "again", ToolCalls: []model.ToolCall{{ID: fmt.Sprintf("c%d", i), Name: "noop", Args: json.RawMessage(`{}`)}}}
		if err := send(ctx, hand.answers, answer, wait, "answer"); err != nil {
			return nil, err
		}
		req, err := recv(ctx, hand.calls, wait, "model call after a steer")
		if err != nil {
			return nil, err
		}
		steer = append(steer, time.Since(t0))
		if last := req.Messages[len(req.Messages)-1]; last.Role != model.RoleUser || !strings.Contains(last.Text, text) {
			return nil, fmt.Errorf("the model call after steer %d does not end with it: %+v", i, last)
		}
	}
	if err := send(ctx, hand.answers, model.Response{Text: "done"}, wait, "last answer"); err != nil {
		return nil, err
	}

	// cancel
	watch, err := e.watchStatus()
	if err != nil {
		return nil, err
	}
	defer watch.stop()
	for i := range n {
		ref, _ := streams.NewSessionRef("cancel", fmt.Sprintf("s%d", i))
		if _, err := worker.Send(ctx, e.js, e.names, ref, worker.Request{Text: "sleep"}); err != nil {
			return nil, err
		}
		if _, err := recv(ctx, sleeper.began, wait, "shell call"); err != nil {
			return nil, err
		}
		// The shell writes its pid once it runs; cancel after that.
		at, st, _ := strings.Cut(ref.Key(), ".")
		pidFile := filepath.Join(e.dir, "work", at, st, "pid.txt")
		for deadline := time.Now().Add(wait); ; {
			if b, err := os.ReadFile(pidFile); err == nil && len(b) > 0 {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("shell of %s wrote no pid within %s", ref, wait)
			}
			time.Sleep(200 * time.Microsecond)
		}
		t0 := time.Now()
		if _, err := control.Publish(ctx, e.js, e.names, ref, control.Message{Verb: control.Cancel}); err != nil {
			return nil, err
		}
		returned, err := recv(ctx, sleeper.returned, wait, "shell return after cancel")
		if err != nil {
			return nil, err
		}
		cancelTool = append(cancelTool, returned.Sub(t0))
		end, err := watch.until(ctx, ref, record.StatusCancelled, wait)
		if err != nil {
			return nil, err
		}
		cancelFinal = append(cancelFinal, end.Sub(t0))
	}
	return map[string]float64{
		"raw-p50-ms":          percentile(raw, 0.5),
		"raw-p99-ms":          percentile(raw, 0.99),
		"steer-p50-ms":        percentile(steer, 0.5),
		"steer-p99-ms":        percentile(steer, 0.99),
		"cancel-tool-p50-ms":  percentile(cancelTool, 0.5),
		"cancel-tool-p99-ms":  percentile(cancelTool, 0.99),
		"cancel-final-p50-ms": percentile(cancelFinal, 0.5),
		"cancel-final-p99-ms": percentile(cancelFinal, 0.99),
	}, nil
}
