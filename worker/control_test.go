package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/dlq"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/worker"
)

// probe wraps a model: it records every request, and holds the first call
// until hold is closed (or its context ends, as a provider's HTTP request
// would).
type probe struct {
	inner   model.Model
	hold    chan struct{} // nil: no call is held
	calling chan struct{} // receives when the held call starts

	mu   sync.Mutex
	reqs []model.Request
}

func newProbe(hold bool) *probe {
	p := &probe{calling: make(chan struct{}, 1)}
	if hold {
		p.hold = make(chan struct{})
	}
	return p
}

func (p *probe) factory(spec policies.Model) (model.Model, error) {
	inner, err := model.NewScripted(spec)
	p.mu.Lock()
	p.inner = inner
	p.mu.Unlock()
	return p, err
}

func (p *probe) Complete(ctx context.Context, req model.Request) (model.Response, error) {
	p.mu.Lock()
	p.reqs = append(p.reqs, req)
	first := len(p.reqs) == 1
	inner := p.inner
	p.mu.Unlock()
	if first && p.hold != nil {
		p.calling <- struct{}{}
		select {
		case <-p.hold:
		case <-ctx.Done():
			return model.Response{}, ctx.Err()
		}
	}
	return inner.Complete(ctx, req)
}

// requests returns the requests made so far.
func (p *probe) requests() []model.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]model.Request(nil), p.reqs...)
}

// userText is everything the user role said in a request.
func userText(req model.Request) string {
	var b strings.Builder
	for _, m := range req.Messages {
		if m.Role == model.RoleUser {
			b.WriteString(m.Text)
			b.WriteString("\n")
		}
	}
	return b.String()
}

func publish(t *testing.T, e *env, ref streams.SessionRef, m control.Message) uint64 {
	t.Helper()
	seq, err := control.Publish(context.Background(), e.js, e.names, ref, m)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// state reads a session's state as the worker wrote it.
func state(t *testing.T, e *env, ref streams.SessionRef) record.State {
	t.Helper()
	kv, err := e.js.KeyValue(context.Background(), e.names.BucketSessions())
	if err != nil {
		t.Fatal(err)
	}
	kve, err := kv.Get(context.Background(), e.names.StateKey(ref))
	if err != nil {
		t.Fatal(err)
	}
	var st record.State
	if err := json.Unmarshal(kve.Value(), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// count returns how many transcript entries have kind and name.
func count(tr record.Transcript, kind record.Kind, name string) int {
	n := 0
	for _, e := range tr.Transcript {
		if e.Kind == kind && (name == "" || e.Name == name) {
			n++
		}
	}
	return n
}

func registry(t *testing.T) (*worker.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := worker.NewMetrics()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// waitIdleWorker waits until the worker runs no session: a waiting session
// holds no goroutine.
func waitIdleWorker(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	natstest.WaitFor(t, 30*time.Second, func() error {
		if v := metricValue(t, reg, "jetloop_worker_sessions_running"); v != 0 {
			return fmt.Errorf("%v sessions running", v)
		}
		return nil
	})
}

// TestSteerJoinsNextModelCall steers a working session while its model
// call is in flight: the call is not disturbed, the session never pauses,
// and the next model call sees the text, once.
func TestSteerJoinsNextModelCall(t *testing.T) {
	e := setup(t)
	led := &ledger{path: filepath.Join(t.TempDir(), "ledger")}
	p := newProbe(true)
	def := policies.Definition{Name: "demo", Tools: []string{"ledger"}, Model: scripted(callLedger("Looking."), policies.ScriptEntry{Text: "Done."})}
	e.start(t, worker.Config{Definitions: defs{"demo": def}, Tools: worker.ToolMap{"ledger": led}, Agents: []string{"demo"}, Models: p.factory})
	ref := e.ref(t, "demo", "s1")
	e.send(t, ref, "hello")
	<-p.calling
	seq := publish(t, e, ref, control.Message{Verb: control.Steer, Text: "focus on the tests"})
	close(p.hold)
	tr := e.waitStatus(t, ref, record.StatusDone)
	if got, want := kinds(tr), "user,assistant,tool_call,tool_result,control,assistant"; got != want {
		t.Fatalf("transcript %s, want %s", got, want)
	}
	reqs := p.requests()
	if len(reqs) != 2 || strings.Contains(userText(reqs[0]), "focus") || strings.Count(userText(reqs[1]), "[steer] focus on the tests") != 1 {
		t.Fatalf("requests: first %q, last %q", userText(reqs[0]), userText(reqs[len(reqs)-1]))
	}
	if st := state(t, e, ref); len(st.Steers) != 0 || st.CtlSeq != seq {
		t.Fatalf("state after the run: %d steers, ctl_seq %d", len(st.Steers), st.CtlSeq)
	}
	if n := len(led.lines(t)); n != 1 {
		t.Fatalf("tool ran %d times", n)
	}
}

// TestInterruptPausesAndResumeContinues interrupts a working session: it
// pauses at the next step boundary, holding nothing; resume continues it
// with its text in the context.
func TestInterruptPausesAndResumeContinues(t *testing.T) {
	e := setup(t)
	led := &ledger{path: filepath.Join(t.TempDir(), "ledger")}
	p := newProbe(true)
	m, reg := registry(t)
	def := policies.Definition{Name: "demo", Tools: []string{"ledger"}, Model: scripted(callLedger("Looking."), policies.ScriptEntry{Text: "Done."})}
	e.start(t, worker.Config{Definitions: defs{"demo": def}, Tools: worker.ToolMap{"ledger": led}, Agents: []string{"demo"}, Models: p.factory, Metrics: m})
	ref := e.ref(t, "demo", "s1")
	e.send(t, ref, "hello")
	<-p.calling
	publish(t, e, ref, control.Message{Verb: control.Interrupt, Text: "hold on"})
	close(p.hold)
	tr := e.waitStatus(t, ref, record.StatusPaused)
	// The model call in flight settled; nothing after it ran.
	if got, want := kinds(tr), "user,assistant,tool_call,control"; got != want {
		t.Fatalf("paused transcript %s, want %s", got, want)
	}
	if tr.Reason != "interrupted: hold on" || tr.Pending != nil || len(led.lines(t)) != 0 {
		t.Fatalf("paused: reason %q, pending %+v, ledger %v", tr.Reason, tr.Pending, led.lines(t))
	}
	waitIdleWorker(t, reg)

	publish(t, e, ref, control.Message{Verb: control.Resume, Text: "carry on"})
	tr = e.waitStatus(t, ref, record.StatusDone)
	if got, want := kinds(tr), "user,assistant,tool_call,control,control,tool_result,assistant"; got != want {
		t.Fatalf("transcript %s, want %s", got, want)
	}
	reqs := p.requests()
	if last := userText(reqs[len(reqs)-1]); !strings.Contains(last, "[resume] carry on") || strings.Contains(last, "hold on") {
		t.Fatalf("last request's user text %q", last)
	}
	checkCalls(t, tr)
}

// shellTools are the built-in shell, as the worker serves it.
func shellTools(t *testing.T) worker.Tools {
	t.Helper()
	for _, tool := range tools.Builtins(tools.BuiltinConfig{ShellGrace: 2 * time.Second}) {
		if tool.Spec().Name == "shell" {
			return worker.ToolMap{"shell": tool}
		}
	}
	t.Fatal("no built-in shell")
	return nil
}

// alive reports whether pid is a live process (not a zombie).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// readPID waits for a pid file and returns its pid.
func readPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	natstest.WaitFor(t, 30*time.Second, func() error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err
	})
	return pid
}

// TestCancelStopsRunningShell cancels a session whose shell call sleeps:
// the sleep's process is gone, the call gets the result "cancelled; may or
// may not have run" (it ran in part), the intent is cleared and the
// session ends cancelled; later messages do nothing.
func TestCancelStopsRunningShell(t *testing.T) {
	e := setup(t)
	work := t.TempDir()
	def := policies.Definition{Name: "sleeper", Tools: []string{"shell"}, Model: scripted(
		policies.ScriptEntry{Text: "Sleeping.", ToolCalls: []policies.ScriptToolCall{{Name: "shell", Args: map[string]any{"command": "echo $$ > pid.txt; exec sleep 30"}}}},
		policies.ScriptEntry{Text: "Woke up."},
	)}
	e.start(t, worker.Config{Definitions: defs{"sleeper": def}, Tools: shellTools(t), Agents: []string{"sleeper"}, WorkDir: work})
	ref := e.ref(t, "sleeper", "s1")
	e.send(t, ref, "sleep")
	at, st, _ := strings.Cut(ref.Key(), ".")
	pid := readPID(t, filepath.Join(work, at, st, "pid.txt"))
	if !alive(pid) {
		t.Fatalf("sleep %d is not running", pid)
	}
	statuses, err := e.js.Conn().SubscribeSync(e.names.Status(ref))
	if err != nil {
		t.Fatal(err)
	}
	publish(t, e, ref, control.Message{Verb: control.Cancel, Text: "stop it"})
	// The status message is the event the cancel took effect on.
	for {
		m, err := statuses.NextMsg(30 * time.Second)
		if err != nil {
			t.Fatalf("no cancelled status: %v", err)
		}
		var ch worker.StatusChange
		if err := json.Unmarshal(m.Data, &ch); err != nil {
			t.Fatal(err)
		}
		if ch.Status == record.StatusCancelled {
			break
		}
	}
	if alive(pid) {
		t.Fatalf("sleep %d still runs after the session was cancelled", pid)
	}
	tr, err := record.Show(context.Background(), e.js, e.names, ref)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := kinds(tr), "user,assistant,tool_call,control,tool_result"; got != want {
		t.Fatalf("transcript %s, want %s", got, want)
	}
	if r := tr.Transcript[4]; r.Result != "cancelled; may or may not have run" || !r.IsError {
		t.Fatalf("shell result %+v", r)
	}
	if tr.Pending != nil || tr.Reason != "cancelled: stop it" {
		t.Fatalf("pending %+v, reason %q", tr.Pending, tr.Reason)
	}
	checkCalls(t, tr)

	// Final: a steer is recorded as ignored, an event dead-lettered.
	seq := publish(t, e, ref, control.Message{Verb: control.Steer, Text: "too late"})
	natstest.WaitFor(t, 30*time.Second, func() error {
		if st := state(t, e, ref); st.CtlSeq != seq {
			return fmt.Errorf("ctl_seq %d, want %d", st.CtlSeq, seq)
		}
		return nil
	})
	if st := state(t, e, ref); st.Status != record.StatusCancelled || len(st.Steers) != 0 {
		t.Fatalf("state %s with %d steers", st.Status, len(st.Steers))
	}
}

// TestCancelAbortsModelCall cancels a session during its model call: the
// request's context ends, the call is counted as of unknown usage, and
// the session is cancelled.
func TestCancelAbortsModelCall(t *testing.T) {
	e := setup(t)
	p := newProbe(true)
	def := policies.Definition{Name: "demo", Model: scripted(policies.ScriptEntry{Text: "never"})}
	e.start(t, worker.Config{Definitions: defs{"demo": def}, Agents: []string{"demo"}, Models: p.factory})
	ref := e.ref(t, "demo", "s1")
	e.send(t, ref, "hello")
	<-p.calling
	publish(t, e, ref, control.Message{Verb: control.Cancel})
	tr := e.waitStatus(t, ref, record.StatusCancelled)
	if got, want := kinds(tr), "user,control"; got != want {
		t.Fatalf("transcript %s, want %s", got, want)
	}
	if tr.Pending != nil || tr.Budget.Usage.UnknownUsageCalls != 1 || tr.Reason != "cancelled" {
		t.Fatalf("pending %+v, usage %+v, reason %q", tr.Pending, tr.Budget.Usage, tr.Reason)
	}
}

// TestInterruptThenCancelDuringModelCall sends an interrupt and then a
// cancel while a model call is in flight: the cancel aborts the call, and
// both apply in order at once (nothing is recovered in between).
func TestInterruptThenCancelDuringModelCall(t *testing.T) {
	e := setup(t)
	p := newProbe(true)
	def := policies.Definition{Name: "demo", Model: scripted(policies.ScriptEntry{Text: "never"})}
	e.start(t, worker.Config{Definitions: defs{"demo": def}, Agents: []string{"demo"}, Models: p.factory})
	ref := e.ref(t, "demo", "s1")
	e.send(t, ref, "hello")
	<-p.calling
	publish(t, e, ref, control.Message{Verb: control.Interrupt})
	publish(t, e, ref, control.Message{Verb: control.Cancel})
	tr := e.waitStatus(t, ref, record.StatusCancelled)
	if got, want := kinds(tr), "user,control,control"; got != want {
		t.Fatalf("transcript %s, want %s", got, want)
	}
	if len(p.requests()) != 1 || tr.Budget.Usage.UnknownUsageCalls != 1 || tr.Pending != nil {
		t.Fatalf("%d model calls, usage %+v, pending %+v", len(p.requests()), tr.Budget.Usage, tr.Pending)
	}
}

// TestCancelPausedSession cancels a session nobody runs: a worker leases
// it for the message and ends it, answering the call it left open.
func TestCancelPausedSession(t *testing.T) {
	e := setup(t)
	m, reg := registry(t)
	p := newProbe(true)
	led := &ledger{path: filepath.Join(t.TempDir(), "ledger")}
	def := policies.Definition{Name: "demo", Tools: []string{"ledger"}, Model: scripted(callLedger("Looking."), policies.ScriptEntry{Text: "Done."})}
	e.start(t, worker.Config{Definitions: defs{"demo": def}, Tools: worker.ToolMap{"ledger": led}, Agents: []string{"demo"}, Models: p.factory, Metrics: m})
	ref := e.ref(t, "demo", "s1")
	e.send(t, ref, "hello")
	<-p.calling
	publish(t, e, ref, control.Message{Verb: control.Interrupt})
	close(p.hold)
	e.waitStatus(t, ref, record.StatusPaused)
	waitIdleWorker(t, reg)
	// A second interrupt has nothing to act on: it is noted, nothing else.
	publish(t, e, ref, control.Message{Verb: control.Interrupt})
	publish(t, e, ref, control.Message{Verb: control.Cancel, Text: "no longer needed"})
	tr := e.waitStatus(t, ref, record.StatusCancelled)
	if tr.Reason != "cancelled: no longer needed" || len(led.lines(t)) != 0 {
		t.Fatalf("reason %q, ledger %v", tr.Reason, led.lines(t))
	}
	if got, want := kinds(tr), "user,assistant,tool_call,control,system,control,tool_result"; got != want {
		t.Fatalf("transcript %s, want %s", got, want)
	}
	checkCalls(t, tr)
}

// TestResumeAnswersAskHuman answers a blocked ask_human with resume: its
// text is the call's result and the session goes back to work.
func TestResumeAnswersAskHuman(t *testing.T) {
	e := setup(t)
	p := newProbe(false)
	m, reg := registry(t)
	def := policies.Definition{Name: "asker", Tools: []string{"ask"}, Model: scripted(
		policies.ScriptEntry{Text: "Let me ask.", ToolCalls: []policies.ScriptToolCall{{Name: "ask", Args: map[string]any{"question": "Deploy to prod?"}}}},
		policies.ScriptEntry{Text: "Deployed."},
	)}
	e.start(t, worker.Config{Definitions: defs{"asker": def}, Tools: worker.ToolMap{"ask": asker{}}, Agents: []string{"asker"}, Models: p.factory, Metrics: m})
	ref := e.ref(t, "asker", "s1")
	e.send(t, ref, "ship it")
	e.waitStatus(t, ref, record.StatusBlocked)
	waitIdleWorker(t, reg)
	publish(t, e, ref, control.Message{Verb: control.Resume, Text: "yes, today"})
	tr := e.waitStatus(t, ref, record.StatusDone)
	if got, want := kinds(tr), "user,assistant,tool_call,system,control,tool_result,assistant"; got != want {
		t.Fatalf("transcript %s, want %s", got, want)
	}
	if r := tr.Transcript[5]; r.Result != "yes, today" || r.IsError {
		t.Fatalf("ask result %+v", r)
	}
	reqs := p.requests()
	last := reqs[len(reqs)-1].Messages
	if tm := last[len(last)-1]; tm.Role != model.RoleTool || tm.ToolResults[0].Content != "yes, today" {
		t.Fatalf("the model saw %+v last", tm)
	}
	checkCalls(t, tr)
}

// TestEventWhileBlockedFollowsToolResult sends a message to a session
// blocked on ask_human, then answers it: the next model call sees the
// answer's tool call, its result at once, and the message after it, as
// providers require.
func TestEventWhileBlockedFollowsToolResult(t *testing.T) {
	e := setup(t)
	p := newProbe(false)
	def := policies.Definition{Name: "asker", Tools: []string{"ask"}, Model: scripted(
		policies.ScriptEntry{Text: "Let me ask.", ToolCalls: []policies.ScriptToolCall{{Name: "ask", Args: map[string]any{"question": "Deploy to prod?"}}}},
		policies.ScriptEntry{Text: "Deployed."},
	)}
	e.start(t, worker.Config{Definitions: defs{"asker": def}, Tools: worker.ToolMap{"ask": asker{}}, Agents: []string{"asker"}, Models: p.factory})
	ref := e.ref(t, "asker", "s1")
	e.send(t, ref, "ship it")
	e.waitStatus(t, ref, record.StatusBlocked)
	seq := e.send(t, ref, "also: after lunch")
	natstest.WaitFor(t, 30*time.Second, func() error {
		if st := state(t, e, ref); st.InSeq < seq {
			return fmt.Errorf("in_seq %d", st.InSeq)
		}
		return nil
	})
	publish(t, e, ref, control.Message{Verb: control.Resume, Text: "yes"})
	tr := e.waitStatus(t, ref, record.StatusDone)
	if got, want := kinds(tr), "user,assistant,tool_call,system,user,control,tool_result,assistant"; got != want {
		t.Fatalf("transcript %s, want %s", got, want)
	}
	reqs := p.requests()
	var roles []string
	for _, m := range reqs[len(reqs)-1].Messages {
		roles = append(roles, string(m.Role))
	}
	want := []string{string(model.RoleUser), string(model.RoleAssistant), string(model.RoleTool), string(model.RoleUser)}
	if strings.Join(roles, ",") != strings.Join(want, ",") {
		t.Fatalf("roles of the model call after the answer: %v, want %v", roles, want)
	}
	msgs := reqs[len(reqs)-1].Messages
	if msgs[2].ToolResults[0].Content != "yes" || !strings.Contains(msgs[3].Text, "also: after lunch") {
		t.Fatalf("messages %+v", msgs)
	}
}

func gatedDef() policies.Definition {
	return policies.Definition{Name: "gated", Tools: []string{"ledger"},
		Approvals: []policies.Approval{{Name: "ledger-writes", When: `tool.name == "ledger" && tool.args.note != "harmless"`}},
		Model:     scripted(callLedger("Writing."), policies.ScriptEntry{Text: "Written."})}
}

// TestApprovalGate stops a gated call before it runs: blocked, waiting for
// the call id, nothing held; an approve for another call changes nothing;
// approve runs the call exactly once and the run goes on.
func TestApprovalGate(t *testing.T) {
	e := setup(t)
	led := &ledger{path: filepath.Join(t.TempDir(), "ledger")}
	m, reg := registry(t)
	e.start(t, worker.Config{Definitions: defs{"gated": gatedDef()}, Tools: worker.ToolMap{"ledger": led}, Agents: []string{"gated"}, Metrics: m})
	ref := e.ref(t, "gated", "s1")
	e.send(t, ref, "write it")
	tr := e.waitStatus(t, ref, record.StatusBlocked)
	callID := tr.Transcript[2].CallID
	if tr.WaitingFor != callID || callID == "" || len(led.lines(t)) != 0 || tr.Pending != nil {
		t.Fatalf("blocked: waiting for %q (call %q), ledger %v, pending %+v", tr.WaitingFor, callID, led.lines(t), tr.Pending)
	}
	list, err := record.List(context.Background(), e.js, e.names)
	if err != nil || len(list) != 1 || list[0].Status != record.StatusBlocked || list[0].WaitingFor != callID || list[0].Since.IsZero() {
		t.Fatalf("status list %+v %v", list, err)
	}
	waitIdleWorker(t, reg)

	seq := publish(t, e, ref, control.Message{Verb: control.Approve, CallID: "call_other"})
	natstest.WaitFor(t, 30*time.Second, func() error {
		if st := state(t, e, ref); st.CtlSeq != seq {
			return fmt.Errorf("ctl_seq %d", st.CtlSeq)
		}
		return nil
	})
	if st := state(t, e, ref); st.Status != record.StatusBlocked || len(led.lines(t)) != 0 {
		t.Fatalf("after an approve of another call: %s, ledger %v", st.Status, led.lines(t))
	}
	publish(t, e, ref, control.Message{Verb: control.Approve, CallID: callID, Text: "fine"})
	tr = e.waitStatus(t, ref, record.StatusDone)
	if got := led.lines(t); len(got) != 1 || got[0] != callID {
		t.Fatalf("ledger %v, want the call once", got)
	}
	if n := count(tr, record.KindControl, "approve"); n != 1 {
		t.Fatalf("%d approve entries: %s", n, kinds(tr))
	}
	checkCalls(t, tr)
	if v := metricValue(t, reg, "jetloop_worker_approvals_requested_total"); v != 1 {
		t.Fatalf("approvals requested %v", v)
	}
}

// TestApprovalDenied denies a gated call: it never runs, the model gets a
// denial result and goes on.
func TestApprovalDenied(t *testing.T) {
	e := setup(t)
	led := &ledger{path: filepath.Join(t.TempDir(), "ledger")}
	p := newProbe(false)
	e.start(t, worker.Config{Definitions: defs{"gated": gatedDef()}, Tools: worker.ToolMap{"ledger": led}, Agents: []string{"gated"}, Models: p.factory})
	ref := e.ref(t, "gated", "s1")
	e.send(t, ref, "write it")
	tr := e.waitStatus(t, ref, record.StatusBlocked)
	callID := tr.WaitingFor
	publish(t, e, ref, control.Message{Verb: control.Deny, CallID: callID, Text: "not today"})
	tr = e.waitStatus(t, ref, record.StatusDone)
	if len(led.lines(t)) != 0 {
		t.Fatalf("denied call ran: %v", led.lines(t))
	}
	reqs := p.requests()
	last := reqs[len(reqs)-1].Messages
	tm := last[len(last)-1]
	if tm.Role != model.RoleTool || !tm.ToolResults[0].IsError || !strings.Contains(tm.ToolResults[0].Content, "denied: not today") {
		t.Fatalf("the model saw %+v last", tm)
	}
	checkCalls(t, tr)
}

// TestSteerWhileNoWorkerAppliedOnce publishes an event and a steer while
// no worker runs: the first worker applies the steer once; a second
// delivery of the same message (its consumer recreated) is acknowledged
// and ignored.
func TestSteerWhileNoWorkerAppliedOnce(t *testing.T) {
	e := setup(t)
	ref := e.ref(t, "demo", "s1")
	e.send(t, ref, "hello")
	seq := publish(t, e, ref, control.Message{Verb: control.Steer, Text: "be brief"})
	p := newProbe(false)
	def := policies.Definition{Name: "demo", Model: scripted(policies.ScriptEntry{Text: "Brief."})}
	cfg := worker.Config{Definitions: defs{"demo": def}, Agents: []string{"demo"}, Models: p.factory}
	e.start(t, cfg)
	tr := e.waitStatus(t, ref, record.StatusDone)
	if n := count(tr, record.KindControl, "steer"); n != 1 {
		t.Fatalf("%d steer entries: %s", n, kinds(tr))
	}
	if reqs := p.requests(); len(reqs) != 1 || strings.Count(userText(reqs[0]), "[steer] be brief") != 1 {
		t.Fatalf("requests %+v", reqs)
	}
	ctl := ctlConsumer(t, e, "demo")
	natstest.WaitFor(t, 30*time.Second, func() error {
		info, err := ctl.Info(context.Background())
		if err != nil {
			return err
		}
		if info.NumAckPending != 0 || info.NumPending != 0 || info.AckFloor.Stream != seq {
			return fmt.Errorf("consumer: %d ack pending, %d pending, ack floor %d", info.NumAckPending, info.NumPending, info.AckFloor.Stream)
		}
		return nil
	})

	// Deliver the message again: a fresh consumer starts from the first.
	name, _ := e.names.CtlConsumerName("demo")
	if err := e.js.DeleteConsumer(context.Background(), e.names.StreamCtl(), name); err != nil {
		t.Fatal(err)
	}
	cfg.ID = "w2"
	e.start(t, cfg)
	ctl = ctlConsumer(t, e, "demo")
	natstest.WaitFor(t, 30*time.Second, func() error {
		info, err := ctl.Info(context.Background())
		if err != nil {
			return err
		}
		if info.Delivered.Stream != seq || info.NumAckPending != 0 {
			return fmt.Errorf("redelivery: delivered %d, %d ack pending", info.Delivered.Stream, info.NumAckPending)
		}
		return nil
	})
	tr, err := record.Show(context.Background(), e.js, e.names, ref)
	if err != nil {
		t.Fatal(err)
	}
	if st := state(t, e, ref); count(tr, record.KindControl, "steer") != 1 || len(st.Steers) != 0 || st.CtlSeq != seq {
		t.Fatalf("after redelivery: %s, %d steers queued, ctl_seq %d", kinds(tr), len(st.Steers), st.CtlSeq)
	}
}

// ctlConsumer waits for the agent's consumer on JL_CTL.
func ctlConsumer(t *testing.T, e *env, agent string) jetstream.Consumer {
	t.Helper()
	name, err := e.names.CtlConsumerName(agent)
	if err != nil {
		t.Fatal(err)
	}
	var c jetstream.Consumer
	natstest.WaitFor(t, 30*time.Second, func() error {
		c, err = e.js.Consumer(context.Background(), e.names.StreamCtl(), name)
		return err
	})
	return c
}

// TestInvalidControlDeadLettered sends a message the control format
// refuses: it goes to JL_DLQ with the reason, and the next one applies.
func TestInvalidControlDeadLettered(t *testing.T) {
	e := setup(t)
	def := policies.Definition{Name: "demo", Model: scripted(policies.ScriptEntry{Text: "hi"})}
	e.start(t, worker.Config{Definitions: defs{"demo": def}, Agents: []string{"demo"}})
	ref := e.ref(t, "demo", "s1")
	e.send(t, ref, "hello")
	e.waitStatus(t, ref, record.StatusDone)
	bad := nats.NewMsg(e.names.Ctl(ref))
	bad.Header.Set("ce-specversion", "1.0")
	bad.Header.Set("ce-type", "dev.jetloop.control.explode")
	bad.Header.Set("ce-source", "/test")
	bad.Header.Set("ce-id", "x1")
	if _, err := e.js.PublishMsg(context.Background(), bad); err != nil {
		t.Fatal(err)
	}
	seq := publish(t, e, ref, control.Message{Verb: control.Steer, Text: "next time"})
	natstest.WaitFor(t, 30*time.Second, func() error {
		if st := state(t, e, ref); st.CtlSeq != seq || len(st.Steers) != 1 {
			return fmt.Errorf("ctl_seq %d, %d steers", st.CtlSeq, len(st.Steers))
		}
		return nil
	})
	dlqs, err := e.js.Stream(context.Background(), e.names.StreamDLQ())
	if err != nil {
		t.Fatal(err)
	}
	m, err := dlqs.GetLastMsgForSubject(context.Background(), e.names.DLQAll())
	if err != nil {
		t.Fatal(err)
	}
	if r, d := m.Header.Get(dlq.HeaderReason), m.Header.Get(dlq.HeaderDetail); m.Subject != "jl.dlq.invalid_control" || r != "invalid_control" || !strings.Contains(d, "unknown verb") {
		t.Fatalf("dead letter on %s, reason %q, detail %q", m.Subject, r, d)
	}
}

// TestForkAsAControlCharacterDeadLettered sends a fork as a name no event
// can carry, whose new session could never be started: it goes to JL_DLQ
// with the reason, no session is made, and the next control applies.
func TestForkAsAControlCharacterDeadLettered(t *testing.T) {
	e := setup(t)
	def := policies.Definition{Name: "demo", Model: scripted(policies.ScriptEntry{Text: "hi"})}
	e.start(t, worker.Config{Definitions: defs{"demo": def}, Agents: []string{"demo"}})
	ref := e.ref(t, "demo", "s1")
	e.send(t, ref, "hello")
	e.waitStatus(t, ref, record.StatusDone)
	bad := nats.NewMsg(e.names.Ctl(ref))
	bad.Header.Set("ce-specversion", "1.0")
	bad.Header.Set("ce-type", "dev.jetloop.control.fork")
	bad.Header.Set("ce-source", "/test")
	bad.Header.Set("ce-id", "x1")
	bad.Header.Set("Content-Type", "application/json")
	bad.Data = []byte(`{"turn":0,"as":"s1\u0000copy"}`)
	if _, err := e.js.PublishMsg(context.Background(), bad); err != nil {
		t.Fatal(err)
	}
	seq := publish(t, e, ref, control.Message{Verb: control.Steer, Text: "next time"})
	natstest.WaitFor(t, 30*time.Second, func() error {
		if st := state(t, e, ref); st.CtlSeq != seq || len(st.Steers) != 1 {
			return fmt.Errorf("ctl_seq %d, %d steers", st.CtlSeq, len(st.Steers))
		}
		return nil
	})
	dlqs, err := e.js.Stream(context.Background(), e.names.StreamDLQ())
	if err != nil {
		t.Fatal(err)
	}
	m, err := dlqs.GetLastMsgForSubject(context.Background(), e.names.DLQAll())
	if err != nil {
		t.Fatal(err)
	}
	if r, d := m.Header.Get(dlq.HeaderReason), m.Header.Get(dlq.HeaderDetail); r != "invalid_control" || !strings.Contains(d, "control character") {
		t.Fatalf("dead letter on %s, reason %q, detail %q", m.Subject, r, d)
	}
	if child, err := streams.NewSessionRef("demo", "s1\x00copy"); err != nil {
		t.Fatal(err)
	} else if _, err := record.Show(context.Background(), e.js, e.names, child); !errors.Is(err, record.ErrNotFound) {
		t.Fatalf("the fork's session: %v, want none", err)
	}
}

// TestForkCopiesUpToTurn forks a finished session at turn 1: the new
// session has the transcript up to the end of turn 1, records its parent,
// and continues from there to its own end; the original is unchanged.
func TestForkCopiesUpToTurn(t *testing.T) {
	e := setup(t)
	led := &ledger{path: filepath.Join(t.TempDir(), "ledger")}
	def := policies.Definition{Name: "demo", Tools: []string{"ledger"}, Model: scripted(
		callLedger("one"), callLedger("two"), policies.ScriptEntry{Text: "three"})}
	e.start(t, worker.Config{Definitions: defs{"demo": def}, Tools: worker.ToolMap{"ledger": led}, Agents: []string{"demo"}})
	ref := e.ref(t, "demo", "s1")
	e.send(t, ref, "count")
	before := e.waitStatus(t, ref, record.StatusDone)
	if before.Budget.Usage.Turns != 3 {
		t.Fatalf("original ran %d turns", before.Budget.Usage.Turns)
	}
	seq := publish(t, e, ref, control.Message{Verb: control.Fork, Turn: 1, As: "s1-retry"})
	child := e.ref(t, "demo", "s1-retry")
	tr := e.waitStatus(t, child, record.StatusDone)

	after, err := record.Show(context.Background(), e.js, e.names, ref)
	if err != nil {
		t.Fatal(err)
	}
	ab, _ := json.Marshal(after.Transcript)
	bb, _ := json.Marshal(before.Transcript)
	if string(ab) != string(bb) || after.Status != record.StatusDone || after.Parent != "" {
		t.Fatalf("the original changed:\n%s\n%s", bb, ab)
	}
	if tr.Parent != "s1" || tr.ForkTurn != 1 {
		t.Fatalf("child parent %q at turn %d", tr.Parent, tr.ForkTurn)
	}
	// The copy: user, assistant(1), tool_call(1), tool_result(1).
	for i := range 4 {
		o, c := before.Transcript[i], tr.Transcript[i]
		if o.Kind != c.Kind || o.Text != c.Text || o.CallID != c.CallID || o.Turn != c.Turn || c.ID != uint64(i+1) {
			t.Fatalf("entry %d: original %+v, copy %+v", i, o, c)
		}
	}
	if got, want := kinds(tr), "user,assistant,tool_call,tool_result,system,control,assistant,tool_call,tool_result,assistant"; got != want {
		t.Fatalf("child transcript %s, want %s", got, want)
	}
	if a := tr.Transcript[6]; a.Text != "two" || a.Turn != 2 {
		t.Fatalf("child's first own answer %+v", a)
	}
	if tr.Budget.Usage.Turns != 3 || state(t, e, child).ForkSeq != seq {
		t.Fatalf("child usage %+v", tr.Budget.Usage)
	}
	checkCalls(t, tr)
	// The original's tool ran twice, the child's once more.
	if n := len(led.lines(t)); n != 3 {
		t.Fatalf("ledger has %d lines", n)
	}

	// A fork onto an existing session is refused.
	seq = publish(t, e, ref, control.Message{Verb: control.Fork, Turn: 0, As: "s1-retry"})
	natstest.WaitFor(t, 30*time.Second, func() error {
		if st := state(t, e, ref); st.CtlSeq != seq {
			return fmt.Errorf("ctl_seq %d", st.CtlSeq)
		}
		return nil
	})
	if tr2, _ := record.Show(context.Background(), e.js, e.names, child); len(tr2.Transcript) != len(tr.Transcript) {
		t.Fatalf("refused fork changed the child: %s", kinds(tr2))
	}
}

// A control message sent again with the same id after JL_CTL's duplicate
// window (the stream keeps it twice) is applied once: the worker
// remembers applied ids as long as events are remembered.
func TestControlSentAgainAfterTheWindowAppliedOnce(t *testing.T) {
	e := setup(t)
	st, err := e.js.Stream(context.Background(), e.names.StreamCtl())
	if err != nil {
		t.Fatal(err)
	}
	sc := st.CachedInfo().Config
	sc.Duplicates = 100 * time.Millisecond
	if _, err := e.js.UpdateStream(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	ref := e.ref(t, "demo", "s1")
	p := newProbe(false)
	def := policies.Definition{Name: "demo", Model: scripted(policies.ScriptEntry{Text: "One."}, policies.ScriptEntry{Text: "Two."})}
	cfg := worker.Config{Definitions: defs{"demo": def}, Agents: []string{"demo"}, Models: p.factory}
	e.start(t, cfg)
	e.send(t, ref, "hello")
	e.waitStatus(t, ref, record.StatusDone)

	m := control.Message{Verb: control.Steer, Text: "be brief", ID: "bot-42", Source: "/chatbot"}
	first := publish(t, e, ref, m)
	natstest.WaitFor(t, 30*time.Second, func() error {
		if s := state(t, e, ref); s.CtlSeq != first {
			return fmt.Errorf("ctl_seq %d, want %d", s.CtlSeq, first)
		}
		return nil
	})
	var second uint64
	natstest.WaitFor(t, 10*time.Second, func() error {
		// Inside the window the stream drops it (same sequence back).
		if second = publish(t, e, ref, m); second == first {
			return errors.New("still inside the duplicate window")
		}
		return nil
	})
	natstest.WaitFor(t, 30*time.Second, func() error {
		if s := state(t, e, ref); s.CtlSeq != second {
			return fmt.Errorf("ctl_seq %d, want %d", s.CtlSeq, second)
		}
		return nil
	})
	if s := state(t, e, ref); len(s.Steers) != 1 {
		t.Fatalf("%d steers queued, want 1: %+v", len(s.Steers), s.Steers)
	}
	e.send(t, ref, "again")
	natstest.WaitFor(t, 30*time.Second, func() error {
		if n := len(p.requests()); n != 2 {
			return fmt.Errorf("%d model calls", n)
		}
		return nil
	})
	if got := strings.Count(userText(p.requests()[1]), "[steer] be brief"); got != 1 {
		t.Fatalf("the steer reached the model %d times: %q", got, userText(p.requests()[1]))
	}
}

// Control messages with nothing to act on do not grow the transcript with
// their repeats: 30 cancels of a cancelled session are one entry (each is
// still dead-lettered with its reason), while a different one is noted.
func TestRepeatedControlNoOpIsOneEntry(t *testing.T) {
	e := setup(t)
	def := policies.Definition{Name: "demo", Model: scripted(policies.ScriptEntry{Text: "Done."})}
	e.start(t, worker.Config{Definitions: defs{"demo": def}, Agents: []string{"demo"}})
	ref := e.ref(t, "demo", "s1")
	e.send(t, ref, "hello")
	e.waitStatus(t, ref, record.StatusDone)
	publish(t, e, ref, control.Message{Verb: control.Cancel, Text: "stop"})
	e.waitStatus(t, ref, record.StatusCancelled)
	var last uint64
	for range 30 {
		last = publish(t, e, ref, control.Message{Verb: control.Cancel, Text: "stop", Source: "/chatbot"})
	}
	other := publish(t, e, ref, control.Message{Verb: control.Interrupt, Source: "/chatbot"})
	natstest.WaitFor(t, 30*time.Second, func() error {
		if s := state(t, e, ref); s.CtlSeq != other {
			return fmt.Errorf("ctl_seq %d, want %d (last cancel %d)", s.CtlSeq, other, last)
		}
		return nil
	})
	tr, err := record.Show(context.Background(), e.js, e.names, ref)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(tr, record.KindSystem, "cancel"); n != 1 {
		t.Fatalf("%d entries for 30 ignored cancels, want 1: %s", n, kinds(tr))
	}
	if n := count(tr, record.KindSystem, "interrupt"); n != 1 {
		t.Fatalf("%d entries for the ignored interrupt, want 1: %s", n, kinds(tr))
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		st, err := e.js.Stream(context.Background(), e.names.StreamDLQ())
		if err != nil {
			return err
		}
		info, err := st.Info(context.Background())
		if err != nil {
			return err
		}
		if info.State.Msgs != 31 {
			return fmt.Errorf("%d dead letters, want 31", info.State.Msgs)
		}
		return nil
	})
}

// A jl_dedupe at its limits, which only remembers ids for a while, never
// keeps a control message from being applied: it forgets its oldest ids,
// and a cancel sent meanwhile cancels the session.
func TestCancelAppliedWhenDedupeIsFull(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	if _, err := streams.Provision(ctx, e.js, streams.Options{Limits: map[string]streams.Limit{
		e.names.BucketDedupe(): {Bytes: 1 << 20, Msgs: 20},
	}}); err != nil {
		t.Fatal(err)
	}
	store, err := dedupe.New(ctx, e.js, dedupe.Config{Names: e.names})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := store.Record(ctx, "/filler", fmt.Sprintf("id-%d", i), nil); err != nil {
			t.Fatalf("record %d into a jl_dedupe at its limit: %v", i, err)
		}
	}
	if st, err := e.js.Stream(ctx, streams.KVStream(e.names.BucketDedupe())); err != nil {
		t.Fatal(err)
	} else if info, err := st.Info(ctx); err != nil || info.State.Msgs > 20 {
		t.Fatalf("jl_dedupe holds %+v (%v), over its limit of 20", info.State, err)
	}
	ref := e.ref(t, "demo", "s1")
	p := newProbe(true)
	def := policies.Definition{Name: "demo", Model: scripted(policies.ScriptEntry{Text: "One."})}
	e.start(t, worker.Config{Definitions: defs{"demo": def}, Agents: []string{"demo"}, Models: p.factory})
	e.send(t, ref, "hello")
	select {
	case <-p.calling:
	case <-time.After(30 * time.Second):
		t.Fatal("the model was not called")
	}
	publish(t, e, ref, control.Message{Verb: control.Cancel, Text: "stop"})
	e.waitStatus(t, ref, record.StatusCancelled)
}
