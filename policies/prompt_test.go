package policies_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/policies"
)

// Prompts interpolate CEL over event: a field the event lacks renders as
// nothing, lists and maps as JSON, conditions and list functions work,
// "}}" inside a string literal or a map literal does not end the
// interpolation, and the cost limit bounds what one interpolation may do.
func TestPromptInterpolation(t *testing.T) {
	tests := []struct {
		name, prompt string
		want         string
		refused      string
		evalErr      bool
	}{
		{name: "missing field", prompt: `"Title: {{ event.data.pull_request.title }}; labels: {{ event.data.labels }}."`, want: "Title: Fix it; labels: ."},
		{name: "number and list", prompt: `"#{{ event.data.number }} {{ event.data.items }}"`, want: "#12 [1,2]"},
		{name: "map literal", prompt: `"{{ {\"n\": {\"x\": event.data.number}} }}"`, want: `{"n":{"x":12}}`},
		{name: "braces in a string", prompt: `"{{ \"}}\" + event.data.pull_request.title }}!"`, want: "}}Fix it!"},
		{name: "condition", prompt: `"{{ event.data.number > 10 ? \"big\" : \"small\" }}"`, want: "big"},
		{name: "join", prompt: `"{{ event.data.items.map(x, string(x)).join(\", \") }}"`, want: "1, 2"},
		{name: "null", prompt: `"[{{ event.data.none }}]"`, want: "[]"},
		{name: "no interpolation", prompt: `"plain {text}"`, want: "plain {text}"},
		{name: "literal braces", prompt: `"write {{ \"{{\" }}name}} as it is"`, want: "write {{name}} as it is"},
		{name: "event text is not a prompt", prompt: `"Title: {{ event.data.injected }}"`, want: "Title: {{ event.data.number }}"},
		{name: "unclosed", prompt: `"a {{ event.data"`, refused: "closing }}"},
		{name: "go template", prompt: `"{{range .data.items}}x{{end}}"`, refused: "Go template syntax"},
		{name: "typo", prompt: `"{{ event.tpye }}"`, refused: `no field "tpye"`},
		{name: "quadratic", prompt: `"{{ event.data.big.map(x, event.data.big.map(y, x + y)) }}"`, evalErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := policies.Parse("a.yaml", []byte(`name: a
model: {provider: scripted}
triggers:
  - name: t
    when: "true"
    prompt: `+tt.prompt+"\n"))
			if tt.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tt.refused) || !strings.Contains(err.Error(), "a.yaml:6:") {
					t.Fatalf("err %v, want a.yaml:6: ... %q", err, tt.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			big := strings.Repeat("1,", 999) + "1"
			vars := githubEvent(t, "x", `{"pull_request": {"title": "Fix it"}, "number": 12, "items": [1, 2], "none": null, "injected": "{{ event.data.number }}", "big": [`+big+`]}`)
			got, err := c.Triggers[0].RenderPrompt(context.Background(), vars)
			if tt.evalErr {
				if !errors.Is(err, policies.ErrEval) {
					t.Fatalf("prompt %q, %v; want ErrEval", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("prompt %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// A payload expression gives the model a map or a string; one that
// selects a field the event lacks fails (the caller falls back and says
// so) rather than sending nothing.
func TestPayload(t *testing.T) {
	c, err := policies.Parse("a.yaml", []byte(`name: a
model: {provider: scripted}
triggers:
  - name: map
    when: event.data.kind == "map"
    payload: '{"title": event.data.pull_request.title, "n": event.data.number}'
  - name: text
    when: event.data.kind == "text"
    payload: '"PR " + string(event.data.number)'
  - name: missing
    when: event.data.kind == "missing"
    payload: '{"x": event.data.nothing}'
  - name: full
    when: event.data.kind == "full"
    payload: full
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tt := range []struct {
		trigger int
		kind    string
		want    string
		wantErr bool
		none    bool
	}{
		{trigger: 0, kind: "map", want: `{"n":12,"title":"Fix it"}`},
		{trigger: 1, kind: "text", want: "PR 12"},
		{trigger: 2, kind: "missing", wantErr: true},
		{trigger: 3, kind: "full", none: true},
	} {
		tr := c.Triggers[tt.trigger]
		vars := githubEvent(t, "x", `{"kind": "`+tt.kind+`", "pull_request": {"title": "Fix it"}, "number": 12}`)
		v, err := tr.PayloadOf(ctx, vars)
		if tt.wantErr {
			if err == nil {
				t.Errorf("%s: payload %v, want an error", tr.Name, v)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tr.Name, err)
		}
		if tt.none {
			if v != nil || tr.HasPayload() {
				t.Errorf("%s: payload %v, want none", tr.Name, v)
			}
			continue
		}
		got, err := policies.PayloadText(v)
		if err != nil || got != tt.want {
			t.Errorf("%s: payload %q, %v; want %q", tr.Name, got, err, tt.want)
		}
	}
}
