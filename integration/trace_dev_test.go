package integration

import (
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/internal/otlptest"
	"github.com/jetloop/jetloop/policies"
)

// tracedAgent answers a pull request with one shell step and a
// delegation to checkerAgent.
const (
	tracedAgent = `name: traced
model:
  provider: scripted
  name: script-1
  script:
    - text: Checking.
      tool_calls:
        - {name: shell, args: {command: "echo checked"}}
        - {name: delegate, args: {agent: checker, task: check it again}}
      usage: {input_tokens: 300, output_tokens: 20}
    - text: Checked.
      usage: {input_tokens: 400, output_tokens: 5}
tools: [shell, delegate]
triggers:
  - name: pr
    when: event.type == "com.github.pull_request.opened"
    session: event.data.repository.full_name + "#" + string(event.data.pull_request.number)
`
	checkerAgent = `name: checker
model:
  provider: scripted
  name: script-2
  script:
    - text: Fine.
      usage: {input_tokens: 50, output_tokens: 2}
`
)

// TestDevWebhookIsOneTrace is the acceptance of tracing: `jetloop dev`
// with OTEL_EXPORTER_OTLP_ENDPOINT pointed at a local OTLP/HTTP receiver
// exports, for one signed webhook, one trace whose spans cover the HTTP
// request, dedupe, admission, publish, the run, its model steps (with the
// GenAI attributes) and its tool steps, each the child of the one before,
// and through the delegate call's publish the delegated child's run.
func TestDevWebhookIsOneTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop")
	}
	recv := otlptest.Start(t)
	bin := buildJetloop(t)
	t.Setenv("JETLOOP_GITHUB_SECRET", ingestSecret)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	t.Setenv("OTEL_SERVICE_NAME", "jetloop-under-test")
	p := startProc(t, bin, devArgs(t.TempDir())...)
	ready := p.waitReady(time.Minute)
	c, err := policies.Parse("traced.yaml", []byte(tracedAgent))
	if err != nil {
		t.Fatal(err)
	}
	putAgent(t, ready["nats"], c.Definition)
	checker, err := policies.Parse("checker.yaml", []byte(checkerAgent))
	if err != nil {
		t.Fatal(err)
	}
	putAgent(t, ready["nats"], checker.Definition)
	body, err := os.ReadFile("../ingest/testdata/github/pull_request/opened.payload.json")
	if err != nil {
		t.Fatal(err)
	}
	// The ingest admits with the definitions it has watched: once the
	// agent is there, the delivery is admitted to it.
	var out map[string]any
	natstest.WaitFor(t, 30*time.Second, func() error {
		var status int
		delivery := fmt.Sprintf("trace-%d", time.Now().UnixNano())
		status, out = postWebhook(t, ready["http"], "pull_request", delivery, body, ingest.Sign([]byte(ingestSecret), body))
		if status != http.StatusAccepted {
			return fmt.Errorf("delivery: %d %v", status, out)
		}
		if !strings.Contains(fmt.Sprint(out["admitted"]), "traced") {
			return fmt.Errorf("not admitted to traced yet: %v", out)
		}
		return nil
	})
	id := out["id"].(string)

	// The delivery's trace: the request span whose publish carried the
	// event to the traced agent's run.
	want := []string{"POST /webhooks/github", "dedupe", "admission", "publish", "run traced", "chat script-1", "execute_tool shell",
		"execute_tool delegate", "run checker", "chat script-2"}
	var trace map[string][]otlptest.Span
	natstest.WaitFor(t, time.Minute, func() error {
		trace = nil
		byTrace := map[string]map[string][]otlptest.Span{}
		for _, s := range recv.Spans() {
			if byTrace[s.TraceID()] == nil {
				byTrace[s.TraceID()] = map[string][]otlptest.Span{}
			}
			byTrace[s.TraceID()][s.Name] = append(byTrace[s.TraceID()][s.Name], s)
		}
		for _, spans := range byTrace {
			for _, run := range spans["run traced"] {
				if v, _ := run.Attr("cloudevents.event_id"); v == id {
					trace = spans
				}
			}
		}
		if trace == nil {
			return fmt.Errorf("no run of delivery %s exported yet (%d spans)", id, len(recv.Spans()))
		}
		var missing []string
		for _, name := range want {
			if len(trace[name]) == 0 {
				missing = append(missing, name)
			}
		}
		// The run waits for its child, and a second run span continues it.
		if len(trace["chat script-1"]) < 2 || len(trace["run traced"]) < 2 || len(missing) > 0 {
			var have []string
			for name := range trace {
				have = append(have, name)
			}
			sort.Strings(have)
			return fmt.Errorf("trace lacks %v (has %v)", missing, have)
		}
		return nil
	})
	one := func(name string) otlptest.Span { return trace[name][0] }
	req := one("POST /webhooks/github")
	if req.ParentID() != "" || req.Service != "jetloop-under-test" {
		t.Fatalf("request span: parent %q, service %q", req.ParentID(), req.Service)
	}
	for _, name := range []string{"dedupe", "admission"} {
		if s := one(name); s.ParentID() != req.SpanID() {
			t.Fatalf("%s span's parent %s, want the request's %s", name, s.ParentID(), req.SpanID())
		}
	}
	// publishUnder is the publish span whose parent is parent.
	publishUnder := func(parent otlptest.Span) otlptest.Span {
		t.Helper()
		for _, p := range trace["publish"] {
			if p.ParentID() == parent.SpanID() {
				return p
			}
		}
		t.Fatalf("no publish span under %s (%d publish spans)", parent.Name, len(trace["publish"]))
		return otlptest.Span{}
	}
	// The run the webhook's event started waits for the delegated child;
	// the run that continues it when the child answers is its child.
	var run, cont otlptest.Span
	for _, r := range trace["run traced"] {
		if r.ParentID() == publishUnder(req).SpanID() {
			run = r
		}
	}
	for _, r := range trace["run traced"] {
		if run.Span != nil && r.ParentID() == run.SpanID() {
			cont = r
		}
	}
	if run.Span == nil || cont.Span == nil {
		t.Fatalf("run spans %d: none the child of the request's publish, or none continuing it", len(trace["run traced"]))
	}
	if st, _ := run.Attr("jetloop.status"); st != "waiting" {
		t.Fatalf("first run span ended %q, want waiting (for its child)", st)
	}
	if st, _ := cont.Attr("jetloop.status"); st != "done" {
		t.Fatalf("continued run span ended %q, want done", st)
	}
	for _, m := range trace["chat script-1"] {
		if m.ParentID() != run.SpanID() && m.ParentID() != cont.SpanID() {
			t.Fatalf("model span's parent %s, want one of the runs %s, %s", m.ParentID(), run.SpanID(), cont.SpanID())
		}
		for k, v := range map[string]string{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "scripted", "gen_ai.system": "scripted", "gen_ai.request.model": "script-1"} {
			if got, _ := m.Attr(k); got != v {
				t.Fatalf("model span %s = %q, want %q", k, got, v)
			}
		}
	}
	var tokens []string
	for _, m := range trace["chat script-1"] {
		in, _ := m.Attr("gen_ai.usage.input_tokens")
		outTok, _ := m.Attr("gen_ai.usage.output_tokens")
		tokens = append(tokens, in+"/"+outTok)
	}
	sort.Strings(tokens)
	if strings.Join(tokens, " ") != "300/20 400/5" {
		t.Fatalf("model spans' input/output tokens %v", tokens)
	}
	tool := one("execute_tool shell")
	if name, _ := tool.Attr("gen_ai.tool.name"); tool.ParentID() != run.SpanID() || name != "shell" {
		t.Fatalf("tool span: parent %s, tool %q", tool.ParentID(), name)
	}

	// The delegated child: its event published under the delegate call's
	// span, its run that publish's child, its model step the run's.
	del := one("execute_tool delegate")
	if del.ParentID() != run.SpanID() {
		t.Fatalf("delegate span's parent %s, want the run %s", del.ParentID(), run.SpanID())
	}
	child := one("run checker")
	if pub := publishUnder(del); child.ParentID() != pub.SpanID() {
		t.Fatalf("child run's parent %s, want the delegate's publish %s", child.ParentID(), pub.SpanID())
	}
	if st, _ := child.Attr("jetloop.status"); st != "done" {
		t.Fatalf("child run span ended %q, want done", st)
	}
	if m := one("chat script-2"); m.ParentID() != child.SpanID() {
		t.Fatalf("child's model span's parent %s, want its run %s", m.ParentID(), child.SpanID())
	}
}
