package integration

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDevRollbackKeepsARunningSession: a session in the middle of a run
// (blocked on an approval) when its version is rolled back finishes that
// run, and its next, on its own version, while a new session gets the
// restored content; the worker's step metrics carry each version.
func TestDevRollbackKeepsARunningSession(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop")
	}
	bin := buildJetloop(t)
	data, dir := t.TempDir(), t.TempDir()
	t.Setenv("JETLOOP_WORK_DIR", t.TempDir())
	p := startProc(t, bin, devArgs(data)...)
	ready := p.waitReady(time.Minute)
	url := ready["nats"]

	file := filepath.Join(dir, "mid.yaml")
	write := func(script string) {
		t.Helper()
		body := `name: mid
model:
  provider: scripted
  script_scope: run
  script:
` + script + `tools: [shell]
approvals:
  - {name: every-shell, when: 'tool.name == "shell"'}
triggers:
  - {name: request, when: 'event.type == "dev.jetloop.request"', session: event.subject}
`
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := jetloopCmd(t, bin, "apply", "--server", url, file); err != nil {
			t.Fatalf("apply: %v\n%s", err, out)
		}
	}
	write("    - {text: answer from v1}\n")
	write("    - {text: Writing., tool_calls: [{name: shell, args: {command: echo v2}}]}\n    - {text: answer from v2}\n")

	if _, err := jetloopCmd(t, bin, "send", "--server", url, "mid", "running", "go"); err != nil {
		t.Fatal(err)
	}
	row := waitBlocked(t, bin, url, "mid", "running")
	if out, err := jetloopCmd(t, bin, "agents", "rollback", "--server", url, "mid"); err != nil || !strings.HasPrefix(out, "mid version 3: version 3 restores the content of version 1") {
		t.Fatalf("rollback: %q %v", out, err)
	}
	if s := sendWait(t, bin, url, "mid", "new"); s.Answer != "answer from v1" {
		t.Fatalf("new session after the rollback: %+v", s)
	}
	if _, err := jetloopCmd(t, bin, "approve", "--server", url, "mid/running", row.WaitingFor); err != nil {
		t.Fatal(err)
	}
	s := waitShow(t, bin, url, "mid/running", "done")
	last := s.Transcript[len(s.Transcript)-1]
	if s.DefinitionVersion != 2 || last["kind"] != "assistant" || last["text"] != "answer from v2" {
		t.Fatalf("the running session after the rollback: version %d, last entry %v", s.DefinitionVersion, last)
	}
	// Its next run keeps its version too: it meets v2's gate again.
	if _, err := jetloopCmd(t, bin, "send", "--server", url, "mid", "running", "again"); err != nil {
		t.Fatal(err)
	}
	waitBlocked(t, bin, url, "mid", "running")
	if vs := statusVersions(t, bin, url, "mid"); vs["running"].Version != 2 || vs["new"].Version != 3 {
		t.Fatalf("status versions: %+v", vs)
	}

	// The step metrics carry the version of each step.
	host := strings.TrimPrefix(ready["http"], "http://")
	resp, err := http.Get("http://" + host + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	steps := map[string]bool{}
	re := regexp.MustCompile(`^jetloop_worker_steps_total\{(.*)\} \S+$`)
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 8<<20))
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil && strings.Contains(m[1], `agent="mid"`) {
			v := regexp.MustCompile(`version="([^"]*)"`).FindStringSubmatch(m[1])
			k := regexp.MustCompile(`kind="([^"]*)"`).FindStringSubmatch(m[1])
			if v != nil && k != nil {
				steps[fmt.Sprintf("%s/%s", v[1], k[1])] = true
			}
		}
	}
	if !steps["2/model"] || !steps["2/tool"] || !steps["3/model"] || steps["3/tool"] {
		t.Fatalf("steps_total by version/kind: %v", steps)
	}
}

// TestDevApplyToRunningMovesASession: a session keeps its version when a
// new one is applied, and moves at its next run to one that says
// apply_to_running, its transcript saying why.
func TestDevApplyToRunningMovesASession(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop")
	}
	bin := buildJetloop(t)
	data, dir := t.TempDir(), t.TempDir()
	t.Setenv("JETLOOP_WORK_DIR", t.TempDir())
	p := startProc(t, bin, devArgs(data)...)
	url := p.waitReady(time.Minute)["nats"]
	apply := func(answer, extra string) {
		t.Helper()
		file := agentFile(t, dir, "atr", answer, extra)
		if out, err := jetloopCmd(t, bin, "apply", "--server", url, file); err != nil {
			t.Fatalf("apply: %v\n%s", err, out)
		}
	}
	apply("answer from v1", "")
	if s := sendWait(t, bin, url, "atr", "kept"); s.Answer != "answer from v1" {
		t.Fatalf("first run: %+v", s)
	}
	apply("answer from v2", "")
	if s := sendWait(t, bin, url, "atr", "kept"); s.Answer != "answer from v1" {
		t.Fatalf("after v2: %+v", s)
	}
	apply("answer from v3", "apply_to_running: true\n")
	if s := sendWait(t, bin, url, "atr", "kept"); s.Answer != "answer from v3" {
		t.Fatalf("after v3 with apply_to_running: %+v", s)
	}
	s, err := show(t, bin, url, "atr/kept")
	if err != nil || s.DefinitionVersion != 3 {
		t.Fatalf("show: version %d, %v", s.DefinitionVersion, err)
	}
	moved := false
	for _, e := range s.Transcript {
		if e["kind"] == "system" && strings.Contains(fmt.Sprint(e["text"]), "version 3 applies to running sessions; the session moves from version 1") {
			moved = true
		}
	}
	if !moved {
		t.Fatalf("the transcript does not say why the session moved: %+v", s.Transcript)
	}
}
