package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
)

// natsPub publishes a control message the way an operator or a chat bot
// does with the nats CLI: `nats pub <subject> <body> -H ce-…:…`. Without
// the CLI installed the same message goes out as the same core publish.
func natsPub(t *testing.T, url, subject, body string, headers map[string]string) {
	t.Helper()
	if bin, err := exec.LookPath("nats"); err == nil {
		args := []string{"--server", url, "pub", subject, body}
		for k, v := range headers {
			args = append(args, "-H", k+":"+v)
		}
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			t.Fatalf("nats %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	m := nats.NewMsg(subject)
	for k, v := range headers {
		m.Header.Set(k, v)
	}
	m.Data = []byte(body)
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// processAlive reports whether pid is a live process (not a zombie).
func processAlive(pid int) bool {
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

// TestDevCancelByNatsPub is issue 5's first acceptance point: with
// `jetloop dev`, a session whose scripted model calls shell with sleep 30
// is cancelled by a `nats pub` on its control subject and reaches
// cancelled with the sleep process gone.
func TestDevCancelByNatsPub(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop")
	}
	bin := buildJetloop(t)
	data, work := t.TempDir(), t.TempDir()
	t.Setenv("JETLOOP_WORK_DIR", work)
	p := startProc(t, bin, devArgs(data)...)
	url := p.waitReady(time.Minute)["nats"]
	putAgent(t, url, policies.Definition{
		Name: "sleeper", Tools: []string{"shell"},
		Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{
			{Text: "Sleeping.", ToolCalls: []policies.ScriptToolCall{{Name: "shell", Args: map[string]any{"command": "echo $$ > pid.txt; exec sleep 30"}}}},
			{Text: "Woke up."},
		}},
	})
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	names := streams.Default()
	ref, _ := streams.NewSessionRef("sleeper", "s1")
	statuses, err := nc.SubscribeSync(names.Status(ref))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jetloopCmd(t, bin, "send", "--server", url, "sleeper", "s1", "sleep"); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(work, "sleeper", "s1", "pid.txt")
	var pid int
	natstest.WaitFor(t, time.Minute, func() error {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return err
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err
	})
	if !processAlive(pid) {
		t.Fatalf("sleep %d is not running", pid)
	}

	sent := time.Now()
	natsPub(t, url, names.Ctl(ref), `{"text":"stop"}`, map[string]string{
		"ce-specversion": "1.0",
		"ce-type":        "dev.jetloop.control.cancel",
		"ce-source":      "/ops/alice",
		"ce-id":          "cancel-1",
	})
	for {
		m, err := statuses.NextMsg(time.Minute)
		if err != nil {
			t.Fatalf("no cancelled status: %v\ndev stderr:\n%s", err, p.Stderr())
		}
		var ch struct{ Status string }
		if err := json.Unmarshal(m.Data, &ch); err != nil {
			t.Fatal(err)
		}
		if ch.Status == "cancelled" {
			break
		}
	}
	t.Logf("nats pub to cancelled status: %s", time.Since(sent))
	if processAlive(pid) {
		t.Fatalf("sleep %d still runs after cancelled", pid)
	}
	s, err := show(t, bin, url, "sleeper/s1")
	if err != nil {
		t.Fatal(err)
	}
	var ks []string
	for _, e := range s.Transcript {
		ks = append(ks, e["kind"].(string))
	}
	if s.Status != "cancelled" || strings.Join(ks, ",") != "user,assistant,tool_call,control,tool_result" {
		t.Fatalf("show: %s %v", s.Status, ks)
	}
	if r := s.Transcript[4]; r["result"] != "cancelled; may or may not have run" || r["is_error"] != true {
		t.Fatalf("shell result %v", r)
	}
}

// TestDevSteerWithoutWorkersAppliedOnce is issue 5's second acceptance
// point: a steer published while no worker runs (`jetloop dev --workers
// 0`) is applied exactly once when `jetloop worker` starts; a second
// worker that is handed the same message again ignores it.
func TestDevSteerWithoutWorkersAppliedOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop")
	}
	bin := buildJetloop(t)
	data := t.TempDir()
	t.Setenv("JETLOOP_WORK_DIR", t.TempDir())
	p := startProc(t, bin, append(devArgs(data), "--workers", "0")...)
	url := p.waitReady(time.Minute)["nats"]
	putAgent(t, url, policies.Definition{
		Name:  "steered",
		Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{{Text: "Brief, as asked."}}},
	})
	if _, err := jetloopCmd(t, bin, "send", "--server", url, "steered", "s1", "summarise the incident"); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	names := streams.Default()
	ref, _ := streams.NewSessionRef("steered", "s1")
	ctx := context.Background()
	seq, err := control.Publish(ctx, js, names, ref, control.Message{Verb: control.Steer, Text: "keep it to three lines"})
	if err != nil {
		t.Fatal(err)
	}
	// Nobody ran anything yet.
	if _, err := show(t, bin, url, "steered/s1"); err == nil {
		t.Fatal("the session exists before any worker ran")
	}

	w := startProc(t, bin, "worker", "--server", url, "--id", "w1", "--http", "")
	var s showJSON
	natstest.WaitFor(t, time.Minute, func() error {
		var err error
		if s, err = show(t, bin, url, "steered/s1"); err != nil {
			return err
		}
		if s.Status != "done" {
			return fmt.Errorf("status %s", s.Status)
		}
		return nil
	})
	steers := func(s showJSON) (n int, kinds []string) {
		for _, e := range s.Transcript {
			kinds = append(kinds, e["kind"].(string))
			if e["kind"] == "control" && e["name"] == "steer" && e["text"] == "keep it to three lines" {
				n++
			}
		}
		return n, kinds
	}
	if n, ks := steers(s); n != 1 || strings.Join(ks, ",") != "user,control,assistant" {
		t.Fatalf("steer applied %d times: %v\nworker stderr:\n%s", n, ks, w.Stderr())
	}
	if err := w.stop(syscall.SIGTERM, time.Minute); err != nil {
		t.Fatalf("worker: %v\n%s", err, w.Stderr())
	}

	// Hand the message out again: a fresh consumer delivers it from the
	// start, to a new worker, which must acknowledge it and change nothing.
	name, _ := names.CtlConsumerName("steered")
	if err := js.DeleteConsumer(ctx, names.StreamCtl(), name); err != nil {
		t.Fatal(err)
	}
	w = startProc(t, bin, "worker", "--server", url, "--id", "w2", "--http", "")
	natstest.WaitFor(t, time.Minute, func() error {
		c, err := js.Consumer(ctx, names.StreamCtl(), name)
		if err != nil {
			return err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return err
		}
		if info.Delivered.Stream != seq || info.NumAckPending != 0 || info.AckFloor.Stream != seq {
			return fmt.Errorf("delivered %d, ack floor %d, %d ack pending", info.Delivered.Stream, info.AckFloor.Stream, info.NumAckPending)
		}
		return nil
	})
	s, err = show(t, bin, url, "steered/s1")
	if err != nil {
		t.Fatal(err)
	}
	if n, ks := steers(s); n != 1 || strings.Join(ks, ",") != "user,control,assistant" || s.Status != "done" {
		t.Fatalf("after redelivery: %s, steer %d times: %v", s.Status, n, ks)
	}
	_ = w.stop(syscall.SIGTERM, time.Minute)
}
