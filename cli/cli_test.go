package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/cli"
	"github.com/jetloop/jetloop/internal/logtest"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once, with
// a channel that signals every write.
type syncBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	wrote chan struct{}
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{wrote: make(chan struct{}, 1)} }

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case s.wrote <- struct{}{}:
	default:
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor waits until the buffer contains want.
func (s *syncBuffer) waitFor(t *testing.T, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for !strings.Contains(s.String(), want) {
		select {
		case <-s.wrote:
		case <-deadline:
			t.Fatalf("no %q within %s in:\n%s", want, timeout, s.String())
		}
	}
}

// checker is the test whose logs are held to one attribute a key per
// line; the package's tests set it (see TestMain).
var checker = &failures{}

// failures collects the lines with repeated keys of every process the
// tests run; TestMain fails the run if there are any.
type failures struct {
	mu    sync.Mutex
	lines []string
}

func (f *failures) Helper() {}
func (f *failures) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.lines) < 20 {
		f.lines = append(f.lines, fmt.Sprintf(format, args...))
	}
}

func env(stdout, stderr io.Writer, vars map[string]string) *cli.Env {
	return &cli.Env{
		Stdout: stdout, Stderr: stderr,
		// Every line the commands log is checked: a key repeated on one
		// line fails the package's tests.
		Log:    slog.New(logtest.New(checker, stderr, slog.LevelInfo)),
		Getenv: func(k string) string { return vars[k] },
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if len(checker.lines) > 0 {
		fmt.Fprintf(os.Stderr, "log lines that repeat a key:\n  %s\n", strings.Join(checker.lines, "\n  "))
		code = 1
	}
	os.Exit(code)
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{name: "no command", args: nil, code: 2, want: "Usage: jetloop COMMAND"},
		{name: "unknown command", args: []string{"frobnicate"}, code: 2, want: `unknown command "frobnicate"`},
		{name: "bad flag", args: []string{"dev", "--nope"}, code: 2, want: "flag provided but not defined"},
		{name: "stray argument", args: []string{"dev", "extra"}, code: 2, want: `unexpected argument "extra"`},
		{name: "bad workers", args: []string{"dev", "--workers", "-1"}, code: 1, want: "--workers -1"},
		{name: "help", args: []string{"help"}, code: 0, want: "Commands:"},
		{name: "version", args: []string{"version"}, code: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := cli.MainEnv(context.Background(), env(&out, &errb, nil), tt.args)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.code, errb.String())
			}
			if !strings.Contains(errb.String()+out.String(), tt.want) {
				t.Fatalf("output does not contain %q:\n%s%s", tt.want, out.String(), errb.String())
			}
		})
	}
}

// TestComponentConnectsAndProvisions runs `jetloop worker --server URL`
// against a real server: it provisions the layout, runs until cancelled and
// exits 0.
func TestComponentConnectsAndProvisions(t *testing.T) {
	for _, verb := range []string{"worker", "cron", "ingest"} {
		t.Run(verb, func(t *testing.T) {
			srv := natstest.RunServer(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stderr := newSyncBuffer()
			done := make(chan int, 1)
			go func() {
				done <- cli.MainEnv(ctx, env(io.Discard, stderr, nil), []string{verb, "--server", srv.ClientURL(), "--http", ""})
			}()
			stderr.waitFor(t, "msg=running", time.Minute)

			_, js := natstest.Connect(t, srv.ClientURL())
			for _, res := range streams.Layout(streams.Options{}) {
				if _, err := js.Stream(context.Background(), res.StreamName()); err != nil {
					t.Errorf("%s not provisioned: %v", res.Name, err)
				}
			}
			cancel()
			if code := <-done; code != 0 {
				t.Fatalf("exit %d after cancel; stderr:\n%s", code, stderr.String())
			}
		})
	}
}

func TestComponentReportsUnreachableServer(t *testing.T) {
	var errb bytes.Buffer
	code := cli.MainEnv(context.Background(), env(io.Discard, &errb, nil), []string{"worker", "--server", "nats://127.0.0.1:1", "--http", ""})
	if code != 1 || !strings.Contains(errb.String(), "nats://127.0.0.1:1") {
		t.Fatalf("exit %d, stderr %q: want 1 and the URL named", code, errb.String())
	}
}

func TestFlagsAfterPositionalArguments(t *testing.T) {
	var out, errb bytes.Buffer
	// An unknown flag after the positional argument is still a flag.
	code := cli.MainEnv(context.Background(), env(&out, &errb, nil), []string{"schedules", "resume", "a/b", "--nope"})
	if code != 2 || !strings.Contains(errb.String(), "flag provided but not defined: -nope") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

// TestLogFormatJSON runs a command with --log-format json anywhere on its
// line: every line it logs is one JSON object.
func TestLogFormatJSON(t *testing.T) {
	var out, errb bytes.Buffer
	code := cli.Main(context.Background(), []string{"dev", "--data", t.TempDir(), "--log-format", "json", "--nats-port", "0", "--http", "127.0.0.1:0", "--workers", "0", "--nope"}, &out, &errb)
	if code != 2 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var errb2 bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	stdout := newSyncBuffer()
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, []string{"dev", "--log-format=json", "--data", t.TempDir(), "--nats-port", "0", "--http", "127.0.0.1:0", "--workers", "0"}, stdout, &lockedWriter{w: &errb2})
	}()
	stdout.waitFor(t, "jetloop ready", 2*time.Minute)
	cancel()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("dev did not stop")
	}
	lines := strings.Split(strings.TrimSpace(errb2.String()), "\n")
	if len(lines) < 5 {
		t.Fatalf("%d log lines: %q", len(lines), errb2.String())
	}
	for _, l := range lines {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil || v["msg"] == nil || v["level"] == nil {
			t.Errorf("not a JSON log line: %q (%v)", l, err)
		}
	}
	if code := cli.Main(context.Background(), []string{"version", "--log-format", "xml"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "want text or json") {
		t.Errorf("--log-format xml: exit %d, %q", code, errb.String())
	}
}

// lockedWriter serialises writes of several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
