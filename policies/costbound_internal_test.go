package policies

import (
	"context"
	"fmt"
	"reflect"
	"regexp/syntax"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
)

// costSeeds are expressions over every operator and function costBound
// bounds, and some it refuses.
var costSeeds = []string{
	`event.data.a.b.c.d == 1`,
	`event.type in ["a", "b"] && !event.data.pull_request.draft`,
	`event.data.repository.full_name + "#" + string(event.data.pull_request.number)`,
	`event.data.l[0] == "x" || event.data.l[1] != event.data.s`,
	`event.data["a"]["b"].c.d == 1`,
	`has(event.data.a.b) && has(event.extensions.jlagent)`,
	`event.type == "t" ? event.data.s : "x"`,
	`[event.data.s, event.subject] == ["abc", "s"]`,
	`{"k": event.data.s}.k == "abc"`,
	`event.data.s.startsWith("ab") && event.data.s.endsWith(event.data.s) && event.data.s.contains(event.data.s)`,
	`event.data.s.matches("^a+$") || event.data.l[0].matches(event.data.l[1])`,
	`event.data.s.matches("[a-z]{100}z") || matches(event.data.s, "(a|b){0,1000}c")`,
	`event.data.l[0].matches("(?i)é+") && event.data.s.matches(event.data.l[1] + "+")`,
	`size(event.data.s) + size(event.data.l) - event.data.a.b.c.d * 2 / 1 % 5 > -1`,
	`event.data.l + event.data.l + [event.data.s] == event.data.l`,
	`string(bytes(event.data.s)) + string(event.time) + string(event.data.f) < event.data.s`,
	`int(event.data.a.b.c.d) + int(uint(1)) == 2 && double(event.data.f) >= 0.5 && bool("true")`,
	`dyn(event.data.s) + event.data.s + event.data.s + event.data.s != ""`,
	`event.data.s in event.data.l && "k" in event.data && event.data.s in {"abc": 1}`,
	`event.data.s + event.data.s + event.data.s + event.data.s + event.data.s + event.data.s`,
	`(event.data.s + "") + (event.data.s + "") + string(event.data.s) != ""`,
	`dyn(event.data.s) == dyn(event.data.s) && string(event.data.s) != string(event.data.l)`,
	`event.data`,
	`event.data.l[event.data.a.b.c.d]`,
	`event.data.m[event.data.s]`,
	`event.extensions.jlagent + event.id + event.source + event.specversion + event.datacontenttype`,
	`event.data.s.lowerAscii() == "abc"`,
	`event.data.l.all(x, x != "")`,
	`event.data.l == ["x", "y"] && event.data.m != {"abc": "v", "k": [1, [2, 3]]} && [event.data.s] + [event.data.s] == [event.data.s, "a"]`,
	`event.data == event.data || event.data.l == event.data.l`,
	`[event.data.s] in event.data.l || event.data.l in [event.data.l, ["x"]] || event.data.a in [1, [2, 3]] || {"k": 1} in [{"k": 1}]`,
	`event.data.s in ["abc", "x"] && !(event.data.l in event.data.l)`,
}

// costInputs are event data of several sizes, the last large.
var costInputs = []string{
	`{"a":{"b":{"c":{"d":1}}},"l":["x","y"],"s":"abc","f":0.5,"m":{"abc":"v"},"pull_request":{"number":12,"draft":false},"repository":{"full_name":"o/r"}}`,
	`{"a":{"b":{"c":{"d":0}}},"l":["` + strings.Repeat("é", 300) + `","abc"],"s":"` + strings.Repeat("a", 2000) + `","f":1e300,"m":{}}`,
	`{"l":[` + strings.Repeat(`"abc",`, 999) + `"abc"],"s":"` + strings.Repeat("ab", 20000) + `","a":{"b":{"c":{"d":1}}}}`,
	`{"s":"` + strings.Repeat("a", 600_000) + `"}`,
	`[1,2,3]`,
	`"text"`,
}

func costEvent(typ, data string) event.Event {
	e := event.New()
	e.SetID("1")
	e.SetSource("s")
	e.SetType(typ)
	e.SetSubject("s")
	e.SetExtension("jlagent", "a")
	_ = e.SetData("application/json", []byte(data))
	return e
}

// checkCheapEval says what is wrong with x over vars: the cost the
// tracker counts exceeds the bound for the variables' input bound, or the
// evaluation without the tracker (what run chooses) answers otherwise
// than the tracked program under ctx.
func checkCheapEval(ctx context.Context, x *Expr, vars Vars) error {
	n, ok := boundOfVars(vars)
	if !ok {
		return fmt.Errorf("vars carry no input bound")
	}
	out, det, err := x.prg.ContextEval(ctx, map[string]any(vars))
	if bound, ok := costBound(x.root, n); ok && err == nil && det != nil && det.ActualCost() != nil && *det.ActualCost() > bound {
		return fmt.Errorf("%s: tracked cost %d over the bound %d for inputs up to %d", x.src, *det.ActualCost(), bound, n)
	}
	got, gotErr := x.run(ctx, vars)
	var gotV, wantV any
	if got != nil {
		gotV, _ = nativeOf(got)
	}
	if out != nil {
		wantV, _ = nativeOf(out)
	}
	if !reflect.DeepEqual(gotV, wantV) || fmt.Sprint(gotErr) != fmt.Sprint(err) {
		return fmt.Errorf("%s over inputs up to %d: %.200v, %v; tracked %.200v, %v", x.src, n, gotV, gotErr, wantV, err)
	}
	return nil
}

// TestCostBoundCoversTrackedCost: over events of several sizes, every
// seed expression the bound covers costs the tracker no more than the
// bound, and evaluates as the tracked program does, under a live and a
// cancelled context; the bounded ones are planned without the tracker.
func TestCostBoundCoversTrackedCost(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, src := range costSeeds {
		x, err := compileExpr(src, anyOverEvent)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		// An equality of two inputs is bounded only by what they hold,
		// which no input bound bounds.
		c, bounded := costBound(x.root, minInputBound)
		if wantFast := bounded && c <= CostLimit && !x.loops; (x.fast != nil) != wantFast {
			t.Errorf("%s: planned without the tracker %v, want %v", src, x.fast != nil, wantFast)
		}
		for _, data := range costInputs {
			vars, err := EventVars(costEvent("t", data))
			if err != nil {
				t.Fatal(err)
			}
			for _, ctx := range []context.Context{context.Background(), cancelled} {
				if err := checkCheapEval(ctx, x, vars); err != nil {
					t.Error(err)
				}
			}
		}
	}
}

// TestCheapRulesOfTheWebhook: the rules a GitHub webhook meets most
// (first terms on event.type, a session of two fields) are planned
// without the tracker for any webhook body up to well past 28 KB.
func TestCheapRulesOfTheWebhook(t *testing.T) {
	for src, kind := range map[string]exprKind{
		`event.type in ["com.github.pull_request.opened", "com.github.pull_request.synchronize"] && !event.data.pull_request.draft`: condOverEvent,
		`event.data.repository.full_name + "#" + string(event.data.pull_request.number)`:                                            stringOverEvent,
	} {
		x, err := compileExpr(src, kind)
		if err != nil {
			t.Fatal(err)
		}
		if x.fast == nil || x.cheapUpTo < 128<<10 {
			t.Errorf("%s: without the tracker for inputs up to %d (planned %v), want at least 128 KiB", src, x.cheapUpTo, x.fast != nil)
		}
	}
}

// TestCostLimitStillStopsLoopFreeRules: a rule without a comprehension
// whose cost grows with its input is evaluated without the tracker over
// a small event, and still stops at the cost limit over one large enough
// to pass it.
func TestCostLimitStillStopsLoopFreeRules(t *testing.T) {
	// Operands that are calls: the tracker charges a concatenation for
	// the sizes of those (not of fields it selects directly).
	x, err := compileExpr(`(event.data.s + "") + (event.data.s + "") != ""`, condOverEvent)
	if err != nil {
		t.Fatal(err)
	}
	if x.fast == nil || x.cheapUpTo >= 600_000 {
		t.Fatalf("without the tracker up to %d (planned %v)", x.cheapUpTo, x.fast != nil)
	}
	small, err := EventVars(costEvent("t", `{"s":"ab"}`))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := x.EvalBool(context.Background(), small); !ok || err != nil {
		t.Fatalf("small event: %v, %v", ok, err)
	}
	large, err := EventVars(costEvent("t", `{"s":"`+strings.Repeat("a", 600_000)+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := x.EvalBool(context.Background(), large); err == nil || !strings.Contains(err.Error(), "cost limit") {
		t.Fatalf("large event: %v, %v; want the cost limit", ok, err)
	}
}

// TestCostLimitStillStopsOverLargeAttributes: the sizes of the event's
// attributes and extensions bound its cost as the data's do: a rule
// without a comprehension over an attribute or an extension long enough
// to pass the limit, of an event whose data is small or unread, still
// stops at the cost limit.
func TestCostLimitStillStopsOverLargeAttributes(t *testing.T) {
	long := strings.Repeat("a", 600_000)
	for field, set := range map[string]func(*event.Event){
		"id":                  func(e *event.Event) { e.SetID(long) },
		"type":                func(e *event.Event) { e.SetType(long) },
		"subject":             func(e *event.Event) { e.SetSubject(long) },
		"extensions.jlsender": func(e *event.Event) { e.SetExtension("jlsender", long) },
	} {
		src := fmt.Sprintf(`(event.%s + "") + (event.%s + "") != ""`, field, field)
		x, err := compileExpr(src, condOverEvent)
		if err != nil {
			t.Fatal(err)
		}
		if x.fast == nil || x.cheapUpTo >= uint64(len(long)) {
			t.Fatalf("%s: without the tracker up to %d (planned %v)", src, x.cheapUpTo, x.fast != nil)
		}
		e := costEvent("t", `{"s":"ab"}`)
		set(&e)
		for _, data := range []bool{false, true} {
			vars, err := NewEventData(e).Vars(data)
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := x.EvalBool(context.Background(), vars); err == nil || !strings.Contains(err.Error(), "cost limit") {
				t.Errorf("%s with data %v: %v, %.100v; want the cost limit", src, data, ok, err)
			}
		}
	}
}

// TestInputBoundOfReceiverData: data a receiver decoded is bounded by
// what it holds, not by the event's bytes, and a value of a type no
// decoder makes leaves the event without a bound that makes it cheap.
func TestInputBoundOfReceiverData(t *testing.T) {
	e := costEvent("t", `{}`)
	long := strings.Repeat("x", 5000)
	vars, err := DecodedEventData(e, map[string]any{"a": []any{map[string]any{long: int64(1)}}}).Vars(true)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := boundOfVars(vars); n != 5000 {
		t.Errorf("bound %d, want 5000", n)
	}
	vars, err = DecodedEventData(e, map[string]any{"a": struct{}{}}).Vars(true)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := boundOfVars(vars); n < cheapInputLimit {
		t.Errorf("bound %d of an unknown type, want none", n)
	}
}

// FuzzCostBound compiles arbitrary expressions and evaluates them over
// arbitrary JSON data: where the bound covers an expression, the tracker
// never counts more, and run answers what the tracked program answers.
func FuzzCostBound(f *testing.F) {
	for _, src := range costSeeds {
		for _, data := range costInputs[:3] {
			f.Add(src, data, false)
		}
	}
	f.Add(costSeeds[2], costInputs[0], true)
	f.Fuzz(func(t *testing.T, src, data string, cancelled bool) {
		x, err := compileExpr(src, anyOverEvent)
		if err != nil {
			return
		}
		vars, err := EventVars(costEvent("t", data))
		if err != nil {
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if cancelled {
			cancel()
		}
		if err := checkCheapEval(ctx, x, vars); err != nil {
			t.Fatal(err)
		}
	})
}

// TestMatchesChargeAgrees: the tracker charges a match matchCost for the
// pattern's compiled program, whether the pattern is the rule's or the
// event's, and the event's compileCost besides; the bound covers it, and
// the evaluation without the tracker answers as the tracked one.
func TestMatchesChargeAgrees(t *testing.T) {
	patterns := []string{`^a+$`, `(a|b){0,1000}c`, `[a-z]{100}z`, `(?i)urgent|p0`, `^(feat|fix|chore)(\(.+\))?: `, `é{3,}x*`, `a{2,}|b{0}|c{3,5}|(?:d)?`}
	strs := []string{"", "abc", strings.Repeat("é", 300), strings.Repeat("ab", 2000)}
	for _, p := range patterns {
		c, err := compilePattern(p)
		if err != nil {
			t.Fatal(err)
		}
		parsed, _ := syntax.Parse(p, syntax.Perl)
		if progBound(parsed) < c.insts {
			t.Errorf("%s: %d instructions, bounded by %d", p, c.insts, progBound(parsed))
		}
		lit := strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(p)
		for _, s := range strs {
			vars, err := EventVars(costEvent("t", fmt.Sprintf(`{"s":%q,"p":%q}`, s, p)))
			if err != nil {
				t.Fatal(err)
			}
			charge := matchCost(uint64(utf8.RuneCountInString(s)), c.insts)
			// endsWith the pattern costs what matches does, but for the
			// match: a tenth of the pattern's length. A pattern of the
			// event is charged its compilation too.
			for src, same := range map[string]string{
				`event.data.s.matches("` + lit + `")`: `event.data.s.endsWith("` + lit + `")`,
				`event.data.s.matches(event.data.p)`:  `event.data.s.endsWith(event.data.p)`,
				`matches(event.data.s, event.data.p)`: `event.data.s.endsWith(event.data.p)`,
			} {
				charge := charge
				if strings.Contains(src, "event.data.p") {
					charge += compileCost(c.insts)
				}
				if charge > CostLimit {
					continue
				}
				base := tracked(t, same, vars) - (uint64(utf8.RuneCountInString(p))+9)/10
				if got := tracked(t, src, vars); got != base+charge {
					t.Errorf("%s over %d characters: tracked %d, want %d + %d", src, len(s), got, base, charge)
				}
				x, err := compileExpr(src, anyOverEvent)
				if err != nil {
					t.Fatal(err)
				}
				if err := checkCheapEval(context.Background(), x, vars); err != nil {
					t.Error(err)
				}
			}
		}
	}
}

// tracked is the cost the tracker counts for src over vars.
func tracked(t *testing.T, src string, vars Vars) uint64 {
	t.Helper()
	x, err := compileExpr(src, anyOverEvent)
	if err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	_, det, err := x.prg.Eval(map[string]any(vars))
	if err != nil || det == nil || det.ActualCost() == nil {
		t.Fatalf("%s: %v", src, err)
	}
	return *det.ActualCost()
}

// values counts what a decoded JSON value holds, itself included.
func values(v any) uint64 {
	n := uint64(1)
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			n += values(e)
		}
	case map[string]any:
		for _, e := range x {
			n += 1 + values(e)
		}
	}
	return n
}

// TestEqualityChargeAgrees: the tracker charges an equality with a list
// or a map the values of the operand holding fewer, the bound covers it,
// and the evaluation without the tracker answers as the tracked one.
func TestEqualityChargeAgrees(t *testing.T) {
	pairs := [][2]string{
		{`[1,2,3]`, `[1,2,3]`},
		{`[1,[2,[3,4]],{"k":[5,6]}]`, `[1,[2,[3,4]],{"k":[5,7]}]`},
		{`{"a":1,"b":[1,2]}`, `{"a":1,"b":[1,2],"c":{}}`},
		{`[` + strings.Repeat(`[1,2],`, 500) + `3]`, `[1]`},
		{`[]`, `{}`},
		{`[1,2]`, `"ab"`},
	}
	for _, p := range pairs {
		data := fmt.Sprintf(`{"a":%s,"b":%s,"n":1}`, p[0], p[1])
		vars, err := EventVars(costEvent("t", data))
		if err != nil {
			t.Fatal(err)
		}
		var a, b any
		a, _ = ParseJSON([]byte(p[0]))
		b, _ = ParseJSON([]byte(p[1]))
		want := min(values(a), values(b))
		// An operand against a number is charged one: the number holds one.
		base := tracked(t, `event.data.a == event.data.n`, vars) - 1
		for _, src := range []string{`event.data.a == event.data.b`, `event.data.a != event.data.b`} {
			if got := tracked(t, src, vars); got != base+want {
				t.Errorf("%s over %s: tracked %d, want %d + %d", src, data, got, base, want)
			}
		}
		for _, src := range []string{`event.data.a == ` + p[1], p[0] + ` != event.data.b`, `[event.data.a] == [` + p[1] + `]`} {
			x, err := compileExpr(src, anyOverEvent)
			if err != nil {
				t.Fatal(err)
			}
			if x.fast == nil {
				t.Errorf("%s: planned with the tracker, want without", src)
			}
			if err := checkCheapEval(context.Background(), x, vars); err != nil {
				t.Error(err)
			}
		}
	}
}
