// Package mcptest runs MCP servers built with the official SDK for tests:
// in this process behind Streamable HTTP on loopback, or as a subprocess
// (the test binary itself, see Main) over stdio or Streamable HTTP. Each
// server offers echo, slow and list_issues and records what reached it —
// calls, their cancellation by the client, notifications/cancelled — as
// Events a test can wait for.
package mcptest

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jetloop/jetloop/internal/natstest"
)

// Event is one thing that reached a server.
type Event struct {
	// Kind is "start" (a subprocess began serving; Text is its pid, and
	// that of the child it spawned after a space), "call" (a tool call
	// began), "done" (it returned),
	// "cancelled" (its context ended before it finished) or
	// "notifications/cancelled" (the client's cancellation arrived).
	Kind string `json:"kind"`
	// Server is the server's name, Tool the tool's.
	Server string `json:"server"`
	Tool   string `json:"tool,omitempty"`
	// Text is echo's argument, or the reason of a cancellation.
	Text string    `json:"text,omitempty"`
	Time time.Time `json:"time"`
}

// Options shape a server.
type Options struct {
	// Name is the server's name (default "srv"); list_issues answers with it.
	Name string
	// EchoDescription is echo's description (default DefaultEchoDescription).
	EchoDescription string
	// Record receives every event, on the server's goroutines.
	Record func(Event)
	// SlowGate, when set, holds every slow call until it is closed (or the
	// call is cancelled), whatever its seconds.
	SlowGate <-chan struct{}
}

// DefaultEchoDescription is echo's description unless Options says otherwise.
const DefaultEchoDescription = "Echo the text back."

// NewServer builds the SDK server with the three tools.
func NewServer(o Options) *sdk.Server {
	if o.Name == "" {
		o.Name = "srv"
	}
	if o.EchoDescription == "" {
		o.EchoDescription = DefaultEchoDescription
	}
	rec := func(e Event) {
		e.Server, e.Time = o.Name, time.Now()
		if o.Record != nil {
			o.Record(e)
		}
	}
	s := sdk.NewServer(&sdk.Implementation{Name: o.Name, Version: "1"}, nil)
	type echoIn struct {
		Text string `json:"text" jsonschema:"the text to echo"`
	}
	sdk.AddTool(s, &sdk.Tool{Name: "echo", Description: o.EchoDescription}, func(ctx context.Context, _ *sdk.CallToolRequest, in echoIn) (*sdk.CallToolResult, any, error) {
		rec(Event{Kind: "call", Tool: "echo", Text: in.Text})
		defer rec(Event{Kind: "done", Tool: "echo"})
		text := in.Text
		if name, ok := strings.CutPrefix(text, "$"); ok {
			// "$NAME" answers the server's environment variable NAME.
			text = os.Getenv(name)
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}, nil, nil
	})
	type slowIn struct {
		Seconds float64 `json:"seconds,omitempty" jsonschema:"how long to take; default 60"`
	}
	sdk.AddTool(s, &sdk.Tool{Name: "slow", Description: "Take a long time, then answer done."}, func(ctx context.Context, _ *sdk.CallToolRequest, in slowIn) (*sdk.CallToolResult, any, error) {
		rec(Event{Kind: "call", Tool: "slow"})
		d := time.Duration(in.Seconds * float64(time.Second))
		if d <= 0 {
			d = time.Minute
		}
		t := time.NewTimer(d)
		defer t.Stop()
		timer := t.C
		if o.SlowGate != nil {
			timer = nil
		}
		select {
		case <-o.SlowGate:
			rec(Event{Kind: "done", Tool: "slow"})
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "done"}}}, nil, nil
		case <-timer:
			rec(Event{Kind: "done", Tool: "slow"})
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "done"}}}, nil, nil
		case <-ctx.Done():
			rec(Event{Kind: "cancelled", Tool: "slow", Text: context.Cause(ctx).Error()})
			return nil, nil, ctx.Err()
		}
	})
	type noIn struct{}
	sdk.AddTool(s, &sdk.Tool{Name: "list_issues", Description: "List the open issues of " + o.Name + "."}, func(ctx context.Context, _ *sdk.CallToolRequest, _ noIn) (*sdk.CallToolResult, any, error) {
		rec(Event{Kind: "call", Tool: "list_issues"})
		defer rec(Event{Kind: "done", Tool: "list_issues"})
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "issues of " + o.Name + ": #1, #2"}}}, nil, nil
	})
	s.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if method == "notifications/cancelled" {
				e := Event{Kind: "notifications/cancelled"}
				if p, ok := req.GetParams().(*sdk.CancelledParams); ok {
					e.Text = p.Reason
				}
				rec(e)
			}
			return next(ctx, method, req)
		}
	})
	return s
}

// Recorder collects a server's events for a test to wait for.
type Recorder struct {
	mu     sync.Mutex
	events []Event
	notify chan struct{}
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder { return &Recorder{notify: make(chan struct{}, 1)} }

// Record adds an event (an Options.Record).
func (r *Recorder) Record(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// Events returns what was recorded so far.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// Count counts the events of a kind and tool ("" for any tool).
func (r *Recorder) Count(kind, tool string) int {
	n := 0
	for _, e := range r.Events() {
		if e.Kind == kind && (tool == "" || e.Tool == tool) {
			n++
		}
	}
	return n
}

// Wait returns the first event of a kind and tool ("" for any tool),
// failing the test after timeout.
func (r *Recorder) Wait(t testing.TB, kind, tool string, timeout time.Duration) Event {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		for _, e := range r.Events() {
			if e.Kind == kind && (tool == "" || e.Tool == tool) {
				return e
			}
		}
		select {
		case <-r.notify:
		case <-deadline.C:
			t.Fatalf("mcptest: no %s event for tool %q within %s; events: %+v", kind, tool, timeout, r.Events())
			return Event{}
		}
	}
}

// WaitN waits until n events of a kind and tool ("" for any tool) were
// recorded, failing the test after timeout.
func (r *Recorder) WaitN(t testing.TB, kind, tool string, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for r.Count(kind, tool) < n {
		select {
		case <-r.notify:
		case <-deadline.C:
			t.Fatalf("mcptest: %d of %d %s events for tool %q within %s", r.Count(kind, tool), n, kind, tool, timeout)
		}
	}
}

// HTTP serves a server over Streamable HTTP on a loopback port until the
// test ends, and returns its endpoint URL. It may be stopped (Stop) and
// started again on the same address (Start), as a server restart.
type HTTP struct {
	Addr string
	URL  string
	mk   func() *sdk.Server
	wrap []func(http.Handler) http.Handler
	srv  *http.Server
	mu   sync.Mutex
	t    testing.TB
}

// ServeHTTP serves what mk builds (one server per start) on a new loopback
// port, behind wrap when given. The port is outside the kernel's
// ephemeral range (natstest.FreePorts), so Start finds it free again
// though clients dialled it while the server was stopped.
func ServeHTTP(t testing.TB, mk func() *sdk.Server, wrap ...func(http.Handler) http.Handler) *HTTP {
	t.Helper()
	ln, err := listenKept(t)
	if err != nil {
		t.Fatal(err)
	}
	h := &HTTP{Addr: ln.Addr().String(), mk: mk, t: t, wrap: wrap}
	h.URL = "http://" + h.Addr + "/mcp"
	h.serve(ln)
	t.Cleanup(h.Stop)
	return h
}

// listenKept listens on a loopback port natstest.FreePorts chose, choosing
// again when another process bound it first.
func listenKept(t testing.TB) (net.Listener, error) {
	t.Helper()
	var err error
	for range 5 {
		var ln net.Listener
		addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePorts(t, 1)[0])
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln, nil
		}
	}
	return nil, fmt.Errorf("mcptest: listen on a loopback port: %w", err)
}

func (h *HTTP) serve(ln net.Listener) {
	s := h.mk()
	handler := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, &sdk.StreamableHTTPOptions{
		EventStore: sdk.NewMemoryEventStore(nil),
	})
	var hd http.Handler = handler
	for _, w := range h.wrap {
		hd = w(hd)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", hd)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	h.mu.Lock()
	h.srv = srv
	h.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// Stop closes the listener and every connection at once, as a crash
// would.
func (h *HTTP) Stop() {
	h.mu.Lock()
	srv := h.srv
	h.srv = nil
	h.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// Start serves a fresh server (what mk builds now) on the same address.
func (h *HTTP) Start() {
	h.t.Helper()
	var ln net.Listener
	var err error
	for i := 0; i < 100; i++ {
		if ln, err = net.Listen("tcp", h.Addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond) // the port is released asynchronously
	}
	if err != nil {
		h.t.Fatalf("mcptest: listen again on %s: %v", h.Addr, err)
	}
	h.serve(ln)
}

// ServeArg is the first argument that makes Main serve.
const ServeArg = "mcptest-serve"

// Command is the command line that runs a server as a subprocess of the
// test binary over stdio (httpAddr "") or Streamable HTTP; events go as
// JSON lines to eventsFile when it is not "". An echoDescription of
// "@file" is read from that file when the process starts. TestMain must
// call Main.
func Command(name, eventsFile, httpAddr, echoDescription string) []string {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	args := []string{exe, ServeArg, "-name", name}
	if eventsFile != "" {
		args = append(args, "-events", eventsFile)
	}
	if httpAddr != "" {
		args = append(args, "-http", httpAddr)
	}
	if echoDescription != "" {
		args = append(args, "-echo-description", echoDescription)
	}
	return args
}

// Spawning is Command for a server that starts a child process in its
// process group when it starts (its pid follows the server's in the
// start event).
func Spawning(argv []string) []string {
	return append(argv, "-spawn")
}

// Main serves a server and exits when the process was started by
// Command; otherwise it returns at once. Call it first in TestMain.
func Main() {
	if len(os.Args) < 2 || os.Args[1] != ServeArg {
		return
	}
	fs := flag.NewFlagSet(ServeArg, flag.ExitOnError)
	name := fs.String("name", "srv", "server name")
	events := fs.String("events", "", "file to append events to")
	addr := fs.String("http", "", "serve Streamable HTTP on this address instead of stdio")
	desc := fs.String("echo-description", "", "echo's description, or @file to read it from")
	spawn := fs.Bool("spawn", false, "start a child (sleep) in the server's process group")
	_ = fs.Parse(os.Args[2:])
	if f, ok := strings.CutPrefix(*desc, "@"); ok {
		b, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		*desc = strings.TrimSpace(string(b))
	}
	o := Options{Name: *name, EchoDescription: *desc}
	if *events != "" {
		f, err := os.OpenFile(*events, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		var mu sync.Mutex
		o.Record = func(e Event) {
			b, _ := json.Marshal(e)
			mu.Lock()
			defer mu.Unlock()
			_, _ = f.Write(append(b, '\n'))
		}
	}
	s := NewServer(o)
	start := fmt.Sprint(os.Getpid())
	if *spawn {
		child := exec.Command("sleep", "300")
		if err := child.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		start += fmt.Sprint(" ", child.Process.Pid)
	}
	if o.Record != nil {
		o.Record(Event{Kind: "start", Server: *name, Text: start, Time: time.Now()})
	}
	var err error
	if *addr != "" {
		handler := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, &sdk.StreamableHTTPOptions{EventStore: sdk.NewMemoryEventStore(nil)})
		err = http.ListenAndServe(*addr, handler)
	} else {
		err = s.Run(context.Background(), &sdk.StdioTransport{})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// ReadEvents reads the events a subprocess wrote to file.
func ReadEvents(file string) []Event {
	f, err := os.Open(file)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []Event
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e Event
		if json.Unmarshal([]byte(strings.TrimSpace(sc.Text())), &e) == nil {
			out = append(out, e)
		}
	}
	return out
}

// CountEvents counts a file's events of a kind and tool ("" for any).
func CountEvents(file, kind, tool string) int {
	n := 0
	for _, e := range ReadEvents(file) {
		if e.Kind == kind && (tool == "" || e.Tool == tool) {
			n++
		}
	}
	return n
}
