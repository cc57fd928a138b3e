package policies

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
)

// FuzzTypeTest compiles arbitrary conditions and checks that EvalBool,
// with its shortcuts (a type test deciding alone, a rule without a
// comprehension evaluated without its context), answers what the whole
// program evaluated under the context answers: the same result, the same
// error (a decision record's reason), under a live or a cancelled
// context; and that a type the test refuses is false without an error.
func FuzzTypeTest(f *testing.F) {
	heavy := `event.data.items.all(x, event.data.items.all(y, x + y >= 0))`
	for _, when := range []string{
		`event.type == "com.github.push"`,
		`"com.github.push" == event.type && event.data.ref.startsWith("refs/heads/")`,
		`event.type in ["com.github.pull_request.opened", "com.github.push"] && !event.data.pull_request.draft`,
		`event.type.startsWith("com.github.") && event.data.missing.x == 1`,
		`event.type == "a" && event.type == "b" && event.data.items.all(x, x > 1)`,
		`(event.type == "com.github.push" || event.data.x == 1) && event.data.y`,
		`event.type == "com.github.push" || event.data.x == 1`,
		`event.type in [] && true`,
		`event.type.startsWith("") && 1 / 0 == 1`,
		`!(event.type == "com.github.push") && event.data.ref == "refs/heads/main"`,
		`event.type == "com.github.push" ? event.data.x == 1 : true`,
		`event.type == "com.github.push" && event.data.x == 1 || event.type == "a"`,
		`event.type in ["a", "a", "com.github.push"] && event.data.x == 1`,
		`event.type == "\u0061" && event.type == r"\u0061"`,
		`event.type == "a" && ` + heavy,
		`event.type == "a" || ` + heavy,
		heavy + ` && event.type == "a"`,
	} {
		for _, typ := range []string{"com.github.push", "com.github.pull_request.opened", "a", ""} {
			f.Add(when, typ, `{"ref":"refs/heads/main","pull_request":{"draft":false},"items":[1,2]}`, false)
			f.Add(when, typ, `{"items":[`+strings.Repeat("1,", 39)+`1]}`, true)
		}
	}
	// Past the cost limit (few seeds: each evaluation runs to the limit).
	for _, typ := range []string{"a", "b"} {
		f.Add(heavy+` && event.type == "a"`, typ, `{"items":[`+strings.Repeat("1,", 199)+`1]}`, false)
	}
	f.Fuzz(func(t *testing.T, when, typ, data string, cancelled bool) {
		x, err := compileExpr(when, condOverEvent)
		if err != nil {
			return
		}
		e := event.New()
		e.SetID("1")
		e.SetSource("s")
		e.SetType(typ)
		if err := e.SetData("application/json", []byte(data)); err != nil {
			return
		}
		vars, err := EventVars(e)
		if err != nil {
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if cancelled {
			cancel()
		}
		got, gotErr := x.EvalBool(ctx, vars)
		want, wantErr := evalWhole(ctx, x, vars)
		if got != want || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Fatalf("%s over type %q (cancelled %v): %v, %v; evaluated whole %v, %v", when, typ, cancelled, got, gotErr, want, wantErr)
		}
		if x.types != nil && !x.types(typ) && (got || gotErr != nil) {
			t.Fatalf("%s over type %q: the type test refuses it but it is %v, %v", when, typ, got, gotErr)
		}
	})
}

// evalWhole is EvalBool without its shortcuts: the whole program
// evaluated under ctx.
func evalWhole(ctx context.Context, x *Expr, vars Vars) (bool, error) {
	out, _, err := x.prg.ContextEval(ctx, map[string]any(vars))
	if err != nil {
		return false, fmt.Errorf("%w: %s: %w", ErrEval, x.src, err)
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("%w: %s: result is %s, want bool", ErrEval, x.src, out.Type().TypeName())
	}
	return b, nil
}

// TestTypeTestRecognisesFirstTerms names which conditions the type test
// decides: those whose first term compares event.type with literals.
func TestTypeTestRecognisesFirstTerms(t *testing.T) {
	for when, want := range map[string]bool{
		`event.type == "a"`:                             true,
		`"a" == event.type && event.data.x == 1`:        true,
		`event.type in ["a", "b"] && event.data.x == 1`: true,
		`event.type.startsWith("a.") && event.data.x`:   true,
		`event.data.x == 1 && event.type == "a"`:        false, // not evaluated first
		`event.type == "a" || event.data.x == 1`:        false,
		`event.type in ["a", event.subject]`:            false,
		`event.type == event.subject`:                   false,
		`event.type != "a"`:                             false,
		`event.type.endsWith("a")`:                      false,
		`event.extensions.type == "a" && event.data.x`:  false,
		`event.data.type == "a"`:                        false,
		`(event.type == "a" && event.data.x) && true`:   true,
		`!(event.type == "a") && event.data.x`:          false,
		`event.type == "a" ? event.data.x == 1 : false`: false,
		`(event.type == "a" || event.data.x) && true`:   false,
		`event.type == "a" && event.data.x || true`:     false,
	} {
		x, err := compileExpr(when, condOverEvent)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if got := x.types != nil; got != want {
			t.Errorf("%s: type test %v, want %v", when, got, want)
		}
	}
}

// TestTypeTestLongTypes: the first term's cost does not grow with the
// event type, so a type of megabytes is decided by the type test as the
// whole evaluation decides it, without reaching the cost limit.
func TestTypeTestLongTypes(t *testing.T) {
	long := strings.Repeat("p", MaxExpressionLen/4)
	list := `["` + long + `"` + strings.Repeat(`, "`+long[:8]+`"`, 200) + `]`
	for _, typ := range []string{strings.Repeat("p", 4<<20), long + strings.Repeat("q", 4<<20)} {
		for _, when := range []string{
			`event.type == "` + long + `" && true`,
			`event.type.startsWith("` + long + `") && event.type.size() > 0`,
			`event.type in ` + list + ` && true`,
		} {
			x, err := compileExpr(when, condOverEvent)
			if err != nil || x.types == nil {
				t.Fatalf("%.40s: %v, type test %v", when, err, x != nil && x.types != nil)
			}
			e := event.New()
			e.SetID("1")
			e.SetSource("s")
			e.SetType(typ)
			vars, err := EventVars(e)
			if err != nil {
				t.Fatal(err)
			}
			got, gotErr := x.EvalBool(context.Background(), vars)
			want, wantErr := evalWhole(context.Background(), x, vars)
			if got != want || gotErr != nil || wantErr != nil {
				t.Errorf("%.40s over a type of %d bytes: %v, %v; evaluated whole %v, %v", when, len(typ), got, gotErr, want, wantErr)
			}
		}
	}
}
