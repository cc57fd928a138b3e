package policies_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jetloop/jetloop/policies"
)

// FuzzParse feeds arbitrary bytes to the definition loader: it must never
// panic, and everything it refuses is an ErrInvalid with positioned
// problems.
func FuzzParse(f *testing.F) {
	for _, p := range []string{"testdata/pr-reviewer.yaml", "testdata/bad-cel.yaml", "testdata/canary.yaml", "testdata/mcp-servers.yaml"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := policies.Parse("fuzz.yaml", data)
		if err != nil {
			if !errors.Is(err, policies.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			if len(policies.Errors(err)) == 0 {
				t.Fatalf("error %v holds no *Error", err)
			}
			return
		}
		if _, err := policies.Compile(c.Definition); err != nil {
			t.Fatalf("parsed definition does not compile again: %v", err)
		}
	})
}

// FuzzRule compiles arbitrary trigger conditions and evaluates those that
// compile against an event with arbitrary JSON data: no panic, and every
// evaluation ends with a bool or an ErrEval.
func FuzzRule(f *testing.F) {
	f.Add(`event.type == "com.github.push" && event.data.ref.startsWith("refs/heads/")`, `{"ref":"refs/heads/main"}`)
	f.Add(`event.data.items.all(x, x > 1)`, `{"items":[1,2,3]}`)
	f.Add(`size(event.data.a) > 2 || event.extensions.jlagent == "a"`, `{"a":"xyz"}`)
	f.Add(`event.data`, `true`)
	f.Fuzz(func(t *testing.T, when, data string) {
		def := policies.Definition{Name: "a", Model: policies.Model{Provider: "scripted"},
			Triggers: []policies.Trigger{{Name: "t", When: when}}}
		c, err := policies.Compile(def)
		if err != nil {
			return
		}
		e := event.New()
		e.SetID("1")
		e.SetSource("s")
		e.SetType("com.github.push")
		if err := e.SetData("application/json", []byte(data)); err != nil {
			return
		}
		vars, err := policies.EventVars(e)
		if err != nil {
			return
		}
		if _, err := c.Triggers[0].Admits(context.Background(), vars); err != nil && !errors.Is(err, policies.ErrEval) {
			t.Fatalf("evaluation error %v is not ErrEval", err)
		}
	})
}

// FuzzPrompt compiles arbitrary prompts and payloads and renders those
// that compile over an event with arbitrary JSON data: no panic, a
// refusal is ErrInvalid, a rendering is at most MaxPromptLen bytes or an
// ErrEval.
func FuzzPrompt(f *testing.F) {
	f.Add(`Review {{ event.data.title }} ({{ event.data.n > 1 ? "big" : "small" }})`, `{"title":"x}}","n":2}`)
	f.Add(`{{ {"a": {"b": event.data}} }}}}{{`, `[1,2]`)
	f.Add(`{{ '''}}''' + "\"}}" }} {{ event.data.map(x, x) }}`, `{"a":1}`)
	f.Add(`{{.data.x}}`, `{}`)
	f.Fuzz(func(t *testing.T, prompt, data string) {
		def := policies.Definition{Name: "a", Model: policies.Model{Provider: "scripted"},
			Triggers: []policies.Trigger{{Name: "t", When: "true", Prompt: prompt, Payload: prompt}}}
		c, err := policies.Compile(def)
		if err != nil {
			if !errors.Is(err, policies.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			def.Triggers[0].Payload = ""
			if c, err = policies.Compile(def); err != nil {
				return
			}
		}
		e := event.New()
		e.SetID("1")
		e.SetSource("s")
		e.SetType("com.github.push")
		if err := e.SetData("application/json", []byte(data)); err != nil {
			return
		}
		vars, err := policies.EventVars(e)
		if err != nil {
			return
		}
		ctx := context.Background()
		out, err := c.Triggers[0].RenderPrompt(ctx, vars)
		switch {
		case err != nil && !errors.Is(err, policies.ErrEval) && !strings.Contains(err.Error(), "exceeds"):
			t.Fatalf("render error %v is not ErrEval", err)
		case len(out) > policies.MaxPromptLen:
			t.Fatalf("rendered %d bytes", len(out))
		}
		if v, err := c.Triggers[0].PayloadOf(ctx, vars); err == nil {
			if _, err := policies.PayloadText(v); err != nil {
				t.Fatalf("payload %v does not render: %v", v, err)
			}
		}
	})
}
