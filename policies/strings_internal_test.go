package policies

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"
)

// TestSearchesAnswerAsTheStringsLibrary: indexOf and lastIndexOf, with
// and without an offset, answer what ext.Strings answers, errors
// included, over strings of several characters' widths.
func TestSearchesAnswerAsTheStringsLibrary(t *testing.T) {
	plain, err := cel.NewEnv(ext.Strings(), cel.Variable("s", cel.StringType), cel.Variable("t", cel.StringType))
	if err != nil {
		t.Fatal(err)
	}
	eval := func(env *cel.Env, src string, s, sub string) string {
		checked, iss := env.Compile(src)
		if iss != nil && iss.Err() != nil {
			t.Fatalf("%s: %v", src, iss.Err())
		}
		prg, err := env.Program(checked)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := prg.Eval(map[string]any{"s": s, "t": sub})
		if err != nil {
			return "error: " + err.Error()
		}
		return fmt.Sprint(out)
	}
	ours, err := cel.NewEnv(append([]cel.EnvOption{ext.Strings()}, append(boundedStrings(), cel.Variable("s", cel.StringType), cel.Variable("t", cel.StringType))...)...)
	if err != nil {
		t.Fatal(err)
	}
	strs := []string{"", "a", "ab", "abab", "héllo mellow", "ééé", "日本日本語", "aaa"}
	var srcs []string
	for _, fn := range []string{"indexOf", "lastIndexOf"} {
		srcs = append(srcs, "s."+fn+"(t)")
		for _, off := range []int{-2, -1, 0, 1, 2, 3, 5, 12, 13, 20} {
			srcs = append(srcs, fmt.Sprintf("s.%s(t, %d)", fn, off))
		}
	}
	for _, s := range strs {
		for _, sub := range append(strs, "ll", "本", "é", "ow", "b") {
			for _, src := range srcs {
				want, got := eval(plain, src, s, sub), eval(ours, src, s, sub)
				if want != got && !(strings.HasPrefix(want, "error") && strings.HasPrefix(got, "error")) {
					t.Errorf("%s over %q, %q: %s, want %s", src, s, sub, got, want)
				}
			}
		}
	}
}

// TestSearchesStopBeforeTheyRun: a search whose charge alone passes the
// cost limit stops the evaluation at it before searching (the tracker
// charges it only after, and over 600 000 and 6000 characters the search
// took seconds); one within the limit answers.
func TestSearchesStopBeforeTheyRun(t *testing.T) {
	s, sub := strings.Repeat("ab", 300_000), strings.Repeat("ab", 3000)+"c"
	for name, search := range map[string]func(){
		"indexOf":           func() { boundedIndexOf(s, sub, 0) },
		"indexOf at":        func() { boundedIndexOf(s, sub, 1) },
		"lastIndexOf":       func() { boundedLastIndexOf(s, sub, 0, true) },
		"lastIndexOf at":    func() { boundedLastIndexOf(s, sub, 100, false) },
		"indexOf of a word": func() { boundedIndexOf(s, "c", 0) },
	} {
		stopped := func() (stopped bool) {
			defer func() { stopped = recover() != nil }()
			search()
			return false
		}()
		if want := name != "indexOf of a word"; stopped != want {
			t.Errorf("%s: stopped before searching %v, want %v", name, stopped, want)
		}
	}
}
