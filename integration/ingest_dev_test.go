package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/streams"
)

const ingestSecret = "integration-secret"

func postWebhook(t *testing.T, base, event, delivery string, body []byte, sig string) (int, map[string]any) {
	t.Helper()
	status, out, err := postWebhookStatus(base, event, delivery, body, sig)
	if err != nil {
		t.Fatal(err)
	}
	return status, out
}

// postWebhookStatus is postWebhook for another goroutine than the test's.
func postWebhookStatus(base, event, delivery string, body []byte, sig string) (int, map[string]any, error) {
	req, _ := http.NewRequest(http.MethodPost, base+"/webhooks/github", bytes.NewReader(body))
	req.Header.Set(ingest.HeaderGitHubEvent, event)
	if delivery != "" {
		req.Header.Set(ingest.HeaderGitHubDelivery, delivery)
	}
	req.Header.Set(ingest.HeaderGitHubSignature, sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("post %s delivery %s: %w", event, delivery, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out, nil
}

func runCLI(t *testing.T, bin string, env []string, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// TestIngestUnderDev is the ingest acceptance path against `jetloop dev`
// as users run it: a signed real pull_request opened delivery gets 202
// and one message on the reviewer's session subject; a redelivery is a
// duplicate; a bad signature, a missing delivery header and broken JSON
// are refused and store nothing; a definition with a CEL error is refused
// by `jetloop apply` with its line while the earlier version keeps
// serving; `jetloop webhook` signs with the secret `jetloop dev` keeps.
func TestIngestUnderDev(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := buildJetloop(t)
	data := t.TempDir()
	t.Setenv("JETLOOP_GITHUB_SECRET", ingestSecret)
	p := startProc(t, bin, append(devArgs(data), "--workers", "0")...)
	ready := p.waitReady(time.Minute)
	base := ready["http"]
	defer func() {
		if err := p.stop(syscall.SIGTERM, 30*time.Second); err != nil {
			t.Errorf("dev did not stop: %v\n%s", err, p.Stderr())
		}
	}()
	nc, err := nats.Connect(ready["nats"])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	in, err := js.Stream(ctx, streams.Default().StreamIn())
	if err != nil {
		t.Fatal(err)
	}
	// Admitted events only: the example monitor's schedule message
	// (jl.sched.>) and its ticks live in the same stream.
	names := streams.Default()
	ticks, _ := names.InAgent("monitor")
	count := func() uint64 {
		info, err := in.Info(ctx, jetstream.WithSubjectFilter(names.InAll()))
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		for subj, c := range info.State.Subjects {
			if !strings.HasPrefix(subj, strings.TrimSuffix(ticks, ">")) {
				n += c
			}
		}
		return n
	}

	body, err := os.ReadFile("../ingest/testdata/github/pull_request/opened.payload.json")
	if err != nil {
		t.Fatal(err)
	}
	sig := ingest.Sign([]byte(ingestSecret), body)
	refusals := []struct {
		name, delivery, sig string
		body                []byte
		status              int
	}{
		{name: "bad signature", delivery: "r-1", sig: ingest.Sign([]byte("wrong"), body), body: body, status: 401},
		{name: "missing delivery", sig: sig, body: body, status: 400},
		{name: "broken JSON", delivery: "r-2", sig: ingest.Sign([]byte(ingestSecret), body[:100]), body: body[:100], status: 400},
	}
	for _, tt := range refusals {
		if status, out := postWebhook(t, base, "pull_request", tt.delivery, tt.body, tt.sig); status != tt.status {
			t.Fatalf("%s: %d %v, want %d", tt.name, status, out, tt.status)
		}
	}
	if n := count(); n != 0 {
		t.Fatalf("%d messages stored after refusals", n)
	}

	status, out := postWebhook(t, base, "pull_request", "int-1", body, sig)
	if status != http.StatusAccepted || out["duplicate"] != false {
		t.Fatalf("delivery: %d %v", status, out)
	}
	ref, _ := streams.NewSessionRef("pr-reviewer", "Codertocat/Hello-World#2")
	if _, err := in.GetLastMsgForSubject(ctx, streams.Default().In(ref)); err != nil {
		t.Fatalf("no message on %s: %v", streams.Default().In(ref), err)
	}
	if status, out := postWebhook(t, base, "pull_request", "int-1", body, sig); status != http.StatusAccepted || out["duplicate"] != true {
		t.Fatalf("redelivery: %d %v", status, out)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d messages after a delivery and its redelivery, want 1", n)
	}

	// A CEL error is refused with its line; the earlier version serves.
	env := []string{"JETLOOP_SERVER=" + ready["nats"]}
	bad := filepath.Join(t.TempDir(), "pr-reviewer.yaml")
	src, _ := os.ReadFile("../examples/pr-reviewer.yaml")
	broken := strings.Replace(string(src), "session: event.data.repository.full_name", "session: event.data.repository.full_name +", 1)
	if err := os.WriteFile(bad, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	// The error names the file and the line of the broken expression.
	line := 1 + strings.Count(broken[:strings.Index(broken, "session: event.data.repository.full_name +")], "\n")
	_, stderr, err := runCLI(t, bin, env, "apply", bad)
	if want := fmt.Sprintf("%s:%d:", bad, line); exitCode(err) != 1 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "triggers[0].session") {
		t.Fatalf("apply of a bad definition: exit %v, stderr %q, want %q and the field", err, stderr, want)
	}
	agents, _, err := runCLI(t, bin, env, "agents", "--json")
	if err != nil || !strings.Contains(agents, `"source": "examples/pr-reviewer.yaml"`) {
		t.Fatalf("agents after a refused apply: %v %s", err, agents)
	}
	body2, _ := os.ReadFile("../ingest/testdata/github/pull_request/synchronize.payload.json")
	fixture := filepath.Join(t.TempDir(), "sync.json")
	_ = os.WriteFile(fixture, body2, 0o644)
	stdout, stderr, err := runCLI(t, bin, nil, "webhook", "github", "--url", base, "--delivery", "int-2", "pull_request", fixture)
	if err != nil || !strings.Contains(stdout, `"agent":"pr-reviewer"`) {
		t.Fatalf("webhook after a refused apply: %v\n%s\n%s", err, stdout, stderr)
	}
	events, _, err := runCLI(t, bin, env, "events", "--json")
	if err != nil || !strings.Contains(events, `"rule": "pr-reviewer/pr-opened"`) || !strings.Contains(events, `"decision": "duplicate"`) {
		t.Fatalf("events: %v %s", err, events)
	}
}
