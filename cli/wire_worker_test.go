package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/cli"
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
