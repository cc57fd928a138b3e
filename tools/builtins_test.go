package tools_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/tools"
)

func TestBuiltinSpecs(t *testing.T) {
	r := shellRegistry(t, tools.BuiltinConfig{})
	tests := []struct {
		name       string
		replaySafe bool
		state      tools.Statefulness
	}{
		{name: "shell", replaySafe: false, state: tools.Resource},
		{name: "http_get", replaySafe: true, state: tools.Stateless},
		{name: "http_request", replaySafe: false, state: tools.Resource},
		{name: "ask_human", replaySafe: true, state: tools.Stateless},
		{name: "delegate", replaySafe: true, state: tools.Resource},
		{name: "read_blob", replaySafe: true, state: tools.Stateless},
		{name: "read_event", replaySafe: true, state: tools.Stateless},
		{name: "notes_read", replaySafe: true, state: tools.Stateless},
		{name: "notes_write", replaySafe: true, state: tools.Resource},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tool, err := r.Get(tt.name)
			if err != nil {
				t.Fatal(err)
			}
			s := tool.Spec()
			if s.ReplaySafe != tt.replaySafe || s.State != tt.state {
				t.Fatalf("spec %+v: want replay-safe %v, %s", s, tt.replaySafe, tt.state)
			}
		})
	}
	if got := len(r.Names()); got != len(tests) {
		t.Fatalf("%d built-ins, want %d", got, len(tests))
	}
}

func TestBuiltinConfigValidate(t *testing.T) {
	if err := (tools.BuiltinConfig{ShellEnv: []string{"NOEQUALS"}}).Validate(); err == nil || !strings.Contains(err.Error(), "NOEQUALS") {
		t.Fatalf("Validate = %v, want the bad env entry named", err)
	}
	if err := (tools.BuiltinConfig{ShellGrace: -1}).Validate(); err == nil {
		t.Fatal("a negative grace was accepted")
	}
}

func TestAskHumanBlocks(t *testing.T) {
	r := shellRegistry(t, tools.BuiltinConfig{})
	res, err := r.Run(t.Context(), "ask_human", call(`{"question":"Merge now or wait for CI?"}`))
	if err != nil || !res.Block || res.IsError || res.Content != "Merge now or wait for CI?" {
		t.Fatalf("Run = %+v, %v; want a blocking result carrying the question", res, err)
	}
	res, err = r.Run(t.Context(), "ask_human", call(`{"question":""}`))
	if err != nil || res.Block || !res.IsError {
		t.Fatalf("empty question = %+v, %v; want an error result", res, err)
	}
}

// The delegate tool reads its arguments for the runtime: every input
// form, the budget, and refusals the model can correct.
func TestDelegateArgs(t *testing.T) {
	r := shellRegistry(t, tools.BuiltinConfig{})
	res, err := r.Run(t.Context(), "delegate", call(`{"agent":"reviewer","task":"Review it.",
		"inputs":{"diff":{"file":"change.diff"},"note":"plain text","why":{"result":"call_1_0"},"big":{"blob":"impl.s.result.call_2"},"t":{"text":"x"}},
		"budget":{"max_cost_usd":0.5,"max_turns":3,"deadline":"2m"}}`))
	if err != nil || res.IsError || res.Delegate == nil {
		t.Fatalf("Run = %+v, %v; want a delegation", res, err)
	}
	d := res.Delegate
	if d.Agent != "reviewer" || d.Task != "Review it." || d.Inputs["diff"].File != "change.diff" || *d.Inputs["note"].Text != "plain text" ||
		d.Inputs["why"].Result != "call_1_0" || d.Inputs["big"].Blob != "impl.s.result.call_2" || *d.Inputs["t"].Text != "x" {
		t.Fatalf("delegation %+v", d)
	}
	if d.Budget.MaxCostUSD != 0.5 || d.Budget.MaxTurns != 3 || d.Budget.Deadline != 2*time.Minute {
		t.Fatalf("budget %+v", d.Budget)
	}
	for _, tt := range []struct{ name, args, want string }{
		{name: "no task", args: `{"agent":"reviewer"}`, want: "task"},
		{name: "two forms", args: `{"agent":"r","task":"t","inputs":{"d":{"file":"a","blob":"b"}}}`, want: "inputs"},
		{name: "bad name", args: `{"agent":"r","task":"t","inputs":{"a b":"x"}}`, want: "a b"},
		{name: "bad deadline", args: `{"agent":"r","task":"t","budget":{"deadline":"soon"}}`, want: "deadline"},
		{name: "more budget fields", args: `{"agent":"r","task":"t","budget":{"max_hops":9}}`, want: "max_hops"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, err := r.Run(t.Context(), "delegate", call(tt.args))
			if err != nil || !res.IsError || res.Delegate != nil || !strings.Contains(res.Content, tt.want) {
				t.Fatalf("Run = %+v, %v; want an error result naming %s", res, err, tt.want)
			}
		})
	}
}

func TestReadBlobPages(t *testing.T) {
	obs := blobStore(t)
	// Offload a result through the registry, then read it back in pages.
	line := "ünïcödé line %04d\n"
	var full strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&full, line, i)
	}
	big := tools.NewFunc(spec("big"), func(_ context.Context, _ tools.Call) (tools.Result, error) {
		return tools.Result{Content: full.String()}, nil
	})
	ts := append(tools.Builtins(tools.BuiltinConfig{Blobs: obs, BlobReadLimit: 1000}), big)
	r, err := tools.NewRegistry(tools.RegistryOptions{Blobs: obs}, ts...)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(t.Context(), "big", call(`{}`))
	if err != nil || res.Blob == "" {
		t.Fatalf("Run(big) = %+v, %v; want an offloaded result", res, err)
	}

	var got strings.Builder
	offset := 0
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("read_blob does not advance")
		}
		page, err := r.Run(t.Context(), "read_blob", call(argsJSON(t, map[string]any{"handle": res.Blob, "offset": offset})))
		if err != nil || page.IsError {
			t.Fatalf("read_blob at %d = %+v, %v", offset, page, err)
		}
		header, data, _ := strings.Cut(page.Content, "\n")
		if len(data) > 1000 {
			t.Fatalf("page of %d bytes, limit 1000", len(data))
		}
		got.WriteString(data)
		if strings.Contains(header, "end of blob") {
			break
		}
		if _, err := fmt.Sscanf(header[strings.Index(header, "next part at offset"):], "next part at offset %d]", &offset); err != nil {
			t.Fatalf("header %q: %v", header, err)
		}
	}
	if got.String() != full.String() {
		t.Fatal("pages do not add up to the stored result")
	}

	// A handle is its session's: another session of the agent, or another
	// agent, is refused, unless it was forked from the session.
	forkOf := func(parent string) func(context.Context, string) bool {
		return func(_ context.Context, s string) bool { return s == parent }
	}
	tests := []struct {
		name    string
		args    map[string]any
		agent   string
		session string
		mayRead func(context.Context, string) bool
		want    string
	}{
		{name: "another agent's blob", args: map[string]any{"handle": res.Blob}, agent: "intruder", want: "not a handle of this session"},
		{name: "another session's blob", args: map[string]any{"handle": res.Blob}, session: "octo/repo#13", want: "not a handle of this session"},
		{name: "a blob of a session not forked from", args: map[string]any{"handle": res.Blob}, session: "octo/repo#13", mayRead: forkOf("octo/repo#99"), want: "not a handle of this session"},
		{name: "not a handle", args: map[string]any{"handle": "x"}, want: "not a handle"},
		{name: "missing", args: map[string]any{"handle": "pr-reviewer.octo=2Frepo=2312.result.nope.00"}, want: "no blob"},
		{name: "past the end", args: map[string]any{"handle": res.Blob, "offset": 1 << 30}, want: "past the end"},
		{name: "negative offset", args: map[string]any{"handle": res.Blob, "offset": -1}, want: "offset"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := call(argsJSON(t, tt.args))
			if tt.agent != "" {
				c.Agent = tt.agent
			}
			if tt.session != "" {
				c.Session = tt.session
			}
			c.MayRead = tt.mayRead
			res, err := r.Run(t.Context(), "read_blob", c)
			if err != nil || !res.IsError || !strings.Contains(res.Content, tt.want) {
				t.Fatalf("Run = %+v, %v; want an error result with %q", res, err, tt.want)
			}
		})
	}
	fork := call(argsJSON(t, map[string]any{"handle": res.Blob}))
	fork.Session, fork.MayRead = "octo/repo#12-fork", forkOf("octo/repo#12")
	if page, err := r.Run(t.Context(), "read_blob", fork); err != nil || page.IsError {
		t.Fatalf("a fork reading its parent's blob: %+v, %v", page, err)
	}
}

func TestReadBlobWithoutStore(t *testing.T) {
	r := shellRegistry(t, tools.BuiltinConfig{})
	res, err := r.Run(t.Context(), "read_blob", call(`{"handle":"pr-reviewer.octo=2Frepo=2312.result.c.00"}`))
	if err != nil || !res.IsError || !strings.Contains(res.Content, "no blob store") {
		t.Fatalf("Run = %+v, %v", res, err)
	}
}
