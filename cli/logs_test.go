package cli_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/cli"
	"github.com/jetloop/jetloop/internal/natstest"
)

// startComponent runs `jetloop ingest|worker|cron` with args until the
// test ends or stop is called and returns its stderr once it logged that
// it runs. Its lines go through the package's log checker (see env).
func startComponent(t *testing.T, vars map[string]string, args ...string) (stderr *syncBuffer, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stderr = newSyncBuffer()
	done := make(chan int, 1)
	go func() { done <- cli.MainEnv(ctx, env(io.Discard, stderr, vars), args) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case code := <-done:
				if code != 0 {
					t.Errorf("jetloop %s exited %d; stderr:\n%s", args[0], code, stderr.String())
				}
			case <-time.After(time.Minute):
				t.Errorf("jetloop %s did not stop", args[0])
			}
		})
	}
	t.Cleanup(stop)
	stderr.waitFor(t, `msg=running`, 2*time.Minute)
	return stderr, stop
}

// TestComponentLogsAndMetricLabels runs ingest, cron and two workers one
// after the other (as a restart with a new --id would) as separate
// components, every line they log at any level checked for a repeated key
// (the process's `instance`, a component's `component`, the worker's,
// the session's and a step's attributes, and each line's own: a control
// message's `id` among them), and sends messages, steers and reads
// /metrics: no series carries a worker's id, so a restart mints none.
func TestComponentLogsAndMetricLabels(t *testing.T) {
	s := natstest.RunServer(t)
	url := s.ClientURL()
	vars := map[string]string{"JETLOOP_INGEST_TOKEN": "t0ken", "JETLOOP_WORK_DIR": t.TempDir()}
	ingest, _ := startComponent(t, vars, "ingest", "--server", url, "--id", "ingest-one", "--http", "127.0.0.1:0")
	m := regexp.MustCompile(`msg="http listening".* addr=(\S+)`).FindStringSubmatch(ingest.String())
	if m == nil {
		t.Fatalf("no listen address:\n%s", ingest.String())
	}
	httpURL := "http://" + m[1]
	_, _ = startComponent(t, vars, "cron", "--server", url, "--id", "cron-one", "--http", "")
	def := filepath.Join(t.TempDir(), "echo.yaml")
	yaml := "name: echo\nmodel: {provider: scripted, script_scope: session, script: [{text: one}, {text: two}, {text: three}]}\n" +
		"triggers:\n  - {name: request, when: 'event.type == \"dev.jetloop.request\"', session: event.subject}\n"
	if err := os.WriteFile(def, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := []string{"--server", url}
	if code, out, errs := run(t, vars, append([]string{"apply", def}, srv...)...); code != 0 {
		t.Fatalf("apply: exit %d: %s %s", code, out, errs)
	}
	ids := []string{"worker-first-incarnation", "worker-second-incarnation"}
	for i, id := range ids {
		w, stop := startComponent(t, vars, "worker", "--server", url, "--id", id, "--http", "")
		session := []string{"s1", "s2"}[i]
		if code, out, errs := run(t, vars, append([]string{"send", "--wait", "--timeout", "1m", "echo", session, "hello"}, srv...)...); code != 0 || !strings.Contains(out, "done") {
			t.Fatalf("%s: send: exit %d: %s %s", id, code, out, errs)
		}
		if code, out, errs := run(t, vars, append([]string{"steer", "echo/" + session, "and", "more"}, srv...)...); code != 0 {
			t.Fatalf("%s: steer: exit %d: %s %s", id, code, out, errs)
		}
		w.waitFor(t, "control message", time.Minute)
		// Stopped as a restart would; the next has another id.
		stop()
	}
	resp, err := http.Get(httpURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	metrics := string(body)
	if !strings.Contains(metrics, `jetloop_worker_runs_total{agent="echo"`) {
		t.Fatalf("/metrics has no runs of echo:\n%s", grepLines(metrics, "jetloop_worker_runs_total"))
	}
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		for _, bad := range append(ids, `worker="`, `incarnation="`, `instance="`) {
			if strings.Contains(l, bad) {
				t.Errorf("a series names a process: %s", l)
				break
			}
		}
	}
}
