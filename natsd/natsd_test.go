package natsd_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/natsd"
)

func start(t *testing.T, cfg natsd.Config) *natsd.Server {
	t.Helper()
	s, err := natsd.Start(cfg)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s
}

func TestSecondServerOnSameFolderIsRefused(t *testing.T) {
	dir := t.TempDir()
	start(t, natsd.Config{Dir: dir})
	_, err := natsd.Start(natsd.Config{Dir: dir})
	if !errors.Is(err, natsd.ErrLocked) {
		t.Fatalf("second start on %s: got %v, want ErrLocked", dir, err)
	}
	if !strings.Contains(err.Error(), dir) {
		t.Errorf("error %q does not name the folder", err)
	}
}

func TestLockIsReleasedOnShutdown(t *testing.T) {
	dir := t.TempDir()
	s, err := natsd.Start(natsd.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	start(t, natsd.Config{Dir: dir})
}

func TestMessagesSurviveRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := natsd.Start(natsd.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.a", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	s = start(t, natsd.Config{Dir: dir})
	nc, err = nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ = jetstream.New(nc)
	st, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, "s.a")
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != "kept" {
		t.Fatalf("after restart got %q, want %q", m.Data, "kept")
	}
}

func TestSyncPolicy(t *testing.T) {
	tests := []struct {
		name       string
		cfg        natsd.Config
		wantAlways bool
	}{
		{name: "single node defaults to always", cfg: natsd.Config{}, wantAlways: true},
		{name: "explicit interval", cfg: natsd.Config{Sync: "2m"}, wantAlways: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Dir = t.TempDir()
			s := start(t, tt.cfg)
			if got := s.Server().JetStreamConfig().SyncAlways; got != tt.wantAlways {
				t.Fatalf("SyncAlways = %v, want %v", got, tt.wantAlways)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  natsd.Config
		want string
	}{
		{name: "no dir", cfg: natsd.Config{}, want: "Dir"},
		{name: "bad sync", cfg: natsd.Config{Dir: "x", Sync: "sometimes"}, want: "sometimes"},
		{name: "bad port", cfg: natsd.Config{Dir: "x", Port: 70000}, want: "70000"},
		{name: "cluster without routes", cfg: natsd.Config{Dir: "x", Cluster: natsd.ClusterConfig{Name: "c"}}, want: "routes"},
		{name: "routes without cluster", cfg: natsd.Config{Dir: "x", Cluster: natsd.ClusterConfig{Routes: []string{"nats-route://127.0.0.1:1"}}}, want: "cluster name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

func TestTakenPortFailsAtOnceWithTheReason(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	_, err = natsd.Start(natsd.Config{Dir: t.TempDir(), Port: port})
	if err == nil || errors.Is(err, natsd.ErrNotReady) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("start on a taken port: %v, want the listener's error", err)
	}
	// The store folder is free again for the next try.
	start(t, natsd.Config{Dir: t.TempDir()})
}
