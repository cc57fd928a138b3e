package policies

import (
	"context"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
)

// FuzzTypeTest compiles arbitrary conditions and, for those whose first
// term is a test of event.type, checks that the test decides alone only
// what evaluating the whole condition decides: a condition it refuses
// evaluates to false, without an error.
func FuzzTypeTest(f *testing.F) {
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
	} {
		for _, typ := range []string{"com.github.push", "com.github.pull_request.opened", "a", ""} {
			f.Add(when, typ, `{"ref":"refs/heads/main","pull_request":{"draft":false},"items":[1,2]}`)
		}
	}
	f.Fuzz(func(t *testing.T, when, typ, data string) {
		x, err := compileExpr(when, condOverEvent)
		if err != nil || x.types == nil {
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
		ctx := context.Background()
		got, gotErr := x.EvalBool(ctx, vars)
		whole := *x
		whole.types = nil
		want, wantErr := whole.EvalBool(ctx, vars)
		if x.types(typ) {
			// Not decided by the test: the same evaluation.
			if got != want || (gotErr == nil) != (wantErr == nil) {
				t.Fatalf("%s over type %q: %v, %v; evaluated whole %v, %v", when, typ, got, gotErr, want, wantErr)
			}
			return
		}
		if got || gotErr != nil || want || wantErr != nil {
			t.Fatalf("%s over type %q: the type test refuses it (%v, %v) but the whole condition evaluates to %v, %v", when, typ, got, gotErr, want, wantErr)
		}
	})
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
