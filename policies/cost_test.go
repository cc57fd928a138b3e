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

// eventWithData returns the variables of an event carrying data (JSON).
func eventWithData(t *testing.T, data string) policies.Vars {
	t.Helper()
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
	return vars
}

// TestMatchesIsChargedForItsPatternsProgram: a pattern short in text but
// large once compiled, such as (a|b){0,1000}c, is charged for its program
// over a long string and stops at the cost limit before it runs (RE2 takes
// seconds over 100 KB), whether the pattern is the rule's or the event's,
// and whatever the rest of the condition would absorb; over a short string
// it matches. Ordinary patterns still match over the long string.
func TestMatchesIsChargedForItsPatternsProgram(t *testing.T) {
	body := strings.Repeat("a", 100_000)
	long := `{"body":"` + body + `","title":"fix(ingest): keep order","p":"(a|b){1000}c","q":"(?i)URGENT"}`
	short := `{"body":"ababc","title":"x","p":"(a|b){1000}c","q":"x"}`
	tests := []struct {
		when     string
		refused  bool // at the cost limit over the long body
		overLong bool // the result over the long body when not refused
	}{
		{when: `event.data.body.matches("(a|b){0,1000}c")`, refused: true},
		{when: `matches(event.data.body, "(a|b){0,1000}c")`, refused: true},
		{when: `event.data.body.matches(event.data.p)`, refused: true},
		{when: `event.data.body.matches("(a|b){0,1000}c") || true`, refused: true},
		{when: `true && !event.data.body.matches(event.data.p)`, refused: true},
		{when: `event.data.title.matches("^(feat|fix|chore)(\\(.+\\))?: ")`, overLong: true},
		{when: `event.data.body.matches("(?i)urgent|p0")`},
		{when: `event.data.body.matches("^a+$")`, overLong: true},
		{when: `event.data.body.matches(event.data.q)`},
	}
	for _, tt := range tests {
		t.Run(tt.when, func(t *testing.T) {
			c, err := policies.Compile(policies.Definition{Name: "a", Model: policies.Model{Provider: "scripted"},
				Triggers: []policies.Trigger{{Name: "t", When: tt.when}}})
			if err != nil {
				t.Fatalf("refused at load: %v", err)
			}
			ok, err := c.Triggers[0].Admits(context.Background(), eventWithData(t, long))
			if tt.refused {
				if !errors.Is(err, policies.ErrEval) || !strings.Contains(err.Error(), "cost limit") || !strings.Contains(err.Error(), tt.when) {
					t.Fatalf("long body: %v, %.200v; want ErrEval at the cost limit naming the rule", ok, err)
				}
			} else if err != nil || ok != tt.overLong {
				t.Fatalf("long body: %v, %.200v; want %v", ok, err, tt.overLong)
			}
			if _, err := c.Triggers[0].Admits(context.Background(), eventWithData(t, short)); err != nil {
				t.Fatalf("short body: %v", err)
			}
		})
	}
}

// TestPatternTooLongToMatchWithinTheLimitIsRefused: a constant pattern
// every string it matches is so long that matching one costs more than
// the cost limit, such as (a|b){1000}c (1001 characters at least, 3003
// instructions), could never be true: it is refused when its rule loads,
// with the rule's field and line, saying so. One that matches short
// strings with the same program loads; the same pattern supplied by an
// event is false over a string too short for it.
func TestPatternTooLongToMatchWithinTheLimitIsRefused(t *testing.T) {
	for _, p := range []string{`(a|b){1000}c`, `^x{700}y{700}$`, `(?:foo|bar){400}`} {
		y := fmt.Sprintf("name: a\nmodel: {provider: scripted}\ntriggers:\n  - name: t\n    when: '!event.data.s.matches(\"%s\")'\n", p)
		_, err := policies.Parse("agent.yaml", []byte(y))
		errs := policies.Errors(err)
		if !errors.Is(err, policies.ErrInvalid) || len(errs) != 1 || errs[0].Line != 5 || errs[0].Field != "triggers[0].when" ||
			!strings.Contains(err.Error(), "more than the cost limit of 100000 for any input") {
			t.Fatalf("%s: got %v; want the rule refused for a pattern that cannot match within the cost limit", p, err)
		}
		t.Log(err)
	}
	for _, p := range []string{`(a|b){0,1000}c`, `c|(a|b){1000}c`, `^(a|b){1,100}c$`} {
		y := fmt.Sprintf("name: a\nmodel: {provider: scripted}\ntriggers:\n  - name: t\n    when: 'event.data.s.matches(\"%s\")'\n", p)
		c, err := policies.Parse("agent.yaml", []byte(y))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if ok, err := c.Triggers[0].Admits(context.Background(), eventWithData(t, `{"s":"abc"}`)); err != nil || !ok {
			t.Fatalf("%s over abc: %v, %v; want a match", p, ok, err)
		}
	}
	c, err := policies.Compile(policies.Definition{Name: "a", Model: policies.Model{Provider: "scripted"},
		Triggers: []policies.Trigger{{Name: "t", When: `event.data.s.matches(event.data.p)`}}})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := c.Triggers[0].Admits(context.Background(), eventWithData(t, `{"s":"ababc","p":"(a|b){1000}c"}`)); err != nil || ok {
		t.Fatalf("the event's pattern over a short string: %v, %v; want false", ok, err)
	}
}

// TestTooLargeAPatternIsRefused: a constant pattern whose program exceeds
// MaxRegexProgram is refused when its rule loads, with the rule's field
// and line; one an event supplies fails that rule's evaluation.
func TestTooLargeAPatternIsRefused(t *testing.T) {
	for _, p := range []string{`(a|b){1000}(c|d){1000}`, `[a-z]{1000}[0-9]{1000}[a-z]{1000}[0-9]{1000}[a-z]{1000}[0-9]{1000}`} {
		y := fmt.Sprintf("name: a\nmodel: {provider: scripted}\ntriggers:\n  - name: t\n    when: 'event.data.s.matches(\"%s\")'\n", p)
		_, err := policies.Parse("agent.yaml", []byte(y))
		errs := policies.Errors(err)
		if !errors.Is(err, policies.ErrInvalid) || len(errs) != 1 || errs[0].Line != 5 || errs[0].Field != "triggers[0].when" ||
			!strings.Contains(err.Error(), "instructions") {
			t.Fatalf("%s: got %v; want the rule refused for its pattern", p, err)
		}
		t.Log(err)
	}
	c, err := policies.Compile(policies.Definition{Name: "a", Model: policies.Model{Provider: "scripted"},
		Triggers: []policies.Trigger{{Name: "t", When: `event.data.s.matches(event.data.p)`}}})
	if err != nil {
		t.Fatal(err)
	}
	ok, err := c.Triggers[0].Admits(context.Background(), eventWithData(t, `{"s":"ab","p":"(a|b){1000}(c|d){1000}"}`))
	if !errors.Is(err, policies.ErrEval) || !strings.Contains(err.Error(), "instructions") {
		t.Fatalf("got %v, %v; want ErrEval for the event's pattern", ok, err)
	}
}

// TestEqualityOfListsAndMapsIsChargedForWhatTheyHold: comparing two
// lists or maps of an event is charged for the values they hold at any
// depth, not for their length: two copies of a large list, alone or
// nested in a list of one, stop at the cost limit before they are
// compared; small ones compare.
func TestEqualityOfListsAndMapsIsChargedForWhatTheyHold(t *testing.T) {
	items := make([]string, 120_000)
	for i := range items {
		items[i] = fmt.Sprint(i % 10)
	}
	list := "[" + strings.Join(items, ",") + "]"
	large := `{"a":` + list + `,"b":` + list + `,"m":{"k":` + list + `},"n":{"k":` + list + `}}`
	small := `{"a":[1,[2,3]],"b":[1,[2,3]],"m":{"k":[1]},"n":{"k":[1]}}`
	for _, when := range []string{
		`event.data.a == event.data.b`,
		`[event.data.a] == [event.data.b]`,
		`event.data.m != event.data.n || true`,
		`{"x": event.data.a} == {"x": event.data.b}`,
	} {
		t.Run(when, func(t *testing.T) {
			c, err := policies.Compile(policies.Definition{Name: "a", Model: policies.Model{Provider: "scripted"},
				Triggers: []policies.Trigger{{Name: "t", When: when}}})
			if err != nil {
				t.Fatalf("refused at load: %v", err)
			}
			ok, err := c.Triggers[0].Admits(context.Background(), eventWithData(t, large))
			if !errors.Is(err, policies.ErrEval) || !strings.Contains(err.Error(), "cost limit") || !strings.Contains(err.Error(), when) {
				t.Fatalf("large lists: %v, %.200v; want ErrEval at the cost limit naming the rule", ok, err)
			}
			if ok, err := c.Triggers[0].Admits(context.Background(), eventWithData(t, small)); err != nil || !ok {
				t.Fatalf("small lists: %v, %v", ok, err)
			}
		})
	}
}

// TestMembershipIsChargedForWhatItCompares: `in` over a list of the event
// is charged an element each, and for a list or a map looked for the
// values each element is compared for, so it stops at the cost limit over
// a large list before comparing (CEL charged one for a list typed dyn, and
// a loop over such lookups ran for seconds); over a small list it answers.
func TestMembershipIsChargedForWhatItCompares(t *testing.T) {
	ints := strings.TrimSuffix(strings.Repeat("1,", 120_000), ",")
	x := "[" + strings.TrimSuffix(strings.Repeat("1,", 5000), ",") + "]"
	y := "[" + strings.TrimSuffix(strings.Repeat("1,", 4999), ",") + ",2]"
	deep := "[" + strings.TrimSuffix(strings.Repeat(y+",", 30), ",") + "]"
	large := `{"l":[` + ints + `],"x":` + x + `,"d":` + deep + `,"it":[1,2,3]}`
	small := `{"l":[1,3],"x":[1],"d":[[2],[3]],"it":[1,2,3]}`
	for _, when := range []string{
		`3 in event.data.l`,
		`!(event.data.x in event.data.d)`,
		`event.data.it.exists(v, v == 3 && 3 in event.data.l)`,
		`event.data.x in [event.data.l, event.data.d, event.data.x] && 3 in event.data.l`,
	} {
		t.Run(when, func(t *testing.T) {
			c, err := policies.Compile(policies.Definition{Name: "a", Model: policies.Model{Provider: "scripted"},
				Triggers: []policies.Trigger{{Name: "t", When: when}}})
			if err != nil {
				t.Fatalf("refused at load: %v", err)
			}
			ok, err := c.Triggers[0].Admits(context.Background(), eventWithData(t, large))
			if !errors.Is(err, policies.ErrEval) || !strings.Contains(err.Error(), "cost limit") || !strings.Contains(err.Error(), when) {
				t.Fatalf("large lists: %v, %.200v; want ErrEval at the cost limit naming the rule", ok, err)
			}
			if ok, err := c.Triggers[0].Admits(context.Background(), eventWithData(t, small)); err != nil || !ok {
				t.Fatalf("small lists: %v, %v", ok, err)
			}
		})
	}
}

// TestPatternsOfTheEventAreChargedTheirCompilation: a pattern an event
// supplies is compiled when the rule evaluates, some hundreds of times the
// time of a step of the matcher an instruction, so it is charged for it: a
// rule trying each of hundreds of large patterns of the event stops at the
// cost limit (compiling them took most of a second), while a few small
// ones still match.
func TestPatternsOfTheEventAreChargedTheirCompilation(t *testing.T) {
	pats := make([]string, 400)
	for i := range pats {
		pats[i] = fmt.Sprintf(`"(a|b){%d}c"`, 999-i)
	}
	c, err := policies.Compile(policies.Definition{Name: "a", Model: policies.Model{Provider: "scripted"},
		Triggers: []policies.Trigger{{Name: "t", When: `event.data.p.exists(p, event.data.s.matches(p))`}}})
	if err != nil {
		t.Fatal(err)
	}
	ok, err := c.Triggers[0].Admits(context.Background(), eventWithData(t, `{"s":"","p":[`+strings.Join(pats, ",")+`]}`))
	if !errors.Is(err, policies.ErrEval) || !strings.Contains(err.Error(), "cost limit") {
		t.Fatalf("large patterns: %v, %.200v; want ErrEval at the cost limit", ok, err)
	}
	ok, err = c.Triggers[0].Admits(context.Background(), eventWithData(t, `{"s":"fix: x","p":["^feat","(?i)^FIX:","urgent|p0"]}`))
	if err != nil || !ok {
		t.Fatalf("small patterns: %v, %v", ok, err)
	}
}

// TestSearchesStopAtTheCostLimit: indexOf and lastIndexOf over 600 000
// and 6000 characters stop at the cost limit (before they search:
// TestSearchesStopBeforeTheyRun); a small search answers.
func TestSearchesStopAtTheCostLimit(t *testing.T) {
	long := `{"s":"` + strings.Repeat("ab", 300_000) + `","t":"` + strings.Repeat("ab", 3000) + `c"}`
	for _, when := range []string{
		`event.data.s.indexOf(event.data.t) > 0`,
		`event.data.s.indexOf(event.data.t, 1) > 0`,
		`event.data.s.lastIndexOf(event.data.t) > 0`,
		`event.data.s.lastIndexOf(event.data.t, 4) > 0`,
	} {
		t.Run(when, func(t *testing.T) {
			c, err := policies.Compile(policies.Definition{Name: "a", Model: policies.Model{Provider: "scripted"},
				Triggers: []policies.Trigger{{Name: "t", When: when}}})
			if err != nil {
				t.Fatal(err)
			}
			ok, err := c.Triggers[0].Admits(context.Background(), eventWithData(t, long))
			if !errors.Is(err, policies.ErrEval) || !strings.Contains(err.Error(), "cost limit") {
				t.Fatalf("long: %v, %.300v; want ErrEval at the cost limit", ok, err)
			}
			if ok, err := c.Triggers[0].Admits(context.Background(), eventWithData(t, `{"s":"xabcab","t":"ab"}`)); err != nil || !ok {
				t.Fatalf("short: %v, %v", ok, err)
			}
		})
	}
}
