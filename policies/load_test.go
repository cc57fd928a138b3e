package policies_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jetloop/jetloop/policies"
)

func TestParseValid(t *testing.T) {
	c, err := policies.LoadFile("testdata/pr-reviewer.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := c.Definition
	if d.Name != "pr-reviewer" || d.Budget.Deadline.D() != 10*time.Minute || len(c.Triggers) != 1 || len(c.Approvals) != 1 {
		t.Fatalf("unexpected definition %+v", d)
	}
	if d.Triggers[0].Rate.PerMinute != 10 || d.Schedules[0].Timeout.D() != 2*time.Minute {
		t.Fatalf("limits not read: %+v", d.Triggers[0])
	}
}

func TestParseErrors(t *testing.T) {
	const head = "name: a\nmodel: {provider: scripted}\n"
	tests := []struct {
		name       string
		yaml       string
		line, col  int
		field      string
		msgContain string
	}{
		{name: "unknown field", yaml: head + "tols: [x]\n", line: 3, field: "tols", msgContain: "unknown field"},
		{name: "bad duration", yaml: head + "budget: {deadline: 5x}\n", line: 3, field: "deadline", msgContain: "5x"},
		{name: "reads nothing", yaml: head + "reads: []\n", line: 3, field: "reads", msgContain: "leave reads out"},
		{name: "reads a bad name", yaml: head + "reads: [diff, 'a b']\n", line: 3, field: "reads[1]", msgContain: "input name"},
		{name: "reads twice", yaml: head + "reads:\n  - diff\n  - diff\n", line: 5, field: "reads[1]", msgContain: "listed twice"},
		{name: "too many hops", yaml: head + "budget: {max_hops: 33}\n", line: 3, field: "budget.max_hops", msgContain: "0 (default 4) to 32"},
		{name: "missing name", yaml: "model: {provider: scripted}\n", field: "name", msgContain: "required"},
		{name: "bad name", yaml: "name: 'a b'\nmodel: {provider: scripted}\n", line: 1, field: "name", msgContain: "letters"},
		{name: "bad provider", yaml: "name: a\nmodel: {provider: gpt}\n", line: 2, field: "model.provider", msgContain: "want one of"},
		{name: "misspelt attribute", yaml: head + "triggers:\n  - name: t\n    when: event.tpye == 'x'\n", line: 5, col: 16, field: "triggers[0].when", msgContain: `no field "tpye"`},
		{name: "when not bool", yaml: head + "triggers:\n  - name: t\n    when: \"'x' + event.type\"\n", line: 5, field: "triggers[0].when", msgContain: "want bool"},
		{name: "session not string", yaml: head + "triggers:\n  - name: t\n    when: 'true'\n    session: 1 + 2\n", line: 6, field: "triggers[0].session", msgContain: "want string"},
		{name: "syntax in block", yaml: head + "triggers:\n  - name: t\n    when: |\n      true &&\n        event.data.x.startsWith(\n", line: 8, field: "triggers[0].when", msgContain: "Syntax error"},
		{name: "syntax in folded block", yaml: head + "triggers:\n  - name: t\n    when: >-\n      event.type == 'x'\n      && event.data.a = 1\n", line: 7, col: 23, field: "triggers[0].when", msgContain: "Syntax error"},
		{name: "field in literal block", yaml: head + "triggers:\n  - name: t\n    when: |\n      true &&\n        event.tpye == 'x'\n", line: 7, col: 14, field: "triggers[0].when", msgContain: `no field "tpye"`},
		{name: "plain value over two lines", yaml: head + "triggers:\n  - name: t\n    when: event.type == 'x' &&\n      event.tpye == 'y'\n", line: 6, col: 12, field: "triggers[0].when", msgContain: `no field "tpye"`},
		{name: "double-quoted value over two lines", yaml: head + "triggers:\n  - name: t\n    when: \"event.type == 'x' &&\n      event.tpye == 'y'\"\n", line: 6, col: 12, field: "triggers[0].when", msgContain: `no field "tpye"`},
		{name: "single-quoted escapes", yaml: head + "triggers:\n  - name: t\n    when: 'event.type == ''x'' && event.tpye == ''y'''\n", line: 5, col: 40, field: "triggers[0].when", msgContain: `no field "tpye"`},
		{name: "double-quoted escapes", yaml: head + "triggers:\n  - name: t\n    when: \"event.type == \\\"x\\\" && event.tpye == 'y'\"\n", line: 5, col: 40, field: "triggers[0].when", msgContain: `no field "tpye"`},
		{name: "quoted value", yaml: head + "triggers:\n  - name: t\n    when: \"event.tpye == 'x'\"\n", line: 5, col: 17, field: "triggers[0].when", msgContain: `no field "tpye"`},
		{name: "undeclared variable", yaml: head + "triggers:\n  - name: t\n    when: tool.name == 'x'\n", line: 5, field: "triggers[0].when", msgContain: "undeclared reference"},
		{name: "approval sees tool", yaml: head + "approvals:\n  - when: event.type == 'x'\n", line: 4, field: "approvals[0].when", msgContain: "undeclared reference"},
		{name: "rate without key", yaml: head + "triggers:\n  - name: t\n    when: 'true'\n    rate: {per_minute: 3}\n", line: 6, field: "triggers[0].rate.key", msgContain: "required"},
		{name: "rate zero", yaml: head + "triggers:\n  - name: t\n    when: 'true'\n    rate: {key: event.source, per_minute: 0}\n", field: "triggers[0].rate.per_minute", msgContain: "more than 0"},
		{name: "debounce too short", yaml: head + "triggers:\n  - name: t\n    when: 'true'\n    debounce: {window: 10ms}\n", field: "triggers[0].debounce.window", msgContain: "want 1s"},
		{name: "debounce max_wait under the window", yaml: head + "triggers:\n  - name: t\n    when: 'true'\n    debounce: {window: 10s, max_wait: 5s}\n", field: "triggers[0].debounce.max_wait", msgContain: "at least the window"},
		{name: "debounce key not a string", yaml: head + "triggers:\n  - name: t\n    when: 'true'\n    debounce: {window: 10s, key: 1 + 2}\n", field: "triggers[0].debounce.key", msgContain: "want string"},
		{name: "concurrency key does not compile", yaml: head + "concurrency: {limit: 2, key: event.data.repository.full_name +}\n", line: 3, field: "concurrency.key", msgContain: "Syntax error"},
		{name: "concurrency without a limit", yaml: head + "concurrency: {key: event.source}\n", line: 3, field: "concurrency.limit", msgContain: "want 1 to"},
		{name: "bad on_busy", yaml: head + "triggers:\n  - name: t\n    when: 'true'\n    on_busy: queue\n", line: 6, field: "triggers[0].on_busy", msgContain: "want enqueue, reject, interrupt or steer"},
		{name: "throttle zero", yaml: head + "triggers:\n  - name: t\n    when: 'true'\n    throttle: {per_minute: 0}\n", field: "triggers[0].throttle.per_minute", msgContain: "more than 0"},
		{name: "throttle with debounce", yaml: head + "triggers:\n  - name: t\n    when: 'true'\n    throttle: {per_minute: 6}\n    debounce: {window: 2s}\n", field: "triggers[0].throttle", msgContain: "not both"},
		{name: "limit key without its ceiling", yaml: head + "limits: {session_usd: 5, key: event.source}\n", line: 3, field: "limits.key", msgContain: "takes key_usd_per_day"},
		{name: "key ceiling without a key", yaml: head + "limits: {key_usd_per_day: 5}\n", line: 3, field: "limits.key", msgContain: "required"},
		{name: "spend limit on an unpriced model", yaml: "name: a\nmodel: {provider: openai, name: qwen3, base_url: 'http://127.0.0.1:8000/v1'}\nlimits: {agent_usd_per_day: 5}\n", line: 3, field: "limits.agent_usd_per_day", msgContain: `model "qwen3" has no price`},
		{name: "session limit on an unnamed script", yaml: head + "limits: {session_usd: 5}\n", line: 3, field: "limits.session_usd", msgContain: "model.price"},
		{name: "cost budget on an unnamed script", yaml: head + "budget: {max_cost_usd: 2}\n", line: 3, field: "budget.max_cost_usd", msgContain: "never reached"},
		{name: "negative price", yaml: "name: a\nmodel: {provider: scripted, price: {input_per_mtok: -1, output_per_mtok: 2}}\n", line: 2, field: "model.price", msgContain: "negative"},
		{name: "duplicate trigger", yaml: head + "triggers:\n  - {name: t, when: 'true'}\n  - {name: t, when: 'true'}\n", field: "triggers[1].name", msgContain: "twice"},
		{name: "bad prompt", yaml: head + "triggers:\n  - name: t\n    when: 'true'\n    prompt: '{{.data'\n", line: 6, field: "triggers[0].prompt", msgContain: "closing }}"},
		{name: "go template prompt", yaml: head + "triggers:\n  - name: t\n    when: 'true'\n    prompt: 'Title: {{.data.title}}'\n", line: 6, col: 23, field: "triggers[0].prompt", msgContain: "Go template syntax"},
		{name: "prompt field typo", yaml: head + "triggers:\n  - name: t\n    when: 'true'\n    prompt: |\n      Review\n      {{ event.dta.title }}\n", line: 8, col: 15, field: "triggers[0].prompt", msgContain: `no field "dta"`},
		{name: "payload not a map", yaml: head + "triggers:\n  - name: t\n    when: 'true'\n    payload: size(event.data) > 2\n", line: 6, field: "triggers[0].payload", msgContain: "want a map or a string"},
		{name: "payload typo", yaml: head + "triggers:\n  - name: t\n    when: 'true'\n    payload: '{\"t\": event.tpye}'\n", line: 6, field: "triggers[0].payload", msgContain: `no field "tpye"`},
		{name: "compact too small", yaml: head + "context: {compact_at_tokens: 10}\n", line: 3, field: "context.compact_at_tokens", msgContain: "1000"},
		{name: "keep without compaction", yaml: head + "context: {mask_after_turns: 2, keep_last_turns: 3}\n", field: "context.keep_last_turns", msgContain: "compact_at_tokens"},
		{name: "keep last zero", yaml: head + "context: {compact_at_tokens: 5000, keep_last_turns: 0}\n", field: "context.keep_last_turns", msgContain: "want 1"},
		{name: "mask negative", yaml: head + "context: {mask_after_turns: -1}\n", field: "context.mask_after_turns", msgContain: "want 0"},
		{name: "unknown context field", yaml: head + "context: {mask_after: 2}\n", line: 3, msgContain: "mask_after"},
		{name: "notes tool listed", yaml: head + "tools: [notes_write]\ncontext: {notes: true}\n", field: "tools[0]", msgContain: "context: {notes: true}"},
		{name: "empty retention", yaml: head + "retention: {}\n", field: "retention", msgContain: "max_age"},
		{name: "retention too young", yaml: head + "retention: {max_age: 5s}\n", field: "retention.max_age", msgContain: "at least 1m"},
		{name: "retention scope", yaml: head + "retention: {max_count: 5, sessions: some}\n", field: "retention.sessions", msgContain: "ephemeral"},
		{name: "bad overlap", yaml: head + "schedules:\n  - {name: s, cron: '@hourly', overlap: pile}\n", field: "schedules[0].overlap", msgContain: "skip"},
		{name: "negative catchup window", yaml: head + "schedules:\n  - {name: s, cron: '@hourly', catchup_window: -1m}\n", field: "catchup_window", msgContain: "negative"},
		{name: "jitter past the interval", yaml: head + "schedules:\n  - {name: s, cron: '@every 10s', jitter: 10s}\n", field: "schedules[0].jitter", msgContain: "less than the interval"},
		{name: "sub-second jitter", yaml: head + "schedules:\n  - {name: s, cron: '@hourly', jitter: 500ms}\n", field: "schedules[0].jitter", msgContain: "at least 1s"},
		{name: "on_timeout without timeout", yaml: head + "approvals:\n  - {when: 'true', on_timeout: deny}\n", field: "approvals[0].on_timeout", msgContain: "without a timeout"},
		{name: "unknown on_timeout", yaml: head + "approvals:\n  - {when: 'true', timeout: 1h, on_timeout: shrug}\n", field: "approvals[0].on_timeout", msgContain: "deny, cancel or escalate"},
		{name: "ask_human without timeout", yaml: head + "ask_human: {on_timeout: cancel}\n", field: "ask_human.timeout", msgContain: "required"},
		{name: "two documents", yaml: head + "---\n" + head, line: 4, msgContain: "one agent a file"},
		{name: "alias", yaml: "name: &n a\nmodel: {provider: scripted}\nsystem: *n\n", line: 3, msgContain: "anchors"},
		{name: "tag where a list belongs", yaml: head + "tools: !!str bar\n", line: 3, col: 8, msgContain: "tags"},
		{name: "unquoted CEL negation", yaml: head + "triggers:\n  - name: t\n    when: !event.data.draft\n", line: 5, col: 11, msgContain: "quote a value that starts with !"},
		{name: "tag on a mapping", yaml: head + "triggers:\n  - !t {name: t}\n", line: 4, col: 5, msgContain: "tags"},
		{name: "not a mapping", yaml: "- a\n- b\n", line: 1, msgContain: "mapping"},
		{name: "empty", yaml: "# nothing\n", msgContain: "empty"},
		{name: "broken yaml", yaml: "name: a\n  model: [\n", line: 1, msgContain: ""},
		{name: "unknown tool", yaml: head + "tools: [shell, sh]\n", line: 3, col: 16, field: "tools[1]", msgContain: `unknown tool "sh"`},
		{name: "four-field cron", yaml: head + "schedules:\n  - name: s\n    cron: '*/2 * * *'\n", line: 5, field: "schedules[0].cron", msgContain: "4 fields"},
		{name: "cron with no such date", yaml: head + "schedules:\n  - {name: s, cron: '0 0 0 30 2 *'}\n", line: 4, field: "schedules[0].cron", msgContain: "never fires"},
		{name: "bad time zone", yaml: head + "schedules:\n  - {name: s, cron: '@hourly', time_zone: Mars/Olympus}\n", line: 4, field: "schedules[0].time_zone", msgContain: "Mars/Olympus"},
		{name: "nested unknown field", yaml: head + "triggers:\n  - name: t\n    when: 'true'\n    rate: {key: event.id, per_minute: 3, brst: 2}\n", line: 6, col: 42, field: "triggers[0].rate.brst", msgContain: "unknown field"},
		{name: "max_concurrent is retired", yaml: head + "triggers:\n  - name: t\n    when: 'true'\n    max_concurrent: 1\n", line: 6, col: 5, field: "triggers[0].max_concurrent", msgContain: "concurrency: {limit"},
		{name: "when is a bare field", yaml: head + "triggers:\n  - name: t\n    when: event.data.merged\n", line: 5, field: "triggers[0].when", msgContain: "want bool"},
		{name: "when is a sequence", yaml: head + "triggers:\n  - name: t\n    when: [a]\n", line: 5, field: "triggers[0].when", msgContain: "is a sequence, want a string"},
		{name: "approval on a bare field", yaml: head + "approvals:\n  - when: tool.args.force\n", line: 4, field: "approvals[0].when", msgContain: "want bool"},
		{name: "script error kind", yaml: "name: a\nmodel: {provider: scripted, script: [{error: boom}]}\n", field: "model.script[0].error", msgContain: "want one of"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policies.Parse("agent.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, policies.ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			errs := policies.Errors(err)
			if len(errs) == 0 {
				t.Fatalf("no *Error in %v", err)
			}
			e := errs[0]
			if e.File != "agent.yaml" {
				t.Errorf("file %q", e.File)
			}
			if tt.line != 0 && e.Line != tt.line {
				t.Errorf("line %d, want %d (%v)", e.Line, tt.line, e)
			}
			if tt.col != 0 && e.Column != tt.col {
				t.Errorf("column %d, want %d (%v)", e.Column, tt.col, e)
			}
			if tt.field != "" && e.Field != tt.field {
				t.Errorf("field %q, want %q (%v)", e.Field, tt.field, e)
			}
			if !strings.Contains(e.Error(), tt.msgContain) {
				t.Errorf("message %q lacks %q", e.Error(), tt.msgContain)
			}
			if !strings.HasPrefix(err.Error(), "agent.yaml") {
				t.Errorf("message %q does not start with the file", err.Error())
			}
		})
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	_, err := policies.Parse("a.yaml", []byte("name: a\nmodel: {provider: scripted}\ntriggers:\n  - {name: t, when: 'event.x'}\n  - {name: u, when: '1'}\n"))
	if got := len(policies.Errors(err)); got != 2 {
		t.Fatalf("%d errors, want 2: %v", got, err)
	}
}

func TestLoadDirRefusesDuplicateAgents(t *testing.T) {
	dir := t.TempDir()
	body := []byte("name: same\nmodel: {provider: scripted}\n")
	for _, f := range []string{"a.yaml", "b.yml", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, f), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := policies.LoadDir(dir)
	if len(cs) != 1 || err == nil || !strings.Contains(err.Error(), "also declared") {
		t.Fatalf("got %d definitions, err %v", len(cs), err)
	}
}

func githubEvent(t *testing.T, typ string, payload string) policies.Vars {
	t.Helper()
	e := event.New()
	e.SetID("d-1")
	e.SetSource("https://github.com/octo/repo")
	e.SetType(typ)
	if err := e.SetData("application/json", []byte(payload)); err != nil {
		t.Fatal(err)
	}
	vars, err := policies.EventVars(e)
	if err != nil {
		t.Fatal(err)
	}
	return vars
}

func TestTriggerEvaluation(t *testing.T) {
	c, err := policies.LoadFile("testdata/pr-reviewer.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tr := c.Triggers[0]
	ctx := context.Background()
	pr := `{"pull_request": {"number": 12, "draft": false, "title": "Fix it"}, "repository": {"full_name": "octo/repo"}}`
	tests := []struct {
		name    string
		typ     string
		payload string
		admit   bool
		session string
		wantErr bool
	}{
		{name: "opened", typ: "com.github.pull_request.opened", payload: pr, admit: true, session: "octo/repo#12"},
		{name: "draft", typ: "com.github.pull_request.opened", payload: `{"pull_request": {"number": 1, "draft": true}}`},
		{name: "other type short-circuits", typ: "com.github.push", payload: `{}`},
		{name: "missing key is an error", typ: "com.github.pull_request.opened", payload: `{}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vars := githubEvent(t, tt.typ, tt.payload)
			ok, err := tr.Admits(ctx, vars)
			if tt.wantErr {
				if !errors.Is(err, policies.ErrEval) {
					t.Fatalf("err %v, want ErrEval", err)
				}
				return
			}
			if err != nil || ok != tt.admit {
				t.Fatalf("admits %v, %v; want %v", ok, err, tt.admit)
			}
			if !ok {
				return
			}
			s, err := tr.SessionOf(ctx, vars)
			if err != nil || s != tt.session {
				t.Fatalf("session %q, %v; want %q", s, err, tt.session)
			}
			p, err := tr.RenderPrompt(ctx, vars)
			if err != nil || p != "Review PR #12: Fix it" {
				t.Fatalf("prompt %q, %v", p, err)
			}
		})
	}
}

// A session named by a field whose type is known only per event takes a
// whole number in decimal; anything else is an evaluation error naming
// what it got.
func TestSessionOfAFieldOfTheEvent(t *testing.T) {
	c, err := policies.Parse("a.yaml", []byte("name: a\nmodel: {provider: scripted}\ntriggers:\n  - {name: t, when: 'true', session: event.data.issue.number}\n"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tt := range []struct{ payload, want, err string }{
		{payload: `{"issue": {"number": 12}}`, want: "12"},
		{payload: `{"issue": {"number": "x-7"}}`, want: "x-7"},
		{payload: `{"issue": {"number": true}}`, err: "want string"},
		{payload: `{"issue": {"number": {"a": 1}}}`, err: "want string"},
	} {
		s, err := c.Triggers[0].SessionOf(ctx, githubEvent(t, "x", tt.payload))
		switch {
		case tt.err != "" && (!errors.Is(err, policies.ErrEval) || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: session %q, %v; want an error with %q", tt.payload, s, err, tt.err)
		case tt.err == "" && (err != nil || s != tt.want):
			t.Errorf("%s: session %q, %v; want %q", tt.payload, s, err, tt.want)
		}
	}
}

func TestEvaluationHonoursCostLimitAndContext(t *testing.T) {
	c, err := policies.Parse("a.yaml", []byte(`name: a
model: {provider: scripted}
triggers:
  - name: heavy
    when: event.data.items.all(x, event.data.items.all(y, event.data.items.all(z, x + y + z >= 0)))
`))
	if err != nil {
		t.Fatal(err)
	}
	items := "[" + strings.Repeat("1,", 199) + "1]"
	vars := githubEvent(t, "x", `{"items": `+items+`}`)
	if _, err := c.Triggers[0].Admits(context.Background(), vars); !errors.Is(err, policies.ErrEval) || !strings.Contains(err.Error(), "cost") {
		t.Fatalf("err %v, want a cost limit error", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	small := githubEvent(t, "x", `{"items": [`+strings.Repeat("1,", 19)+`1]}`)
	if _, err := c.Triggers[0].Admits(ctx, small); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}

// The context reaches a comprehension wherever it sits in the rule: below
// an &&, inside a call, in a ternary's branch, as a macro's argument.
func TestEvaluationContextReachesNestedComprehensions(t *testing.T) {
	heavy := `event.data.items.all(x, event.data.items.all(y, x + y >= 0))`
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	vars := githubEvent(t, "x", `{"items": [`+strings.Repeat("1,", 39)+`1]}`)
	for _, when := range []string{
		`event.type == "x" && ` + heavy,
		`event.type == "y" || ` + heavy,
		`!(` + heavy + `) == false`,
		`event.type == "x" ? ` + heavy + ` : false`,
		`size(event.data.items.filter(x, event.data.items.exists(y, y == 2))) == 0`,
	} {
		c, err := policies.Parse("a.yaml", []byte("name: a\nmodel: {provider: scripted}\ntriggers:\n  - name: t\n    when: '"+when+"'\n"))
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if ok, err := c.Triggers[0].Admits(context.Background(), vars); err != nil || !ok {
			t.Fatalf("%s: %v, %v; want true", when, ok, err)
		}
		if ok, err := c.Triggers[0].Admits(ctx, vars); !errors.Is(err, context.Canceled) {
			t.Errorf("%s under a cancelled context: %v, %v; want context.Canceled", when, ok, err)
		}
	}
}

func TestApprovals(t *testing.T) {
	c, err := policies.LoadFile("testdata/pr-reviewer.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sess := policies.SessionInfo{Agent: "pr-reviewer", Name: "octo/repo#12"}
	gate, need, err := c.NeedsApproval(ctx, policies.ToolCall{Name: "http_request", Args: map[string]any{"body": strings.Repeat("x", 2001)}}, sess)
	if err != nil || !need || gate != "long-comment" {
		t.Fatalf("long comment: %q %v %v", gate, need, err)
	}
	_, need, err = c.NeedsApproval(ctx, policies.ToolCall{Name: "http_request", Args: map[string]any{"body": "short"}}, sess)
	if err != nil || need {
		t.Fatalf("short comment: %v %v", need, err)
	}
}
