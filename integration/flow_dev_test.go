package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
)

// startDev runs `jetloop dev` with one worker and the webhook secret, and
// returns its ready line's addresses.
func startDev(t *testing.T, bin string, extra ...string) (*proc, map[string]string) {
	t.Helper()
	t.Setenv("JETLOOP_GITHUB_SECRET", ingestSecret)
	t.Setenv("JETLOOP_WORK_DIR", t.TempDir())
	p := startProc(t, bin, append(devArgs(t.TempDir()), extra...)...)
	ready := p.waitReady(time.Minute)
	t.Cleanup(func() {
		if err := p.stop(syscall.SIGTERM, 30*time.Second); err != nil {
			t.Errorf("dev did not stop: %v\n%s", err, p.Stderr())
		}
	})
	return p, ready
}

// awaitShow polls `jetloop show --json` until ok accepts the session.
func awaitShow(t *testing.T, p *proc, bin, url, ref string, timeout time.Duration, ok func(showJSON) error) showJSON {
	t.Helper()
	var s showJSON
	err := natstest.Poll(t.Context(), timeout, func() error {
		var err error
		if s, err = show(t, bin, url, ref); err != nil {
			return err
		}
		return ok(s)
	})
	if err != nil {
		t.Fatalf("%s: %v\nlast: %+v\ndev stderr:\n%s", ref, err, s, p.Stderr())
	}
	return s
}

func entriesOf(s showJSON, kind string) []map[string]any {
	var out []map[string]any
	for _, e := range s.Transcript {
		if e["kind"] == kind {
			out = append(out, e)
		}
	}
	return out
}

// TestDevMentionResponderAnswersABurstOnce runs the shipped
// mention-responder from webhook to answer on `jetloop dev`: five
// comments mentioning @jetloop on one issue, 300 ms apart, are each
// answered 202 as debounced, and the session gets one turn, holding the
// fifth comment and the count, which the scripted model answers.
func TestDevMentionResponderAnswersABurstOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop")
	}
	bin := buildJetloop(t)
	p, ready := startDev(t, bin)
	raw, err := os.ReadFile("../ingest/testdata/github/issue_comment/created.payload.json")
	if err != nil {
		t.Fatal(err)
	}
	var payload map[string]any
	if err := json.Unmarshal(raw, &payload); err != nil {
		t.Fatal(err)
	}
	const session = "Codertocat/Hello-World#1"
	for i := 1; i <= 5; i++ {
		payload["comment"].(map[string]any)["body"] = fmt.Sprintf("@jetloop comment %d of the burst", i)
		body, _ := json.Marshal(payload)
		status, out := postWebhook(t, ready["http"], "issue_comment", fmt.Sprintf("burst-%d", i), body, ingest.Sign([]byte(ingestSecret), body))
		admitted, _ := out["admitted"].([]any)
		if status != http.StatusAccepted || len(admitted) != 1 || !strings.Contains(fmt.Sprint(admitted[0]), "debounced:true") ||
			!strings.Contains(fmt.Sprint(admitted[0]), session) {
			t.Fatalf("comment %d: %d %v", i, status, out)
		}
		time.Sleep(300 * time.Millisecond) // the burst's pace
	}
	s := awaitShow(t, p, bin, ready["nats"], "mention-responder/"+session, time.Minute, func(s showJSON) error {
		if s.Status != "done" {
			return fmt.Errorf("status %s", s.Status)
		}
		return nil
	})
	evs := entriesOf(s, "event")
	if len(evs) != 1 {
		t.Fatalf("%d event entries, want the burst as one: %v", len(evs), s.Transcript)
	}
	text := fmt.Sprint(evs[0]["text"])
	ref, _ := evs[0]["event"].(map[string]any)
	if !strings.Contains(text, "comment 5 of the burst") || strings.Contains(text, "comment 4") || !strings.Contains(text, "burst of 5 events") || ref["count"] != 5.0 || ref["id"] != "burst-5" {
		t.Fatalf("the burst's event entry: %v", evs[0])
	}
	// The run answers as the shipped script says, to its last entry.
	ex, err := policies.LoadFile("../examples/mention-responder.yaml")
	if err != nil {
		t.Fatal(err)
	}
	script := ex.Definition.Model.Script
	answers := entriesOf(s, "assistant")
	if len(answers) != len(script) || answers[len(answers)-1]["text"] != script[len(script)-1].Text {
		t.Fatalf("answers %v, want the script's %d", answers, len(script))
	}
}

// flowAgents are the agents of TestDevFlowControl, by file name.
var flowAgents = map[string]string{
	// One run at once across the agent; each answer takes a second.
	"limited.yaml": `name: limited
model: {provider: scripted, script: [{text: One at a time., delay: 1s}]}
concurrency: {limit: 1}
`,
	// A request interrupts the running run: its shell is stopped and the
	// new request's run starts.
	"interrupter.yaml": `name: interrupter
tools: [shell]
model:
  provider: scripted
  script:
    - text: Sleeping on it.
      tool_calls: [{name: shell, args: {command: "sleep 60; echo slept > slept.txt"}}]
    - text: Started over.
triggers:
  - {name: request, when: 'event.type == "dev.jetloop.request"', on_busy: interrupt}
`,
	// Every answer costs $3 at the definition's price; $5 over the
	// session's life.
	"spender.yaml": `name: spender
model:
  provider: scripted
  name: house-model
  price: {input_per_mtok: 1000000, output_per_mtok: 0}
  script: [{text: Spent., usage: {input_tokens: 3}}]
limits: {session_usd: 5}
`,
	// Takes requests to their session, having no trigger.
	"plain.yaml": "name: plain\nmodel: {provider: scripted, script: [{text: Plainly.}]}\n",
	// Takes no requests.
	"closed.yaml": "name: closed\nmodel: {provider: scripted, script: [{text: never}]}\nrequests: off\n",
	// Requests to it go at most one a second; the others wait their turn.
	"paced.yaml": `name: paced
model: {provider: scripted, script: [{text: Paced.}]}
triggers:
  - {name: request, when: 'event.type == "dev.jetloop.request"', session: event.subject, throttle: {per_minute: 60}}
`,
	// A schedule that fires every second.
	"ticker.yaml": `name: ticker
model: {provider: scripted, script: [{text: Tick.}]}
schedules:
  - {name: beat, cron: "@every 1s", session: persistent}
`,
}

// TestDevFlowControl is flow control's acceptance on `jetloop dev`'s real
// processes: a concurrency limit of one runs one of three sessions while
// two wait queued and then run; on_busy: interrupt stops a running shell
// and starts the new request's run; a session spend ceiling stops the next
// run with its reason recorded; apply refuses an unknown tool, a
// four-field cron, an unknown field and a concurrency key that does not
// compile, each with its file, line and field, while a running schedule
// keeps firing; and the same request through `jetloop send` and through
// HTTP gets the same decision and the same `jetloop events` record.
func TestDevFlowControl(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop")
	}
	bin := buildJetloop(t)
	const token = "flow-token"
	t.Setenv("JETLOOP_INGEST_TOKEN", token)
	p, ready := startDev(t, bin)
	url := ready["nats"]
	env := []string{"JETLOOP_SERVER=" + url}
	dir := t.TempDir()
	for name, body := range flowAgents {
		path := dir + "/" + name
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, stderr, err := runCLI(t, bin, env, "apply", path); err != nil {
			t.Fatalf("apply %s: %v\n%s%s", name, err, out, stderr)
		}
	}
	cli := func(args ...string) (string, string, error) { t.Helper(); return runCLI(t, bin, env, args...) }
	request := func(agent, session, key, text string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, ready["http"]+"/v1/agents/"+agent+"/sessions/"+session+"/messages", strings.NewReader(`{"text": "`+text+`"}`))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}

	t.Run("concurrency limit 1", func(t *testing.T) {
		if _, stderr, err := cli("send", "limited", "s1", "first"); err != nil {
			t.Fatalf("send: %v %s", err, stderr)
		}
		awaitShow(t, p, bin, url, "limited/s1", time.Minute, func(s showJSON) error {
			if s.Status != "working" {
				return fmt.Errorf("status %s", s.Status)
			}
			return nil
		})
		for _, s := range []string{"s2", "s3"} {
			if _, stderr, err := cli("send", "limited", s, "next"); err != nil {
				t.Fatalf("send: %v %s", err, stderr)
			}
		}
		// While s1 runs, s2 and s3 wait queued, saying for what.
		var queued []string
		err := natstest.Poll(t.Context(), time.Minute, func() error {
			out, _, err := cli("status", "--json", "--agent", "limited")
			if err != nil {
				return err
			}
			var rows []map[string]any
			if err := json.Unmarshal([]byte(out), &rows); err != nil {
				return err
			}
			queued = queued[:0]
			for _, r := range rows {
				if r["status"] == "queued" && strings.Contains(fmt.Sprint(r["waiting_for"]), "concurrency slot of agent limited (limit 1") {
					queued = append(queued, fmt.Sprint(r["session"]))
				}
			}
			if len(queued) < 2 {
				return fmt.Errorf("queued %v: %s", queued, out)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%v\n%s", err, p.Stderr())
		}
		// Each run went on alone: its answer took a second (the script's
		// delay), so under limit 1 the answers are a second apart or more.
		var ends []time.Time
		for _, name := range []string{"s1", "s2", "s3"} {
			s := awaitShow(t, p, bin, url, "limited/"+name, time.Minute, func(s showJSON) error {
				if s.Status != "done" || len(entriesOf(s, "assistant")) != 1 {
					return fmt.Errorf("status %s, %d answers", s.Status, len(entriesOf(s, "assistant")))
				}
				return nil
			})
			end, err := time.Parse(time.RFC3339Nano, fmt.Sprint(entriesOf(s, "assistant")[0]["time"]))
			if err != nil {
				t.Fatalf("%s: answer time: %v", name, err)
			}
			ends = append(ends, end)
		}
		slices.SortFunc(ends, time.Time.Compare)
		for i := 1; i < len(ends); i++ {
			if gap := ends[i].Sub(ends[i-1]); gap < 990*time.Millisecond {
				t.Errorf("answers %v: two runs went on at once under limit 1 (%s apart)", ends, gap)
			}
		}
	})

	t.Run("on_busy interrupt", func(t *testing.T) {
		if _, stderr, err := cli("send", "interrupter", "s1", "think it over"); err != nil {
			t.Fatalf("send: %v %s", err, stderr)
		}
		awaitShow(t, p, bin, url, "interrupter/s1", time.Minute, func(s showJSON) error {
			if len(entriesOf(s, "tool_call")) != 1 || s.Status != "working" {
				return fmt.Errorf("status %s, calls %d", s.Status, len(entriesOf(s, "tool_call")))
			}
			return nil
		})
		if err := natstest.Poll(t.Context(), 30*time.Second, func() error {
			if len(processesRunning("echo slept > slept.txt")) == 0 {
				return fmt.Errorf("the shell does not run yet")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		out, stderr, err := cli("send", "--wait", "--timeout", "30s", "--id", "the-interrupt", "interrupter", "s1", "never mind")
		if err != nil || !strings.Contains(out, "interrupter/s1 done") || !strings.Contains(out, "Started over.") {
			t.Fatalf("send --wait of the interrupt: %v\n%s%s", err, out, stderr)
		}
		s, err := show(t, bin, url, "interrupter/s1")
		if err != nil {
			t.Fatal(err)
		}
		results := entriesOf(s, "tool_result")
		if len(results) != 1 || results[0]["is_error"] != true || !strings.Contains(fmt.Sprint(results[0]["result"]), "interrupted by a newer event; may or may not have run") {
			t.Fatalf("the shell's result: %v", results)
		}
		var system []string
		for _, e := range entriesOf(s, "system") {
			system = append(system, fmt.Sprint(e["text"]))
		}
		if !strings.Contains(strings.Join(system, "\n"), "event the-interrupt (on_busy: interrupt) ended this run") {
			t.Fatalf("system entries %q", system)
		}
		// The shell was stopped, not left to sleep on.
		if err := natstest.Poll(t.Context(), 10*time.Second, func() error {
			if pids := processesRunning("echo slept > slept.txt"); len(pids) > 0 {
				return fmt.Errorf("the interrupted shell still runs: pids %v", pids)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("throttle queues", func(t *testing.T) {
		// Three requests at once: the first goes now, the others are
		// stored and go a second apart, each a run of its own, in order.
		for i, text := range []string{"one", "two", "three"} {
			status, body := request("paced", "s1", "paced-"+text, text)
			admitted, _ := body["admitted"].([]any)
			if status != http.StatusAccepted || len(admitted) != 1 {
				t.Fatalf("request %s: %d %v", text, status, body)
			}
			target, _ := admitted[0].(map[string]any)
			if throttled := target["throttled"] == true && target["at"] != nil; throttled != (i > 0) {
				t.Fatalf("request %s: throttled %v: %v", text, throttled, target)
			}
		}
		s := awaitShow(t, p, bin, url, "paced/s1", time.Minute, func(s showJSON) error {
			if s.Status != "done" || len(entriesOf(s, "assistant")) != 3 {
				return fmt.Errorf("status %s, %d answers", s.Status, len(entriesOf(s, "assistant")))
			}
			return nil
		})
		var kinds, texts []string
		for _, e := range s.Transcript {
			kinds = append(kinds, fmt.Sprint(e["kind"]))
			if e["kind"] == "user" {
				texts = append(texts, fmt.Sprint(e["text"]))
			}
		}
		if got := strings.Join(kinds, ","); got != "user,assistant,user,assistant,user,assistant" {
			t.Fatalf("transcript %s, want three runs", got)
		}
		if got := strings.Join(texts, ","); got != "one,two,three" {
			t.Fatalf("requests ran in the order %s", got)
		}
	})

	t.Run("session spend ceiling", func(t *testing.T) {
		for i := 1; i <= 2; i++ {
			if out, stderr, err := cli("send", "--wait", "--timeout", "30s", "spender", "s1", fmt.Sprint("run ", i)); err != nil || !strings.Contains(out, "done") {
				t.Fatalf("run %d: %v\n%s%s", i, err, out, stderr)
			}
		}
		out, stderr, err := cli("send", "--wait", "--timeout", "30s", "--id", "over-the-top", "spender", "s1", "run 3")
		if exitCode(err) != 1 || !strings.Contains(out, "budget_exceeded (limits.session_usd 5.0000 reached (6.0000 spent over the session's life))") {
			t.Fatalf("third run: exit %d\n%s%s", exitCode(err), out, stderr)
		}
		events, _, err := cli("events", "--json", "--agent", "spender")
		if err != nil || !strings.Contains(events, `"decision": "limit_reached"`) || !strings.Contains(events, "over-the-top") {
			t.Fatalf("events: %v %s", err, events)
		}
	})

	t.Run("apply refuses and the schedule goes on", func(t *testing.T) {
		ticks := func() int {
			s, err := show(t, bin, url, "ticker/beat")
			if err != nil {
				return 0
			}
			return len(entriesOf(s, "event"))
		}
		var before int
		if err := natstest.Poll(t.Context(), time.Minute, func() error {
			if before = ticks(); before == 0 {
				return fmt.Errorf("no tick yet")
			}
			return nil
		}); err != nil {
			t.Fatalf("%v\n%s", err, p.Stderr())
		}
		tick := flowAgents["ticker.yaml"]
		bad := []struct{ name, body, where string }{
			{name: "unknown tool", body: strings.Replace(tick, "model:", "tools: [shell, sh]\nmodel:", 1), where: ":2:16: tools[1]: unknown tool \"sh\""},
			{name: "four-field cron", body: strings.Replace(tick, `"@every 1s"`, `"*/2 * * *"`, 1), where: ":4:"},
			{name: "unknown field", body: strings.Replace(tick, "session: persistent", "session: persistent, overlpa: skip", 1), where: ":4:"},
			{name: "concurrency key", body: tick + "concurrency: {limit: 2, key: event.data.repository.full_name +}\n", where: ":5:"},
		}
		fields := []string{"tools[1]", "schedules[0].cron", "schedules[0].overlpa", "concurrency.key"}
		for i, b := range bad {
			path := dir + "/bad-" + strings.ReplaceAll(b.name, " ", "-") + ".yaml"
			if err := os.WriteFile(path, []byte(b.body), 0o600); err != nil {
				t.Fatal(err)
			}
			_, stderr, err := cli("apply", path)
			if exitCode(err) != 1 || !strings.Contains(stderr, path+b.where) || !strings.Contains(stderr, fields[i]) {
				t.Errorf("apply of %s: exit %d: %s", b.name, exitCode(err), stderr)
			}
		}
		// Nothing running changed: the schedule keeps firing.
		if err := natstest.Poll(t.Context(), time.Minute, func() error {
			if n := ticks(); n < before+2 {
				return fmt.Errorf("%d ticks, %d before the refused applies", n, before)
			}
			return nil
		}); err != nil {
			t.Fatalf("%v\n%s", err, p.Stderr())
		}
	})

	t.Run("one path for requests", func(t *testing.T) {
		out, stderr, err := cli("send", "--id", "same-1", "plain", "s1", "hello")
		if err != nil || !strings.Contains(out, "sent to plain/s1") {
			t.Fatalf("send: %v\n%s%s", err, out, stderr)
		}
		if status, body := request("plain", "s1", "same-2", "hello"); status != http.StatusAccepted || len(body["admitted"].([]any)) != 1 {
			t.Fatalf("HTTP: %d %v", status, body)
		}
		_, stderr, err = cli("send", "--id", "closed-1", "closed", "s1", "hello")
		if exitCode(err) == 0 || !strings.Contains(stderr, "closed takes no user requests (requests: off)") || !strings.Contains(stderr, "422") {
			t.Fatalf("send to closed: exit %d: %s", exitCode(err), stderr)
		}
		if status, body := request("closed", "s1", "closed-2", "hello"); status != http.StatusUnprocessableEntity || !strings.Contains(fmt.Sprint(body["error"]), "closed takes no user requests (requests: off)") {
			t.Fatalf("HTTP to closed: %d %v", status, body)
		}
		out, _, err = cli("events", "--json", "-n", "500")
		if err != nil {
			t.Fatal(err)
		}
		var recs []map[string]any
		if err := json.Unmarshal([]byte(out), &recs); err != nil {
			t.Fatalf("events --json: %v\n%s", err, out)
		}
		byID := map[string]map[string]any{}
		for _, r := range recs {
			if ev, ok := r["event"].(map[string]any); ok {
				byID[fmt.Sprint(ev["id"])] = r
			}
		}
		// The record of each pair is the same but for the event's id.
		for _, pair := range [][2]string{{"same-1", "same-2"}, {"closed-1", "closed-2"}} {
			a, b := byID[pair[0]], byID[pair[1]]
			if a == nil || b == nil {
				t.Fatalf("records of %v: %v %v", pair, a, b)
			}
			for _, r := range []map[string]any{a, b} {
				delete(r, "time")
				delete(r["event"].(map[string]any), "id")
			}
			ja, _ := json.Marshal(a)
			jb, _ := json.Marshal(b)
			if string(ja) != string(jb) {
				t.Errorf("send and HTTP recorded differently:\n%s\n%s", ja, jb)
			}
		}
		if a := byID["same-1"]; a["decision"] != "admitted" || a["rule"] != "plain/(requests)" {
			t.Errorf("the admitted request's record: %v", a)
		}
		if c := byID["closed-1"]; c["decision"] != "rejected" || !strings.Contains(fmt.Sprint(c["reason"]), "requests: off") {
			t.Errorf("the refused request's record: %v", c)
		}
	})
}

// processesRunning returns the pids of the processes whose command line
// holds what.
func processesRunning(what string) []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/cmdline")
		if err == nil && strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), what) {
			out = append(out, filepath.Base(d))
		}
	}
	return out
}
