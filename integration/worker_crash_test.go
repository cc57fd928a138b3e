package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/ghapp"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/proctree"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/worker"
)

// childEnv carries a crashWorker's spec to the re-executed test binary.
const childEnv = "JETLOOP_TEST_WORKER_CHILD"

// crashPoint is where a child worker stops dead, waiting for its kill -9.
type crashPoint struct {
	Phase worker.Phase    `json:"phase"`
	Kind  record.StepKind `json:"kind,omitempty"`
	Step  uint64          `json:"step"`
	// Session, if set, limits the point to one session.
	Session string `json:"session,omitempty"`
	// Compact selects a compaction's model step (any step number when
	// Step is 0).
	Compact bool `json:"compact,omitempty"`
}

// childSpec is what a child worker runs.
type childSpec struct {
	URL    string              `json:"url"`
	ID     string              `json:"id"`
	Def    policies.Definition `json:"def"`
	Ledger string              `json:"ledger"`
	Safe   bool                `json:"safe"`
	// Calls is a file every model call of every process appends a line to.
	Calls   string      `json:"calls"`
	CrashAt *crashPoint `json:"crash_at,omitempty"`
	WorkDir string      `json:"work_dir"`
	// Shell runs the built-in tools, shell among them, as a worker
	// process does: their processes started as trees recorded under the
	// work folder, and swept when the worker starts.
	Shell bool `json:"shell,omitempty"`
	// More are agents the worker runs beside Def; with them it runs the
	// delegate tool too, its delegations admitted by the pipeline every
	// event takes.
	More []policies.Definition `json:"more,omitempty"`
}

// Timings that make a crashed worker's lease and deliveries come back
// within seconds.
const (
	childLeaseTTL = 2 * time.Second
	childAckWait  = 2 * time.Second
)

// TestWorkerChild is not a test: it is the body of a worker subprocess
// that the crash tests start from this test binary and kill -9.
func TestWorkerChild(t *testing.T) {
	raw := os.Getenv(childEnv)
	if raw == "" {
		t.Skip("runs only as a crash test's subprocess")
	}
	var spec childSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatal(err)
	}
	_, js := natstest.Connect(t, spec.URL)
	led := &fileLedger{path: spec.Ledger, safe: spec.Safe}
	tm := worker.ToolMap{"ledger": led}
	if spec.Def.GitHub != nil {
		// The GitHub tools, against the test's fake GitHub.
		gh, err := ghapp.New(ghapp.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tl := range tools.GitHub(tools.GitHubConfig{Clients: gh}) {
			tm[tl.Spec().Name] = tl
		}
	}
	cfg := worker.Config{
		ID:          spec.ID,
		Definitions: fixedDefs{spec.Def.Name: spec.Def},
		Tools:       tm,
		Agents:      []string{spec.Def.Name},
		LeaseTTL:    childLeaseTTL,
		AckWait:     childAckWait,
		WorkDir:     spec.WorkDir,
		Models: func(m policies.Model) (model.Model, error) {
			inner, err := worker.ScriptedOnly(m)
			return countedModel{inner: inner, path: spec.Calls}, err
		},
	}
	if len(spec.More) > 0 {
		defs := fixedDefs{spec.Def.Name: spec.Def}
		for _, d := range spec.More {
			defs[d.Name] = d
			cfg.Agents = append(cfg.Agents, d.Name)
		}
		cfg.Definitions = defs
		for _, tl := range tools.Builtins(tools.BuiltinConfig{}) {
			if tl.Spec().Name == "delegate" {
				tm["delegate"] = tl
			}
		}
		cfg.Admit = delegationPipeline(t, js, defs)
	}
	if spec.Shell {
		trees, err := proctree.New(proctree.Config{Dir: filepath.Join(spec.WorkDir, ".trees")})
		if err != nil {
			t.Fatal(err)
		}
		m := worker.ToolMap{}
		for _, tl := range tools.Builtins(tools.BuiltinConfig{Trees: trees}) {
			m[tl.Spec().Name] = tl
		}
		cfg.Tools, cfg.Trees = m, trees
		// Its log says when it runs, its sweep done (child.waitRunning).
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if cp := spec.CrashAt; cp != nil {
		var once sync.Once
		cfg.Trace = func(ctx context.Context, p worker.TracePoint) {
			if p.Recovery || p.Phase != cp.Phase || p.Kind != cp.Kind || p.Compact != cp.Compact ||
				(p.Step != cp.Step && !(cp.Compact && cp.Step == 0)) || (cp.Session != "" && p.Session != cp.Session) {
				return
			}
			hit := false
			once.Do(func() { hit = true })
			if !hit {
				return
			}
			fmt.Printf("CRASHPOINT %s %s %s %d\n", p.Session, p.Phase, p.Kind, p.Step)
			os.Stdout.Sync()
			select {} // until kill -9
		}
	}
	w, err := worker.New(context.Background(), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("CHILD RUNNING")
	if err := w.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// countedModel appends a line to a file shared by every process before
// each call of its model.
type countedModel struct {
	inner model.Model
	path  string
}

func (m countedModel) Complete(ctx context.Context, req model.Request) (model.Response, error) {
	f, err := os.OpenFile(m.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return model.Response{}, err
	}
	_, err = fmt.Fprintln(f, "call")
	if err == nil {
		err = f.Sync()
	}
	f.Close()
	if err != nil {
		return model.Response{}, err
	}
	return m.inner.Complete(ctx, req)
}

// modelCalls counts the model calls every process made.
func (e *crashEnv) modelCalls(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dir, "calls"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// childWriter adapts a func to io.Writer.
type childWriter func([]byte) (int, error)

func (f childWriter) Write(b []byte) (int, error) { return f(b) }

// fixedDefs serves fixed definitions.
type fixedDefs map[string]policies.Definition

func (d fixedDefs) Get(_ context.Context, agent string) (policies.Definition, error) {
	def, ok := d[agent]
	if !ok {
		return policies.Definition{}, fmt.Errorf("agent %q: %w", agent, worker.ErrNotFound)
	}
	def.Version = 1
	return def, nil
}

// fileLedger appends each call's id to a file shared by every process.
type fileLedger struct {
	path string
	safe bool
}

func (l *fileLedger) Spec() tools.Spec {
	return tools.Spec{Name: "ledger", Description: "append a line to the ledger",
		Schema: json.RawMessage(`{"type":"object"}`), ReplaySafe: l.safe, State: tools.Resource}
}

func (l *fileLedger) Call(_ context.Context, c tools.Call) (tools.Result, error) {
	f, err := os.OpenFile(l.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return tools.Result{}, err
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, c.Session+" "+c.ID); err != nil {
		return tools.Result{}, err
	}
	if err := f.Sync(); err != nil {
		return tools.Result{}, err
	}
	return tools.Result{Content: "appended " + c.ID}, nil
}

// ledgerCounts counts executions per "session call-id".
func ledgerCounts(t *testing.T, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line != "" {
			out[line]++
		}
	}
	return out
}

// child is a running worker subprocess.
type child struct {
	cmd    *exec.Cmd
	points chan string
	mu     sync.Mutex
	out    strings.Builder
	done   chan struct{}
}

func startChild(t *testing.T, spec childSpec) *child {
	t.Helper()
	b, _ := json.Marshal(spec)
	c := &child{points: make(chan string, 4), done: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^TestWorkerChild$", "-test.v")
	c.cmd.Env = append(os.Environ(), childEnv+"="+string(b))
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.cmd.Stderr = childWriter(func(p []byte) (int, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.out.Write(p)
	})
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "CRASHPOINT ") {
				c.points <- line
			}
			c.mu.Lock()
			c.out.WriteString(line + "\n")
			c.mu.Unlock()
		}
		_ = c.cmd.Wait()
	}()
	t.Cleanup(func() { c.kill() })
	return c
}

// kill sends SIGKILL and waits for the process to be gone.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
}

func (c *child) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// waitRunning waits for a child with Shell to log that its worker runs:
// what dead workers left was swept by then.
func (c *child) waitRunning(t *testing.T) {
	t.Helper()
	natstest.WaitFor(t, 30*time.Second, func() error {
		if !strings.Contains(c.output(), "worker running") {
			return errors.New("worker not running yet")
		}
		return nil
	})
}

// waitPoint waits for the child to reach its crash point.
func (c *child) waitPoint(t *testing.T, timeout time.Duration) string {
	t.Helper()
	select {
	case p := <-c.points:
		return p
	case <-c.done:
		t.Fatalf("worker exited before its crash point:\n%s", c.output())
	case <-time.After(timeout):
		t.Fatalf("worker did not reach its crash point within %s:\n%s", timeout, c.output())
	}
	return ""
}

// crashEnv is a server outside the workers, so it outlives their kills.
type crashEnv struct {
	url   string
	js    jetstream.JetStream
	names streams.Names
	dir   string
}

func newCrashEnv(t *testing.T) *crashEnv {
	t.Helper()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	return &crashEnv{url: srv.ClientURL(), js: js, names: streams.Default(), dir: t.TempDir()}
}

func (e *crashEnv) spec(id string, def policies.Definition, safe bool, at *crashPoint) childSpec {
	return childSpec{URL: e.url, ID: id, Def: def, Ledger: filepath.Join(e.dir, "ledger"), Calls: filepath.Join(e.dir, "calls"), Safe: safe, CrashAt: at, WorkDir: filepath.Join(e.dir, "work")}
}

func (e *crashEnv) send(t *testing.T, agent, session, text string) streams.SessionRef {
	t.Helper()
	ref, err := streams.NewSessionRef(agent, session)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := worker.Send(context.Background(), e.js, e.names, ref, worker.Request{Text: text}); err != nil {
		t.Fatal(err)
	}
	return ref
}

// waitDone waits for the session to be done and returns its transcript.
func (e *crashEnv) waitDone(t *testing.T, ref streams.SessionRef, children ...*child) record.Transcript {
	t.Helper()
	var tr record.Transcript
	err := natstest.Poll(context.Background(), time.Minute, func() error {
		var err error
		tr, err = record.Show(context.Background(), e.js, e.names, ref)
		if err != nil {
			return err
		}
		if tr.Status != record.StatusDone {
			return fmt.Errorf("status %s (%s)", tr.Status, tr.Reason)
		}
		return nil
	})
	if err != nil {
		var outs []string
		for _, c := range children {
			outs = append(outs, c.output())
		}
		t.Fatalf("session %s: %v\n%s", ref, err, strings.Join(outs, "\n----\n"))
	}
	return tr
}

// checkOneResult asserts every tool call of tr has exactly one result and
// returns the results by call id.
func checkOneResult(t *testing.T, tr record.Transcript) map[string]record.Entry {
	t.Helper()
	results := map[string]record.Entry{}
	count := map[string]int{}
	for _, e := range tr.Transcript {
		if e.Kind == record.KindToolResult {
			results[e.CallID] = e
			count[e.CallID]++
		}
	}
	for _, e := range tr.Transcript {
		if e.Kind == record.KindToolCall && count[e.CallID] != 1 {
			t.Errorf("%s/%s: call %s has %d results", tr.Agent, tr.Session, e.CallID, count[e.CallID])
		}
	}
	return results
}

// checkTranscript asserts the transcript is one story: ids from 1 in
// order, every tool call after an answer and before its result, and one
// answer per turn.
func checkTranscript(t *testing.T, tr record.Transcript) {
	t.Helper()
	answers := map[int]int{}
	open := map[string]bool{}
	for i, e := range tr.Transcript {
		if e.ID != uint64(i+1) {
			t.Errorf("entry %d has id %d", i+1, e.ID)
		}
		switch e.Kind {
		case record.KindAssistant:
			answers[e.Turn]++
		case record.KindToolCall:
			open[e.CallID] = true
		case record.KindToolResult:
			if !open[e.CallID] {
				t.Errorf("result of call %s before (or without) its call", e.CallID)
			}
			delete(open, e.CallID)
		}
	}
	for turn, n := range answers {
		if n != 1 {
			t.Errorf("turn %d has %d answers", turn, n)
		}
	}
}

func crashDef() policies.Definition {
	return policies.Definition{
		Name:  "crash",
		Tools: []string{"ledger"},
		Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{
			{Text: "Writing.", ToolCalls: []policies.ScriptToolCall{{Name: "ledger", Args: map[string]any{"line": "x"}}}},
			{Text: "Written.", Usage: policies.Usage{InputTokens: 10, OutputTokens: 2}},
		}},
	}
}

// TestWorkerCrashRecovery kills a worker with kill -9 at every phase of a
// model step and of a tool step, restarts it, and checks recovery by
// DESIGN §8: the session completes, every call has exactly one result, a
// replay-unsafe tool never runs twice (an interrupted one gets the
// synthetic error result), a replay-safe one runs again, an interrupted
// model call is made again and recorded as of unknown usage.
func TestWorkerCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess crash test")
	}
	// Steps of the script: 1 the first model call, 2 the tool call, 3 the
	// second model call.
	tests := []struct {
		name         string
		at           crashPoint
		safe         bool
		runs         int  // executions of the tool call
		synthetic    bool // its result is the synthetic error
		unknownUsage int
		modelCalls   int // made by both processes (2 without a crash)
	}{
		{name: "model before intent", at: crashPoint{Phase: worker.PhaseIntent, Kind: record.StepModel, Step: 1}, runs: 1, modelCalls: 2},
		{name: "model after intent", at: crashPoint{Phase: worker.PhaseEffect, Kind: record.StepModel, Step: 1}, runs: 1, unknownUsage: 1, modelCalls: 2},
		{name: "model after call", at: crashPoint{Phase: worker.PhaseSettle, Kind: record.StepModel, Step: 3}, runs: 1, unknownUsage: 1, modelCalls: 3},
		// The answer and its tool call are two creates: with only the
		// first stored, the settlement is not whole; the call is remade.
		{name: "model between its entries' creates", at: crashPoint{Phase: worker.PhaseCreate, Kind: record.StepModel, Step: 1}, runs: 1, unknownUsage: 1, modelCalls: 3},
		// Stored whole, not yet named by the state: adopted, not paid twice.
		{name: "model after its entries, before the state", at: crashPoint{Phase: worker.PhaseCreated, Kind: record.StepModel, Step: 1}, runs: 1, modelCalls: 2},
		{name: "last model call after its entry, before the state", at: crashPoint{Phase: worker.PhaseCreated, Kind: record.StepModel, Step: 3}, runs: 1, modelCalls: 2},
		{name: "model after settlement", at: crashPoint{Phase: worker.PhaseSettled, Kind: record.StepModel, Step: 1}, runs: 1, modelCalls: 2},
		{name: "tool before intent", at: crashPoint{Phase: worker.PhaseIntent, Kind: record.StepTool, Step: 2}, runs: 1, modelCalls: 2},
		{name: "unsafe tool after intent", at: crashPoint{Phase: worker.PhaseEffect, Kind: record.StepTool, Step: 2}, runs: 0, synthetic: true, modelCalls: 2},
		{name: "unsafe tool after run", at: crashPoint{Phase: worker.PhaseSettle, Kind: record.StepTool, Step: 2}, runs: 1, synthetic: true, modelCalls: 2},
		// The result is stored: adopted, the call not made again, its
		// real result kept.
		{name: "unsafe tool after its result's create", at: crashPoint{Phase: worker.PhaseCreated, Kind: record.StepTool, Step: 2}, runs: 1, modelCalls: 2},
		{name: "safe tool after its result's create", at: crashPoint{Phase: worker.PhaseCreated, Kind: record.StepTool, Step: 2}, safe: true, runs: 1, modelCalls: 2},
		// The tool's settlement carried the next model call's intent: the
		// call is remade, counted as possibly billed.
		{name: "tool after settlement", at: crashPoint{Phase: worker.PhaseSettled, Kind: record.StepTool, Step: 2}, runs: 1, unknownUsage: 1, modelCalls: 2},
		{name: "safe tool after intent", at: crashPoint{Phase: worker.PhaseEffect, Kind: record.StepTool, Step: 2}, safe: true, runs: 1, modelCalls: 2},
		{name: "safe tool after run", at: crashPoint{Phase: worker.PhaseSettle, Kind: record.StepTool, Step: 2}, safe: true, runs: 2, modelCalls: 2},
		{name: "after the run, before the ack", at: crashPoint{Phase: worker.PhaseAck, Step: 3}, runs: 1, modelCalls: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newCrashEnv(t)
			def := crashDef()
			first := startChild(t, e.spec("w1", def, tt.safe, &tt.at))
			ref := e.send(t, "crash", "s1", "write it")
			first.waitPoint(t, time.Minute)
			first.kill()

			second := startChild(t, e.spec("w2", def, tt.safe, nil))
			tr := e.waitDone(t, ref, first, second)
			results := checkOneResult(t, tr)
			if len(results) != 1 {
				t.Fatalf("%d results, want 1: %+v", len(results), tr.Transcript)
			}
			for id, r := range results {
				runs := ledgerCounts(t, filepath.Join(e.dir, "ledger"))["s1 "+id]
				if runs != tt.runs {
					t.Errorf("call %s ran %d times, want %d", id, runs, tt.runs)
				}
				if synthetic := r.IsError && r.Result == "interrupted; may or may not have run"; synthetic != tt.synthetic {
					t.Errorf("result %q (is_error %v): synthetic %v, want %v", r.Result, r.IsError, synthetic, tt.synthetic)
				}
			}
			if got := tr.Budget.Usage.UnknownUsageCalls; got != tt.unknownUsage {
				t.Errorf("unknown usage calls %d, want %d", got, tt.unknownUsage)
			}
			if got := e.modelCalls(t); got != tt.modelCalls {
				t.Errorf("%d model calls, want %d", got, tt.modelCalls)
			}
			checkTranscript(t, tr)
			if tr.Budget.Usage.Turns != 2 {
				t.Errorf("turns %d, want 2", tr.Budget.Usage.Turns)
			}
			// Nothing is left for redelivery: the consumer has no pending
			// or unacknowledged events once the session rests.
			natstestPollAcked(t, e, "crash")
		})
	}
}

// natstestPollAcked waits until the agent's consumer has acked everything.
func natstestPollAcked(t *testing.T, e *crashEnv, agent string) {
	t.Helper()
	name, _ := e.names.InConsumerName(agent)
	err := natstest.Poll(context.Background(), 30*time.Second, func() error {
		c, err := e.js.Consumer(context.Background(), e.names.StreamIn(), name)
		if err != nil {
			return err
		}
		info, err := c.Info(context.Background())
		if err != nil {
			return err
		}
		if info.NumAckPending != 0 || info.NumPending != 0 {
			return fmt.Errorf("consumer %s: %d ack pending, %d pending", name, info.NumAckPending, info.NumPending)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWorkerCrashCompeting runs two workers on the same sessions, each
// session sent two events, kills the worker that runs session s0's
// replay-unsafe tool call with kill -9 right after the call, and checks
// that the other takes over: every session completes, every call has
// exactly one result, no call ran twice, only the killed call got the
// synthetic result.
func TestWorkerCrashCompeting(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess crash test")
	}
	e := newCrashEnv(t)
	def := crashDef()
	at := &crashPoint{Phase: worker.PhaseSettle, Kind: record.StepTool, Step: 2, Session: "s0"}
	children := map[string]*child{
		"wa": startChild(t, e.spec("wa", def, false, at)),
		"wb": startChild(t, e.spec("wb", def, false, at)),
	}
	var refs []streams.SessionRef
	for round := range 2 {
		for i := range 8 {
			refs = append(refs, e.send(t, "crash", fmt.Sprintf("s%d", i), fmt.Sprintf("write it, round %d", round)))
		}
	}
	refs = refs[:8]
	// Whichever worker runs s0's call stops there; kill it.
	var killed string
	select {
	case <-children["wa"].points:
		killed = "wa"
	case <-children["wb"].points:
		killed = "wb"
	case <-time.After(time.Minute):
		t.Fatalf("no worker reached the crash point:\n%s\n----\n%s", children["wa"].output(), children["wb"].output())
	}
	children[killed].kill()
	s0Synthetic := false
	for _, ref := range refs {
		tr := e.waitDone(t, ref, children["wa"], children["wb"])
		if n := countKind(tr, record.KindUser); n != 2 {
			// The second event may still be on its way: wait for it.
			tr = e.waitEntries(t, ref, record.KindUser, 2)
		}
		for id, r := range checkOneResult(t, tr) {
			n := ledgerCounts(t, filepath.Join(e.dir, "ledger"))[ref.Session+" "+id]
			switch {
			case r.IsError && r.Result == "interrupted; may or may not have run":
				// The killed worker had this call in flight: it ran at
				// most once.
				if ref.Session == "s0" {
					s0Synthetic = true
				}
				if n > 1 {
					t.Errorf("%s call %s ran %d times", ref, id, n)
				}
			case r.IsError:
				t.Errorf("%s call %s: unexpected error result %q", ref, id, r.Result)
			case n != 1:
				t.Errorf("%s call %s ran %d times, want 1", ref, id, n)
			}
		}
	}
	if !s0Synthetic {
		t.Errorf("s0's call, interrupted after it ran, did not get the synthetic result")
	}
	natstestPollAcked(t, e, "crash")
}

func countKind(tr record.Transcript, k record.Kind) int {
	n := 0
	for _, e := range tr.Transcript {
		if e.Kind == k {
			n++
		}
	}
	return n
}

// waitEntries waits until the session is done with n entries of kind.
func (e *crashEnv) waitEntries(t *testing.T, ref streams.SessionRef, k record.Kind, n int) record.Transcript {
	t.Helper()
	var tr record.Transcript
	err := natstest.Poll(context.Background(), time.Minute, func() error {
		var err error
		tr, err = record.Show(context.Background(), e.js, e.names, ref)
		if err != nil {
			return err
		}
		if got := countKind(tr, k); tr.Status != record.StatusDone || got != n {
			return fmt.Errorf("status %s with %d %s entries, want done with %d", tr.Status, got, k, n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestWorkerCrashStaleCreate plays a worker that ran a replay-unsafe tool
// call, was taken for dead (kill -9 of its process) and settles late: the
// test itself, holding the state revision the dead worker held, makes the
// settlement the worker would have made, with the same store, against a
// successor process's recovery. Whichever order, each call has exactly one
// result and the late writer is fenced: a successor that recovered first
// settled the synthetic result and the late create loses; a late create
// that came first is adopted by the successor (the tool is not run again,
// its real result is kept) and the late state write loses.
func TestWorkerCrashStaleCreate(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess crash test")
	}
	for _, order := range []string{"successor first", "late create first"} {
		t.Run(order, func(t *testing.T) {
			e := newCrashEnv(t)
			def := crashDef()
			ctx := context.Background()
			at := &crashPoint{Phase: worker.PhaseSettle, Kind: record.StepTool, Step: 2}
			first := startChild(t, e.spec("w1", def, false, at))
			ref := e.send(t, "crash", "s1", "write it")
			first.waitPoint(t, time.Minute)
			store, err := record.Open(ctx, e.js, e.names)
			if err != nil {
				t.Fatal(err)
			}
			// What the dead worker holds: the state with the tool's intent,
			// and the result it was about to settle.
			held, rev, err := store.Load(ctx, ref)
			if err != nil {
				t.Fatal(err)
			}
			p := held.Pending
			if p == nil || p.Kind != record.StepTool {
				t.Fatalf("state at the crash point has no tool intent: %+v", held)
			}
			first.kill()
			result := record.Entry{ID: held.NextEntry, Kind: record.KindToolResult, Turn: held.Turns, Time: time.Now().UTC(),
				Name: p.Tool, CallID: p.CallID, Result: "appended " + p.CallID, Step: p.Step, Attempt: p.Attempt, Entries: 1}
			next := held.Clone()
			next.Pending, next.Steps, next.Calls, next.NextEntry = nil, p.Step, nil, held.NextEntry+1
			late := func() error {
				_, err := store.Settle(ctx, ref, []record.Entry{result}, next, rev)
				return err
			}

			var second *child
			var lateErr error
			switch order {
			case "successor first":
				second = startChild(t, e.spec("w2", def, false, nil))
				e.waitDone(t, ref, first, second)
				lateErr = late()
			case "late create first":
				created := make(chan struct{})
				proceed := make(chan struct{})
				store.Between = func(_ context.Context, _ streams.SessionRef, _ []record.Entry, n int) {
					close(created)
					<-proceed
				}
				done := make(chan error, 1)
				go func() { done <- late() }()
				select {
				case <-created:
				case <-time.After(30 * time.Second):
					t.Fatal("the late create did not land")
				}
				second = startChild(t, e.spec("w2", def, false, nil))
				e.waitDone(t, ref, first, second)
				close(proceed)
				select {
				case lateErr = <-done:
				case <-time.After(30 * time.Second):
					t.Fatal("the late state write did not return")
				}
			}
			if !errors.Is(lateErr, record.ErrFenced) {
				t.Errorf("late settlement: %v, want ErrFenced", lateErr)
			}
			tr := e.waitDone(t, ref, first, second)
			checkTranscript(t, tr)
			results := checkOneResult(t, tr)
			r, ok := results[p.CallID]
			if !ok || len(results) != 1 {
				t.Fatalf("results %+v, want one for call %s", results, p.CallID)
			}
			synthetic := r.IsError && r.Result == "interrupted; may or may not have run"
			if want := order == "successor first"; synthetic != want {
				t.Errorf("result %q: synthetic %v, want %v", r.Result, synthetic, want)
			}
			if runs := ledgerCounts(t, filepath.Join(e.dir, "ledger"))["s1 "+p.CallID]; runs != 1 {
				t.Errorf("call ran %d times, want 1", runs)
			}
		})
	}
}
