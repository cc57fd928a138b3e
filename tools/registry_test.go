package tools_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools"
)

const echoSchema = `{
	"type": "object",
	"properties": {
		"text":  {"type": "string", "maxLength": 100000},
		"times": {"type": "integer", "minimum": 1, "maximum": 1000},
		"mode":  {"type": "string", "enum": ["plain", "loud"]}
	},
	"required": ["text"],
	"additionalProperties": false
}`

// echo repeats its text; it is the tool most registry tests run.
func echo() tools.Tool {
	return tools.NewFunc(tools.Spec{
		Name: "echo", Description: "Repeats text.", Schema: json.RawMessage(echoSchema),
		ReplaySafe: true, State: tools.Stateless,
	}, func(_ context.Context, c tools.Call) (tools.Result, error) {
		var a struct {
			Text  string
			Times int
		}
		if err := json.Unmarshal(c.Args, &a); err != nil {
			return tools.Result{}, err
		}
		return tools.Result{Content: strings.Repeat(a.Text, max(a.Times, 1))}, nil
	})
}

func spec(name string) tools.Spec {
	return tools.Spec{Name: name, Description: "A test tool.", Schema: json.RawMessage(`{"type":"object"}`), State: tools.Stateless}
}

func call(args string) tools.Call {
	return tools.Call{ID: "call-1", Agent: "pr-reviewer", Session: "octo/repo#12", Args: json.RawMessage(args)}
}

func TestNewRegistryRefuses(t *testing.T) {
	bad := func(mut func(*tools.Spec)) tools.Tool {
		s := spec("t")
		mut(&s)
		return tools.NewFunc(s, nil)
	}
	tests := []struct {
		name  string
		tools []tools.Tool
		want  string
	}{
		{name: "duplicate", tools: []tools.Tool{echo(), echo()}, want: `"echo" registered twice`},
		{name: "nil tool", tools: []tools.Tool{nil}, want: "tool 0 is nil"},
		{name: "empty name", tools: []tools.Tool{bad(func(s *tools.Spec) { s.Name = "" })}, want: "name"},
		{name: "space in name", tools: []tools.Tool{bad(func(s *tools.Spec) { s.Name = "a b" })}, want: `name "a b"`},
		{name: "no description", tools: []tools.Tool{bad(func(s *tools.Spec) { s.Description = " " })}, want: "no description"},
		{name: "no statefulness", tools: []tools.Tool{bad(func(s *tools.Spec) { s.State = "" })}, want: "statefulness"},
		{name: "negative timeout", tools: []tools.Tool{bad(func(s *tools.Spec) { s.Timeout = -time.Second })}, want: "negative"},
		{name: "empty schema", tools: []tools.Tool{bad(func(s *tools.Spec) { s.Schema = nil })}, want: "schema is empty"},
		{name: "schema not JSON", tools: []tools.Tool{bad(func(s *tools.Spec) { s.Schema = json.RawMessage(`{`) })}, want: "not JSON"},
		{name: "schema not object", tools: []tools.Tool{bad(func(s *tools.Spec) { s.Schema = json.RawMessage(`{"type":"string"}`) })}, want: `want "object"`},
		{name: "schema bad keyword value", tools: []tools.Tool{bad(func(s *tools.Spec) {
			s.Schema = json.RawMessage(`{"type":"object","properties":{"a":{"type":"strin"}}}`)
		})}, want: "does not compile"},
		{name: "schema remote ref", tools: []tools.Tool{bad(func(s *tools.Spec) { s.Schema = json.RawMessage(`{"type":"object","$ref":"file:///etc/passwd"}`) })}, want: "does not compile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tools.NewRegistry(tools.RegistryOptions{}, tt.tools...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestGetAndSpecs(t *testing.T) {
	r, err := tools.NewRegistry(tools.RegistryOptions{}, echo(), tools.NewFunc(spec("other"), nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get("echo"); err != nil {
		t.Fatalf("Get(echo): %v", err)
	}
	if _, err := r.Get("nope"); !errors.Is(err, tools.ErrUnknownTool) {
		t.Fatalf("Get(nope) = %v, want ErrUnknownTool", err)
	}
	specs, err := r.Specs([]string{"other", "echo", "other"})
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 2 || specs[0].Name != "other" || specs[1].Name != "echo" {
		t.Fatalf("Specs = %+v, want other, echo", specs)
	}
	_, err = r.Specs([]string{"echo", "shel", "htp_get"})
	if !errors.Is(err, tools.ErrUnknownTool) || !strings.Contains(err.Error(), `"shel", "htp_get"`) {
		t.Fatalf("Specs with unknown names = %v, want ErrUnknownTool naming both", err)
	}
	if got := r.Names(); strings.Join(got, ",") != "echo,other" {
		t.Fatalf("Names = %v", got)
	}
}

func TestRunValidatesArguments(t *testing.T) {
	r, err := tools.NewRegistry(tools.RegistryOptions{MaxArgsBytes: 1024}, echo())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, args string
		want       string // in the error result; "" means the call runs
	}{
		{name: "valid", args: `{"text":"hi","times":2}`},
		{name: "missing required", args: `{}`, want: "text"},
		{name: "wrong type", args: `{"text":5}`, want: "text: got number, want string"},
		{name: "extra property", args: `{"text":"a","rm":true}`, want: "rm"},
		{name: "below minimum", args: `{"text":"a","times":0}`, want: "times"},
		{name: "not an integer", args: `{"text":"a","times":1.5}`, want: "times"},
		{name: "not in enum", args: `{"text":"a","mode":"quiet"}`, want: "mode"},
		{name: "not an object", args: `["text"]`, want: "want an object"},
		{name: "not JSON", args: `{"text":`, want: "not valid JSON"},
		{name: "trailing data", args: `{"text":"a"} {}`, want: "not valid JSON"},
		{name: "too large", args: `{"text":"` + strings.Repeat("a", 2000) + `"}`, want: "at most 1024 allowed"},
		{name: "empty means no arguments", args: ``, want: "text"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := r.Run(t.Context(), "echo", call(tt.args))
			if err != nil {
				t.Fatalf("Run: %v (bad arguments must not be a Go error)", err)
			}
			if tt.want == "" {
				if res.IsError {
					t.Fatalf("valid call failed: %s", res.Content)
				}
				return
			}
			if !res.IsError || !strings.Contains(res.Content, tt.want) || !strings.Contains(res.Content, `tool "echo"`) {
				t.Fatalf("result = %+v, want an error naming the tool and %q", res, tt.want)
			}
			verr := r.Validate("echo", []byte(tt.args))
			if !errors.Is(verr, tools.ErrInvalidArgs) {
				t.Fatalf("Validate = %v, want ErrInvalidArgs", verr)
			}
			var ae *tools.ArgsError
			if !errors.As(verr, &ae) || len(ae.Problems) == 0 {
				t.Fatalf("Validate = %v, want an *ArgsError with problems", verr)
			}
		})
	}
}

func TestRunUnknownToolIsAResult(t *testing.T) {
	r, err := tools.NewRegistry(tools.RegistryOptions{}, echo())
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(t.Context(), "ehco", call(`{}`))
	if err != nil || !res.IsError || !strings.Contains(res.Content, `unknown tool "ehco"`) || !strings.Contains(res.Content, "echo") {
		t.Fatalf("Run(ehco) = %+v, %v; want an error result naming it and the available tools", res, err)
	}
}

func TestRunRecoversPanic(t *testing.T) {
	reg := prometheus.NewRegistry()
	boom := tools.NewFunc(spec("boom"), func(context.Context, tools.Call) (tools.Result, error) { panic("nil map") })
	r, err := tools.NewRegistry(tools.RegistryOptions{Metrics: reg}, boom)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(t.Context(), "boom", call(`{}`))
	if err != nil || !res.IsError || !strings.Contains(res.Content, "internal error") {
		t.Fatalf("Run(boom) = %+v, %v; want an error result", res, err)
	}
	if n := counter(t, reg, "boom", "panic"); n != 1 {
		t.Fatalf("panic calls = %v, want 1", n)
	}
}

// counter reads jetloop_tool_calls_total{tool, outcome} from reg.
func counter(t *testing.T, reg *prometheus.Registry, tool, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "jetloop_tool_calls_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["tool"] == tool && labels["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// waiter blocks until its context ends and reports how it ended.
func waiter() tools.Tool {
	return tools.NewFunc(spec("wait"), func(ctx context.Context, _ tools.Call) (tools.Result, error) {
		<-ctx.Done()
		return tools.Result{Content: "partial output", IsError: true}, nil
	})
}

func TestRunTimeout(t *testing.T) {
	r, err := tools.NewRegistry(tools.RegistryOptions{Timeout: 20 * time.Millisecond}, waiter())
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(t.Context(), "wait", call(`{}`))
	if err != nil {
		t.Fatalf("a timeout is the model's to see, not a Go error: %v", err)
	}
	if !res.IsError || !strings.Contains(res.Content, "partial output") || !strings.Contains(res.Content, "timed out after 20ms") {
		t.Fatalf("result = %+v, want the partial output and the timeout", res)
	}
}

func TestRunCancelled(t *testing.T) {
	started := make(chan struct{})
	tool := tools.NewFunc(spec("wait"), func(ctx context.Context, _ tools.Call) (tools.Result, error) {
		close(started)
		<-ctx.Done()
		return tools.Result{}, ctx.Err()
	})
	r, err := tools.NewRegistry(tools.RegistryOptions{}, tool)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-started; cancel() }()
	res, err := r.Run(ctx, "wait", call(`{}`))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if !res.IsError || !strings.Contains(res.Content, "cancelled") {
		t.Fatalf("result = %+v, want a cancelled error result to settle", res)
	}
}

func TestRunToolError(t *testing.T) {
	broken := tools.NewFunc(spec("broken"), func(context.Context, tools.Call) (tools.Result, error) {
		return tools.Result{}, errors.New("no connection to the MCP server")
	})
	r, err := tools.NewRegistry(tools.RegistryOptions{}, broken)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(t.Context(), "broken", call(`{}`))
	if err == nil || !strings.Contains(err.Error(), "no connection") {
		t.Fatalf("err = %v, want the tool's error", err)
	}
	if !res.IsError || !strings.Contains(res.Content, "could not run") {
		t.Fatalf("result = %+v, want an error result", res)
	}
}

// blobStore provisions the real jl_blobs object store on an embedded server.
func blobStore(t *testing.T) jetstream.ObjectStore {
	t.Helper()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s.ClientURL())
	if _, err := streams.Provision(t.Context(), js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(t.Context(), streams.Default().ObjectBlobs())
	if err != nil {
		t.Fatal(err)
	}
	return obs
}

func TestRunOffloadsLargeResults(t *testing.T) {
	obs := blobStore(t)
	r, err := tools.NewRegistry(tools.RegistryOptions{Blobs: obs}, echo())
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Repeat("x", 99) + "\n"
	small, err := r.Run(t.Context(), "echo", call(`{"text":"`+strings.TrimSuffix(line, "\n")+`\n","times":10}`))
	if err != nil || small.Blob != "" || small.Content != strings.Repeat(line, 10) {
		t.Fatalf("small result = %+v, %v; want it inline", small, err)
	}
	res, err := r.Run(t.Context(), "echo", call(`{"text":"`+strings.TrimSuffix(line, "\n")+`\n","times":1000}`))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(strings.Repeat(line, 1000)))
	wantHandle, _ := streams.Default().ResultBlob(mustRef(t), "call-1", hex.EncodeToString(sum[:16]))
	if res.Blob != wantHandle {
		t.Fatalf("Blob = %q, want %q", res.Blob, wantHandle)
	}
	if len(res.Content) > tools.DefaultPreviewBytes+200 || !strings.HasPrefix(res.Content, line) || !strings.Contains(res.Content, wantHandle) || !strings.Contains(res.Content, "100000 bytes") {
		t.Fatalf("content (%d bytes) = %q…, want the first lines, the handle and the size", len(res.Content), res.Content[:min(300, len(res.Content))])
	}
	o, err := obs.Get(t.Context(), res.Blob)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	full, err := io.ReadAll(o)
	if err != nil || string(full) != strings.Repeat(line, 1000) {
		t.Fatalf("stored blob: %d bytes, %v; want the full result", len(full), err)
	}
}

func TestRunTruncatesWithoutStore(t *testing.T) {
	r, err := tools.NewRegistry(tools.RegistryOptions{BlobThreshold: 4096, PreviewBytes: 1024}, echo())
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(t.Context(), "echo", call(`{"text":"éééééééééé","times":1000}`))
	if err != nil {
		t.Fatal(err)
	}
	if res.Blob != "" || len(res.Content) > 4096+200 || !strings.Contains(res.Content, "truncated: result is 20000 bytes") {
		t.Fatalf("result (%d bytes) ends %q; want a truncated result", len(res.Content), res.Content[max(0, len(res.Content)-200):])
	}
	if !strings.HasPrefix(res.Content, strings.Repeat("é", 2048)+"\n") {
		t.Fatal("truncation split a rune or lost the head")
	}
}

func mustRef(t *testing.T) streams.SessionRef {
	t.Helper()
	ref, err := streams.NewSessionRef("pr-reviewer", "octo/repo#12")
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

func TestRunTruncatesWhenTheStoreFails(t *testing.T) {
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s.ClientURL())
	if _, err := streams.Provision(t.Context(), js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	name := streams.Default().ObjectBlobs()
	obs, err := js.ObjectStore(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteObjectStore(t.Context(), name); err != nil {
		t.Fatal(err)
	}
	r, err := tools.NewRegistry(tools.RegistryOptions{Blobs: obs}, echo())
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(t.Context(), "echo", call(`{"text":"01234567890123456789","times":1000}`))
	if err != nil {
		t.Fatalf("a store failure must still leave a result to settle: %v", err)
	}
	if res.Blob != "" || len(res.Content) > tools.DefaultBlobThreshold+200 || !strings.Contains(res.Content, "could not be stored") {
		t.Fatalf("result (%d bytes, blob %q) ends %q", len(res.Content), res.Blob, res.Content[max(0, len(res.Content)-150):])
	}
}
