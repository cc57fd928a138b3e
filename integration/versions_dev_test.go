package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
)

// agentFile writes an agent definition whose scripted model answers
// every call with answer (or fails every call when answer is "fail").
func agentFile(t *testing.T, dir, name, answer, extra string) string {
	t.Helper()
	then := fmt.Sprintf("{text: %q}", answer)
	if answer == "fail" {
		then = "{error: server_error}"
	}
	path := filepath.Join(dir, name+".yaml")
	body := fmt.Sprintf(`name: %s
model: {provider: scripted, then: %s}
triggers:
  - {name: request, when: 'event.type == "dev.jetloop.request"', session: event.subject}
%s`, name, then, extra)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// sent is `jetloop send --wait --json` as a script reads it.
type sent struct {
	Status string `json:"status"`
	Answer string `json:"answer"`
	Reason string `json:"reason"`
}

func sendWait(t *testing.T, bin, url, agent, session string) sent {
	t.Helper()
	out, err := jetloopCmd(t, bin, "send", "--server", url, "--wait", "--timeout", "1m", "--json", agent, session, "hello")
	var s sent
	if jerr := json.Unmarshal([]byte(out), &s); jerr != nil {
		t.Fatalf("send --json: %v, %v\n%s", err, jerr, out)
	}
	// A run that ended failed exits 1, its answer printed all the same.
	if err != nil && s.Status != "failed" {
		t.Fatal(err)
	}
	return s
}

// sessionVersion is a row of `jetloop status --json`, as far as versions
// go.
type sessionVersion struct {
	Session string `json:"session"`
	Version uint64 `json:"definition_version"`
	Rollout string `json:"rollout"`
	Owner   string `json:"owner"`
}

// statusVersions is `jetloop status --json` of an agent, by session.
func statusVersions(t *testing.T, bin, url, agent string) map[string]sessionVersion {
	t.Helper()
	out, err := jetloopCmd(t, bin, "status", "--server", url, "--json", "--agent", agent)
	if err != nil {
		t.Fatal(err)
	}
	var rows []sessionVersion
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	m := map[string]sessionVersion{}
	for _, r := range rows {
		m[r.Session] = r
	}
	return m
}

func history(t *testing.T, bin, url, agent string) api.HistoryResponse {
	t.Helper()
	out, err := jetloopCmd(t, bin, "agents", "history", "--server", url, "--json", agent)
	if err != nil {
		t.Fatal(err)
	}
	var h api.HistoryResponse
	if err := json.Unmarshal([]byte(out), &h); err != nil {
		t.Fatalf("agents history --json: %v\n%s", err, out)
	}
	return h
}

// TestDevVersionsAndRollback is the versions acceptance on `jetloop dev`:
// two applies of one file create one version; a new version serves new
// sessions while a running one keeps its own; a rollback is a new version
// with the old content, which new sessions get while the others keep
// theirs; status, show, history, show --version, diff and events say so.
func TestDevVersionsAndRollback(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop")
	}
	bin := buildJetloop(t)
	data, dir := t.TempDir(), t.TempDir()
	t.Setenv("JETLOOP_WORK_DIR", t.TempDir())
	p := startProc(t, bin, devArgs(data)...)
	url := p.waitReady(time.Minute)["nats"]

	file := agentFile(t, dir, "ver", "answer from v1", "")
	out, err := jetloopCmd(t, bin, "apply", "--server", url, file)
	if err != nil || !strings.HasPrefix(out, "ver version 1: version 1 applied from "+file) {
		t.Fatalf("first apply: %q %v", out, err)
	}
	if out, err := jetloopCmd(t, bin, "apply", "--server", url, file); err != nil || out != "ver version 1 (unchanged)\n" {
		t.Fatalf("second apply of the same file: %q %v", out, err)
	}
	if h := history(t, bin, url, "ver"); len(h.Entries) != 1 || h.Entries[0].Version != 1 || h.Entries[0].By == "" || h.Entries[0].Source != file {
		t.Fatalf("history after two applies: %+v", h.Entries)
	}
	if s := sendWait(t, bin, url, "ver", "s1"); s.Answer != "answer from v1" {
		t.Fatalf("s1 on v1: %+v", s)
	}

	agentFile(t, dir, "ver", "answer from v2", "")
	if out, err := jetloopCmd(t, bin, "apply", "--server", url, file); err != nil || !strings.HasPrefix(out, "ver version 2: ") {
		t.Fatalf("changed apply: %q %v", out, err)
	}
	if s := sendWait(t, bin, url, "ver", "s1"); s.Answer != "answer from v1" {
		t.Fatalf("the running session s1 after v2: %+v", s)
	}
	if s := sendWait(t, bin, url, "ver", "s2"); s.Answer != "answer from v2" {
		t.Fatalf("new session s2 after v2: %+v", s)
	}

	out, err = jetloopCmd(t, bin, "agents", "rollback", "--server", url, "ver")
	if err != nil || out != "ver version 3: version 3 restores the content of version 1\n" {
		t.Fatalf("rollback: %q %v", out, err)
	}
	for session, want := range map[string]string{"s3": "answer from v1", "s2": "answer from v2", "s1": "answer from v1"} {
		if s := sendWait(t, bin, url, "ver", session); s.Answer != want {
			t.Fatalf("%s after the rollback: %+v, want %q", session, s, want)
		}
	}
	vs := statusVersions(t, bin, url, "ver")
	if vs["s1"].Version != 1 || vs["s2"].Version != 2 || vs["s3"].Version != 3 {
		t.Fatalf("status versions: %+v", vs)
	}
	if out, _ := jetloopCmd(t, bin, "status", "--server", url, "--agent", "ver"); !regexp.MustCompile(`ver/s2\s+done\s+\S+ ago\s+v2\s`).MatchString(out) {
		t.Fatalf("status table:\n%s", out)
	}
	if out, _ := jetloopCmd(t, bin, "show", "--server", url, "ver/s2"); !strings.Contains(out, "definition v2 ") {
		t.Fatalf("show:\n%s", out)
	}
	if s, err := show(t, bin, url, "ver/s3"); err != nil || s.DefinitionVersion != 3 {
		t.Fatalf("show --json: %+v %v", s, err)
	}

	h := history(t, bin, url, "ver")
	if len(h.Entries) != 3 || h.Entries[2].Change != policies.ChangeRollback || h.Entries[2].Restores != 1 || h.Entries[2].Hash != h.Entries[0].Hash {
		t.Fatalf("history: %+v", h.Entries)
	}
	out, err = jetloopCmd(t, bin, "agents", "history", "--server", url, "ver")
	if err != nil || !strings.Contains(out, "ver: version 3 serves every new session") || !regexp.MustCompile(`(?m)^3\s+rollback\s`).MatchString(out) {
		t.Fatalf("history table (%v):\n%s", err, out)
	}
	if out, err := jetloopCmd(t, bin, "agents", "show", "--server", url, "ver", "--version", "2"); err != nil ||
		!strings.Contains(out, "# ver version 2 (revision ") || !strings.Contains(out, "# serves no new session") || !strings.Contains(out, "text: answer from v2") {
		t.Fatalf("agents show --version 2 (%v):\n%s", err, out)
	}
	if out, err := jetloopCmd(t, bin, "agents", "diff", "--server", url, "ver", "1", "2"); err != nil ||
		!strings.Contains(out, "--- ver v1\n+++ ver v2\n") || !strings.Contains(out, "-    text: answer from v1\n+    text: answer from v2\n") {
		t.Fatalf("agents diff (%v):\n%s", err, out)
	}
	if out, err := jetloopCmd(t, bin, "agents", "diff", "--server", url, "ver", "1", "3"); err != nil || !strings.Contains(out, "have the same content") {
		t.Fatalf("agents diff of a rollback (%v):\n%s", err, out)
	}
	out, err = jetloopCmd(t, bin, "events", "--server", url, "--definitions", "--json", "--agent", "ver")
	var evs []policies.Event
	if err != nil || json.Unmarshal([]byte(out), &evs) != nil || len(evs) != 3 || evs[2].Change != policies.ChangeRollback || evs[2].By == "" {
		t.Fatalf("events --definitions (%v): %s", err, out)
	}
	if out, _ := jetloopCmd(t, bin, "events", "--server", url, "--agent", "ver"); !strings.Contains(out, "version 3 restores the content of version 1") {
		t.Fatalf("events table:\n%s", out)
	}

	// What cannot apply is refused, naming the file and field or the
	// conflict, and changes nothing.
	agentFile(t, dir, "ver", "answer from v4", "rollout: {version: 9, percent: 10}\n")
	if _, err := jetloopCmd(t, bin, "apply", "--server", url, file); err == nil || !strings.Contains(err.Error(), file+":5:20: rollout.version: 9: applying this file creates version 4") {
		t.Fatalf("refused rollout: %v", err)
	}
	if _, err := jetloopCmd(t, bin, "agents", "rollback", "--server", url, "ver", "--to", "1"); err == nil || !strings.Contains(err.Error(), "already serves every new session") {
		t.Fatalf("rollback to what serves: %v", err)
	}
	if h := history(t, bin, url, "ver"); len(h.Entries) != 3 {
		t.Fatalf("refused changes stored entries: %+v", h.Entries)
	}
}

// TestDevCanaryRolledBackByItsGuard is the rollout acceptance through
// real processes: `jetloop dev` without workers and two `jetloop worker`
// processes. A canary at 50% whose scripted model fails every run is
// assigned to exactly the sessions the stable hash names, whichever
// worker runs them; after min_runs failed canary runs (counted by both
// workers on shared counters) the rollout ends as rolled back with the
// figures, new sessions and the canary's sessions get the stable content,
// the stable sessions never stopped serving, and the workers' metrics
// carry the version.
func TestDevCanaryRolledBackByItsGuard(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop")
	}
	bin := buildJetloop(t)
	data, dir := t.TempDir(), t.TempDir()
	t.Setenv("JETLOOP_WORK_DIR", t.TempDir())
	p := startProc(t, bin, append(devArgs(data), "--workers", "0")...)
	url := p.waitReady(time.Minute)["nats"]
	var workers []*proc
	for _, id := range []string{"w1", "w2"} {
		workers = append(workers, startProc(t, bin, "worker", "--server", url, "--id", id, "--http", "127.0.0.1:0"))
	}

	stable := agentFile(t, dir, "guarded", "stable ok", "")
	if _, err := jetloopCmd(t, bin, "apply", "--server", url, stable); err != nil {
		t.Fatal(err)
	}
	canary := agentFile(t, dir, "guarded", "fail", "rollout: {percent: 50, guard: {max_failure_rate: 0.2, min_runs: 5}}\n")
	out, err := jetloopCmd(t, bin, "apply", "--server", url, canary)
	if err != nil || !strings.Contains(out, "canary v2 at 50% beside stable v1") {
		t.Fatalf("canary apply: %q %v", out, err)
	}
	h := history(t, bin, url, "guarded")
	if h.Rollout == nil || h.Rollout.Canary != 2 || h.Rollout.Stable != 1 {
		t.Fatalf("rollout in force: %+v", h.Rollout)
	}
	// The sessions the stable hash puts on either side.
	var onCanary, onStable []string
	for i := 0; len(onCanary) < 5 || len(onStable) < 6; i++ {
		name := fmt.Sprintf("pr-%d", i)
		if h.Rollout.AssignsCanary("guarded", name) {
			if len(onCanary) < 5 {
				onCanary = append(onCanary, name)
			}
		} else if len(onStable) < 6 {
			onStable = append(onStable, name)
		}
	}
	for _, s := range onStable {
		if r := sendWait(t, bin, url, "guarded", s); r.Status != "done" || r.Answer != "stable ok" {
			t.Fatalf("stable session %s: %+v", s, r)
		}
	}
	for i, s := range onCanary[:4] {
		if r := sendWait(t, bin, url, "guarded", s); r.Status != "failed" {
			t.Fatalf("canary session %s: %+v", s, r)
		}
		// Below min_runs the rollout goes on.
		natstest.WaitFor(t, 30*time.Second, func() error {
			h := history(t, bin, url, "guarded")
			if h.Rollout == nil || h.Counts == nil || h.Counts.Canary.Runs != int64(i+1) {
				return fmt.Errorf("rollout %+v counts %+v", h.Rollout, h.Counts)
			}
			return nil
		})
	}
	vs := statusVersions(t, bin, url, "guarded")
	owners := map[string]bool{}
	for _, s := range onStable {
		if vs[s].Version != 1 || vs[s].Rollout != "" {
			t.Fatalf("stable session %s: %+v", s, vs[s])
		}
		owners[vs[s].Owner] = true
	}
	for _, s := range onCanary[:4] {
		if vs[s].Version != 2 || vs[s].Rollout != h.Rollout.ID {
			t.Fatalf("canary session %s: %+v", s, vs[s])
		}
		owners[vs[s].Owner] = true
	}
	t.Logf("sessions ran on workers %v", owners)

	// The fifth failed canary run rolls the canary back.
	if r := sendWait(t, bin, url, "guarded", onCanary[4]); r.Status != "failed" {
		t.Fatalf("fifth canary run: %+v", r)
	}
	var last api.HistoryEntry
	natstest.WaitFor(t, 30*time.Second, func() error {
		h = history(t, bin, url, "guarded")
		last = h.Entries[len(h.Entries)-1]
		if h.Rollout != nil || last.Ended == nil {
			return fmt.Errorf("rollout still in force: %+v", h.Rollout)
		}
		return nil
	})
	e := last.Ended
	if last.Version != 3 || last.Restores != 1 || last.Change != policies.ChangeRollback || e.Outcome != policies.RolloutRolledBack || e.By != policies.GuardBy ||
		e.CanaryRuns == nil || *e.CanaryRuns != (policies.RunCounts{Version: 2, Runs: 5, Failed: 5}) ||
		e.StableRuns == nil || *e.StableRuns != (policies.RunCounts{Version: 1, Runs: 6, Failed: 0}) || !strings.Contains(e.Reason, "failed 5 of 5 runs") {
		t.Fatalf("the guard's rollback: %+v ended %+v", last, e)
	}

	// Stable keeps serving, new sessions get the stable content, and the
	// canary's sessions return to it at their next run.
	if r := sendWait(t, bin, url, "guarded", onStable[0]); r.Answer != "stable ok" {
		t.Fatalf("stable session after the rollback: %+v", r)
	}
	if r := sendWait(t, bin, url, "guarded", "pr-new"); r.Answer != "stable ok" {
		t.Fatalf("new session after the rollback: %+v", r)
	}
	if r := sendWait(t, bin, url, "guarded", onCanary[0]); r.Status != "done" || r.Answer != "stable ok" {
		t.Fatalf("canary session after the rollback: %+v", r)
	}
	vs = statusVersions(t, bin, url, "guarded")
	if vs["pr-new"].Version != 3 || vs[onCanary[0]].Version != 3 || vs[onCanary[0]].Rollout != "" || vs[onStable[0]].Version != 1 {
		t.Fatalf("versions after the rollback: %+v", vs)
	}
	s, err := show(t, bin, url, "guarded/"+onCanary[0])
	if err != nil {
		t.Fatal(err)
	}
	moved := false
	for _, en := range s.Transcript {
		if en["kind"] == "system" && strings.Contains(fmt.Sprint(en["text"]), "the rollout of canary version 2 was rolled back") {
			moved = true
		}
	}
	if !moved {
		t.Fatalf("the canary session's transcript does not say why it moved: %+v", s.Transcript)
	}
	out, _ = jetloopCmd(t, bin, "events", "--server", url, "--agent", "guarded")
	if !strings.Contains(out, "rolled back: guard: canary version 2 failed 5 of 5 runs") || !strings.Contains(out, "(by guard)") {
		t.Fatalf("events:\n%s", out)
	}

	// Both workers' metrics together count the runs by version.
	counts := map[string]float64{}
	for _, w := range workers {
		for k, v := range runMetrics(t, w, "guarded") {
			counts[k] += v
		}
	}
	if counts["2/failed"] != 5 || counts["1/ok"] != 7 || counts["3/ok"] != 2 {
		t.Fatalf("runs_total by version/outcome: %v", counts)
	}
}

var listenRE = regexp.MustCompile(`msg="http listening".* addr=(\S+)`)

// runMetrics reads jetloop_worker_runs_total of agent from a worker's
// /metrics, by "version/outcome".
func runMetrics(t *testing.T, w *proc, agent string) map[string]float64 {
	t.Helper()
	m := listenRE.FindStringSubmatch(w.Stderr())
	if m == nil {
		t.Fatalf("worker logged no listen address:\n%s", w.Stderr())
	}
	resp, err := http.Get("http://" + m[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	line := regexp.MustCompile(`^jetloop_worker_runs_total\{(.*)\} (\S+)$`)
	label := regexp.MustCompile(`(\w+)="([^"]*)"`)
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 8<<20))
	for sc.Scan() {
		lm := line.FindStringSubmatch(sc.Text())
		if lm == nil {
			continue
		}
		ls := map[string]string{}
		for _, l := range label.FindAllStringSubmatch(lm[1], -1) {
			ls[l[1]] = l[2]
		}
		if ls["agent"] != agent {
			continue
		}
		v, _ := strconv.ParseFloat(lm[2], 64)
		out[ls["version"]+"/"+ls["outcome"]] += v
	}
	return out
}
