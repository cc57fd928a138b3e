package integration

import (
	"context"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/streams"
)

func devArgs(data string) []string {
	return []string{"dev", "--data", data, "--nats-port", "0", "--http", "127.0.0.1:0"}
}

// TestDevKeepsMessagesAcrossRestart runs `jetloop dev` as its users do:
// it becomes ready and healthy with every stream and bucket, keeps a
// message published to jl.in.x.y across SIGTERM and a restart on the same
// --data, and refuses a second instance on that folder.
func TestDevKeepsMessagesAcrossRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := buildJetloop(t)
	data := t.TempDir()

	p := startProc(t, bin, devArgs(data)...)
	ready := p.waitReady(time.Minute)
	if !strings.HasPrefix(ready["nats"], "nats://") || !strings.HasPrefix(ready["http"], "http://") {
		t.Fatalf("ready line lacks addresses: %v", ready)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(ready["http"] + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s = %d %s", path, resp.StatusCode, body)
		}
	}

	nc, err := nats.Connect(ready["nats"])
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	for _, res := range streams.Layout(streams.Options{}) {
		if _, err := js.Stream(ctx, res.StreamName()); err != nil {
			t.Errorf("%s %s missing: %v", res.Kind, res.Name, err)
		}
	}
	ack, err := js.Publish(ctx, "jl.in.x.y", []byte("survives"))
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	nc.Close()

	// A second instance on the same folder, even on the same HTTP port, is
	// refused with a clear error about the folder.
	second := startProc(t, bin, "dev", "--data", data, "--nats-port", "0", "--http", strings.TrimPrefix(ready["http"], "http://"))
	err = second.wait(time.Minute)
	if exitCode(err) != 1 || !strings.Contains(second.Stderr(), "another jetloop is running") {
		t.Fatalf("second instance: exit %v, stderr %q", err, second.Stderr())
	}

	if err := p.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatalf("dev did not exit cleanly on SIGTERM: %v\nstderr:\n%s", err, p.Stderr())
	}

	p = startProc(t, bin, devArgs(data)...)
	ready = p.waitReady(time.Minute)
	nc, err = nats.Connect(ready["nats"])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ = jetstream.New(nc)
	s, err := js.Stream(ctx, "JL_IN")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.GetMsg(ctx, ack.Sequence)
	if err != nil {
		t.Fatalf("message %d after restart: %v", ack.Sequence, err)
	}
	if msg.Subject != "jl.in.x.y" || string(msg.Data) != "survives" {
		t.Fatalf("after restart got %s %q", msg.Subject, msg.Data)
	}
	if err := p.stop(syscall.SIGINT, 30*time.Second); err != nil {
		t.Fatalf("dev did not exit cleanly on SIGINT: %v", err)
	}
}
