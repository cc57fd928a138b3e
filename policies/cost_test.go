package policies_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jetloop/jetloop/policies"
)

// nested returns n comprehensions over a ten-element literal list, nested:
// 10^n iterations of the innermost.
func nested(n int) string {
	s := "true"
	for i := n; i > 0; i-- {
		s = fmt.Sprintf("[0,1,2,3,4,5,6,7,8,9].all(x%d, %s)", i, s)
	}
	return s
}

// growth replaces each "a" by ten of them n times: 10^n characters.
func growth(n int) string {
	return `"ab"` + strings.Repeat(`.replace("a", "aaaaaaaaaa")`, n) + `.size() > 0`
}

// TestCostEstimateRefusesAtLoad shows that a rule whose cost the estimate
// bounds above the limit, whatever the event, is refused when its
// definition is loaded, with the file and line of the rule; rules whose
// cost depends on the event are accepted and left to the limit at
// evaluation.
func TestCostEstimateRefusesAtLoad(t *testing.T) {
	tests := []struct {
		name    string
		field   string // trigger when, or approval when
		expr    string
		refused bool
	}{
		{name: "thousand iterations over literals", field: "when", expr: nested(3)},
		{name: "million iterations over literals", field: "when", expr: nested(6), refused: true},
		{name: "string grown to ten million characters", field: "when", expr: growth(7), refused: true},
		{name: "string grown to a thousand characters", field: "when", expr: growth(3)},
		{name: "nested comprehension over event data", field: "when", expr: `event.data.items.all(a, event.data.items.all(b, a != b || true))`},
		{name: "literal comprehension inside one over event data", field: "when", expr: `event.data.items.all(a, ` + nested(6) + `)`},
		{name: "session expression", field: "session", expr: `string(` + nested(6) + `)`, refused: true},
		{name: "approval condition", field: "approval", expr: `tool.name == "shell" && ` + nested(6), refused: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var y string
			switch tt.field {
			case "when":
				y = fmt.Sprintf("name: a\nmodel: {provider: scripted}\ntriggers:\n  - name: t\n    when: '%s'\n", tt.expr)
			case "session":
				y = fmt.Sprintf("name: a\nmodel: {provider: scripted}\ntriggers:\n  - name: t\n    when: 'true'\n    session: '%s'\n", tt.expr)
			case "approval":
				y = fmt.Sprintf("name: a\nmodel: {provider: scripted}\napprovals:\n  - when: '%s'\n", tt.expr)
			}
			_, err := policies.Parse("agent.yaml", []byte(y))
			if !tt.refused {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, policies.ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
			errs := policies.Errors(err)
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), "exceeds the limit") || errs[0].Line == 0 {
				t.Fatalf("want one positioned cost error, got %v", err)
			}
			t.Log(errs[0])
		})
	}
}

// TestCostLimitStopsExhaustion shows that rules whose cost grows with the
// event (the estimate cannot refuse them) stop at the cost limit when an
// event makes them expensive, with an ErrEval naming the limit, instead
// of holding the ingest or its memory.
func TestCostLimitStopsExhaustion(t *testing.T) {
	items := make([]string, 2000)
	for i := range items {
		items[i] = fmt.Sprint(i)
	}
	data := `{"items":[` + strings.Join(items, ",") + `],"s":"` + strings.Repeat("a", 1000) + `"}`
	tests := []struct {
		name, when string
	}{
		{name: "quadratic comprehension over a large list", when: `event.data.items.all(a, event.data.items.all(b, a != b || true))`},
		{name: "cubic comprehension", when: `event.data.items.exists(a, event.data.items.exists(b, event.data.items.exists(c, a + b + c < 0)))`},
		{name: "string multiplied by itself", when: `event.data.s.replace("a", event.data.s).replace("a", event.data.s).size() > 0`},
		{name: "lists of copies of the input", when: `event.data.items.map(a, event.data.items.map(b, event.data.s + string(b))).size() > 0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := policies.Compile(policies.Definition{Name: "a", Model: policies.Model{Provider: "scripted"},
				Triggers: []policies.Trigger{{Name: "t", When: tt.when}}})
			if err != nil {
				t.Fatalf("refused at load: %v", err)
			}
			e := event.New()
			e.SetID("1")
			e.SetSource("/s")
			e.SetType("t")
			if err := e.SetData(event.ApplicationJSON, []byte(data)); err != nil {
				t.Fatal(err)
			}
			vars, err := policies.EventVars(e)
			if err != nil {
				t.Fatal(err)
			}
			ok, err := c.Triggers[0].Admits(context.Background(), vars)
			if !errors.Is(err, policies.ErrEval) || !strings.Contains(err.Error(), "cost limit") {
				t.Fatalf("got %v, %v; want ErrEval at the cost limit", ok, err)
			}
			// The same rule over a small event is cheap and evaluates.
			small := event.New()
			small.SetID("2")
			small.SetSource("/s")
			small.SetType("t")
			if err := small.SetData(event.ApplicationJSON, []byte(`{"items":[1,2,3],"s":"ab"}`)); err != nil {
				t.Fatal(err)
			}
			vars, err = policies.EventVars(small)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Triggers[0].Admits(context.Background(), vars); err != nil {
				t.Fatalf("small event: %v", err)
			}
		})
	}
}

// TestMapLiteralWithBytesKeyIsRefused: a map literal keyed by bytes, which
// the checker accepts and cel-go's planner panics on, is refused as the
// rule's error when its definition is loaded, not a panic of the process
// loading it.
func TestMapLiteralWithBytesKeyIsRefused(t *testing.T) {
	y := "name: a\nmodel: {provider: scripted}\ntriggers:\n  - name: t\n    when: 'size({b\"k\": 1}) > 0'\n"
	_, err := policies.Parse("agent.yaml", []byte(y))
	if !errors.Is(err, policies.ErrInvalid) || !strings.Contains(err.Error(), "cannot plan") {
		t.Fatalf("got %v, want ErrInvalid for the map literal", err)
	}
	t.Log(err)
}
