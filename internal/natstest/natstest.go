package natstest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/natsd"
)

// readyTimeout bounds how long a helper waits for a server or cluster.
const readyTimeout = 60 * time.Second

// Option adjusts the config of a test server.
type Option func(*natsd.Config)

// WithSync sets the JetStream sync policy ("always" or a duration).
func WithSync(sync string) Option { return func(c *natsd.Config) { c.Sync = sync } }

// WithDir runs the server on the given store folder instead of a new temp
// folder, so a test can restart a server on the same store.
func WithDir(dir string) Option { return func(c *natsd.Config) { c.Dir = dir } }

// RunServer starts a single-node JetStream server on a random loopback port
// with its store in a temp folder, and stops it when the test ends.
func RunServer(t testing.TB, opts ...Option) *natsd.Server {
	t.Helper()
	cfg := natsd.Config{Dir: t.TempDir(), Name: "test"}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := natsd.Start(cfg)
	if err != nil {
		t.Fatalf("natstest: start server: %v", err)
	}
	t.Cleanup(func() { shutdown(t, s) })
	return s
}

// Connect opens a client connection to url, closed when the test ends.
func Connect(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.Name(t.Name()), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("natstest: connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	return nc, js
}

// WaitFor calls f until it returns nil or timeout passes, then fails the test
// with f's last error. It is for conditions no event announces (a cluster
// electing a leader); prefer awaiting an event where one exists.
func WaitFor(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	if err := Poll(context.Background(), timeout, f); err != nil {
		t.Fatalf("natstest: %v", err)
	}
}

// Poll calls f with a growing pause until it returns nil, ctx ends or
// timeout passes, and returns f's last error in that case.
func Poll(ctx context.Context, timeout time.Duration, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pause := time.Millisecond
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("condition not met within %s: %w", timeout, errors.Join(err, ctx.Err()))
		case <-time.After(pause):
		}
		pause = min(pause*2, 100*time.Millisecond)
	}
}

func shutdown(t testing.TB, s *natsd.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("natstest: %v", err)
	}
}
