package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/cli"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
)

// TestSessionVerbsThroughTheAPI runs send, status, show and tail as a
// NATS user that may only call the runtime API (and hear status
// changes): they are thin clients of jl.api.*, as DESIGN §11 says, and
// need no access to JetStream.
func TestSessionVerbsThroughTheAPI(t *testing.T) {
	auth := filepath.Join(t.TempDir(), "auth.conf")
	conf := `authorization {
  users: [
    {user: admin, password: admin-pw}
    {user: viewer, password: viewer-pw, permissions: {
      publish: {allow: ["jl.api.>"]}
      subscribe: {allow: ["_INBOX.>", "jl.status.>"]}
    }}
  ]
}
`
	if err := os.WriteFile(auth, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	natsURL, _, _ := runDev(t, map[string]string{"JETLOOP_WORK_DIR": t.TempDir()}, "--auth", auth, "--workers", "1")
	viewer := []string{"--server", strings.Replace(natsURL, "nats://", "nats://viewer:viewer-pw@", 1)}

	code, out, errs := run(t, nil, append([]string{"send", "--wait", "--timeout", "1m", "demo", "s1", "hello"}, viewer...)...)
	if code != 0 || !strings.HasPrefix(out, "demo/s1 done\n") || !strings.Contains(out, "The ledger is in my work folder.") {
		t.Fatalf("send --wait: exit %d, stdout %q, stderr %s", code, out, errs)
	}

	code, out, errs = run(t, nil, append([]string{"status", "--json"}, viewer...)...)
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); code != 0 || err != nil || len(rows) != 1 || rows[0]["session"] != "s1" || rows[0]["turns"] != float64(2) {
		t.Fatalf("status --json: exit %d, %v, %s %s", code, err, out, errs)
	}
	code, out, errs = run(t, nil, append([]string{"status"}, viewer...)...)
	if code != 0 || !strings.Contains(out, "demo/s1") || !strings.Contains(out, "done") {
		t.Fatalf("status: exit %d, %s %s", code, out, errs)
	}

	code, out, errs = run(t, nil, append([]string{"show", "--json", "demo/s1"}, viewer...)...)
	var shown struct {
		Status     string           `json:"status"`
		InSeq      uint64           `json:"in_seq"`
		Transcript []map[string]any `json:"transcript"`
	}
	if err := json.Unmarshal([]byte(out), &shown); code != 0 || err != nil || shown.Status != "done" || len(shown.Transcript) != 5 || shown.InSeq == 0 {
		t.Fatalf("show --json: exit %d, %v, %s %s", code, err, out, errs)
	}
	code, out, errs = run(t, nil, append([]string{"show", "demo/nobody"}, viewer...)...)
	if code != cli.ExitNotFound || !strings.Contains(errs, "no session demo/nobody") {
		t.Fatalf("show of a missing session: exit %d, %s %s", code, out, errs)
	}

	code, out, errs = run(t, nil, append([]string{"tail", "--until-rest", "demo/s1"}, viewer...)...)
	if code != 0 || !strings.HasPrefix(out, "[1] ") || !strings.Contains(out, "tool_result shell") || !strings.Contains(out, "\n[5] ") || !strings.HasSuffix(out, "-- done\n") {
		t.Fatalf("tail --until-rest: exit %d, stdout:\n%s\nstderr: %s", code, out, errs)
	}

	// send --wait prints the answer of the run the message started only:
	// a second run that fails before answering has none.
	def := filepath.Join(t.TempDir(), "flaky.yaml")
	if err := os.WriteFile(def, []byte(`name: flaky
model:
  provider: scripted
  script:
    - text: the first answer
    - error: server_error
triggers:
  - name: request
    when: event.type == "dev.jetloop.request"
    session: event.subject
`), 0o600); err != nil {
		t.Fatal(err)
	}
	admin := []string{"--server", strings.Replace(natsURL, "nats://", "nats://admin:admin-pw@", 1)}
	if code, out, errs := run(t, nil, append([]string{"apply", def}, admin...)...); code != 0 {
		t.Fatalf("apply: exit %d: %s %s", code, out, errs)
	}
	code, out, errs = run(t, nil, append([]string{"send", "--wait", "--timeout", "1m", "flaky", "s1", "one"}, viewer...)...)
	if code != 0 || out != "flaky/s1 done\nthe first answer\n" {
		t.Fatalf("first send --wait: exit %d, %q %s", code, out, errs)
	}
	code, out, errs = run(t, nil, append([]string{"send", "--wait", "--json", "--timeout", "1m", "flaky", "s1", "two"}, viewer...)...)
	var got map[string]any
	// The run failed: the exit status says so.
	if err := json.Unmarshal([]byte(out), &got); code != 1 || err != nil || !strings.Contains(errs, "the run ended failed") {
		t.Fatalf("second send --wait: exit %d, %v, %q %s", code, err, out, errs)
	}
	if got["status"] != "failed" || got["answer"] != "" {
		t.Fatalf("second send --wait printed %s: want the failure and no answer", out)
	}
}

// TestSendWaitReadsOnlyItsRun shows that send --wait reads the transcript
// from where it stood when the message was sent, not from the first
// entry: what waiting costs does not grow with the session's age. The
// test hears every show request the command makes.
func TestSendWaitReadsOnlyItsRun(t *testing.T) {
	natsURL, _, _ := runDev(t, map[string]string{"JETLOOP_WORK_DIR": t.TempDir()}, "--workers", "1")
	srv := []string{"--server", natsURL}
	nc, js := natstest.Connect(t, natsURL)
	froms := make(chan uint64, 1000)
	sub, err := nc.Subscribe(streams.Default().API(api.EndpointShow), func(m *nats.Msg) {
		var req api.ShowRequest
		if err := json.Unmarshal(m.Data, &req); err == nil {
			froms <- max(req.From, 1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if code, out, errs := run(t, nil, append([]string{"send", "--wait", "--timeout", "1m", "demo", "aged", fmt.Sprintf("hello %d", i)}, srv...)...); code != 0 || !strings.HasPrefix(out, "demo/aged done\n") {
			t.Fatalf("send --wait %d: exit %d, %q %s", i, code, out, errs)
		}
	}
	s, err := record.Open(context.Background(), js, streams.Default())
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := streams.NewSessionRef("demo", "aged")
	st, _, err := s.Load(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	before := st.NextEntry
	if before < 10 {
		t.Fatalf("%d entries after three runs", before-1)
	}
	drain := func() (out []uint64) {
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case f := <-froms:
				out = append(out, f)
			default:
				return out
			}
		}
	}
	drain()
	code, out, errs := run(t, nil, append([]string{"send", "--wait", "--timeout", "1m", "demo", "aged", "once more"}, srv...)...)
	if code != 0 || !strings.HasPrefix(out, "demo/aged done\n") || strings.TrimPrefix(out, "demo/aged done\n") == "" {
		t.Fatalf("send --wait: exit %d, %q %s", code, out, errs)
	}
	got := drain()
	if len(got) == 0 {
		t.Fatal("send --wait made no show request")
	}
	for _, f := range got {
		if f < before {
			t.Fatalf("send --wait read the transcript from entry %d (show requests from %v): the message's run starts at %d", f, got, before)
		}
	}
}
