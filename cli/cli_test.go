package cli_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/cli"
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

func env(stdout, stderr io.Writer, vars map[string]string) *cli.Env {
	return &cli.Env{
		Stdout: stdout, Stderr: stderr,
		Log:    slog.New(slog.NewTextHandler(stderr, nil)),
		Getenv: func(k string) string { return vars[k] },
	}
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
