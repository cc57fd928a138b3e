package policies

import (
	"fmt"
	"strings"
	"testing"
)

func TestUnifiedDiff(t *testing.T) {
	a := strings.Split("a b c d e f g h i j k l m n", " ")
	b := strings.Split("a b C d e f g h i j k l m n o", " ")
	got := unified(a, b, "v1", "v2")
	want := "--- v1\n+++ v2\n@@ -1,6 +1,6 @@\n a\n b\n-c\n+C\n d\n e\n f\n@@ -12,3 +12,4 @@\n l\n m\n n\n+o\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if d := unified(a, a, "v1", "v1"); d != "" {
		t.Fatalf("same lines: %q", d)
	}
	if d := unified(nil, []string{"x"}, "v1", "v2"); d != "--- v1\n+++ v2\n@@ -0,0 +1 @@\n+x\n" {
		t.Fatalf("from nothing: %q", d)
	}
	// Near changes share one hunk.
	c := strings.Split("a b X d e f Y h i", " ")
	if d := unified(strings.Split("a b c d e f g h i", " "), c, "1", "2"); strings.Count(d, "@@ ") != 1 || !strings.Contains(d, "-c\n+X\n") || !strings.Contains(d, "-g\n+Y\n") {
		t.Fatalf("near changes:\n%s", d)
	}
}

func TestYAMLReadsBackToTheSameContent(t *testing.T) {
	c, err := LoadFile("testdata/pr-reviewer.yaml")
	if err != nil {
		t.Fatal(err)
	}
	y, err := YAML(c.Definition)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse("rendered.yaml", y)
	if err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	if ContentHash(again.Definition) != ContentHash(c.Definition) {
		t.Fatalf("rendered YAML reads back to other content:\n%s", y)
	}
	d := c.Definition
	d.System = "You review pull requests.\nBe brief."
	diff, err := Diff(c.Definition, d, "pr-reviewer v1", "pr-reviewer v2")
	if err != nil || !strings.Contains(diff, "+system: |-\n+  You review pull requests.\n+  Be brief.\n") {
		t.Fatalf("diff (%v):\n%s", err, diff)
	}
}

// FuzzUnifiedDiff checks every diff against its inputs: the kept and
// removed lines of its hunks are a's at the lines the headers name, the
// kept and added ones b's, and lines outside the hunks are the same in
// both.
func FuzzUnifiedDiff(f *testing.F) {
	f.Add("a\nb\nc\nd", "a\nx\nc\nd\ne")
	f.Add("", "x")
	f.Add("p\nq\nr\ns\nt\nu\nv\nw", "p\nr\ns\nt\nu\nv\nW")
	f.Fuzz(func(t *testing.T, as, bs string) {
		a, b := lines(as), lines(bs)
		if len(a) > 200 || len(b) > 200 {
			return
		}
		d := unified(a, b, "a", "b")
		if d == "" {
			if strings.Join(a, "\n") != strings.Join(b, "\n") {
				t.Fatalf("no diff between %q and %q", a, b)
			}
			return
		}
		// Rebuild b from a and the hunks.
		out := []string{}
		next := 0 // the next line of a not yet copied
		for _, h := range strings.Split(d, "\n@@ ")[1:] {
			head, body, _ := strings.Cut(h, " @@\n")
			var sa, na, sb, nb int
			parse := func(r string) (int, int) {
				var s, n int
				if _, err := fmt.Sscanf(r, "%d,%d", &s, &n); err != nil {
					fmt.Sscanf(r, "%d", &s)
					n = 1
				}
				return s, n
			}
			ra, rb, _ := strings.Cut(strings.TrimPrefix(head, "-"), " +")
			sa, na = parse(ra)
			sb, nb = parse(rb)
			start := sa - 1
			if na == 0 {
				start = sa
			}
			out = append(out, a[next:start]...)
			next = start
			gotA, gotB := 0, 0
			for _, l := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
				if l == "" {
					continue
				}
				switch l[0] {
				case ' ', '-':
					if next >= len(a) || a[next] != l[1:] {
						t.Fatalf("hunk line %q is not a's line %d\n%s", l, next+1, d)
					}
					next++
					gotA++
					if l[0] == ' ' {
						out = append(out, l[1:])
						gotB++
					}
				case '+':
					out = append(out, l[1:])
					gotB++
				}
			}
			if gotA != na || gotB != nb || (nb > 0 && sb != len(out)-nb+1) {
				t.Fatalf("hunk %q counts %d,%d, header says %d,%d at %d\n%s", head, gotA, gotB, na, nb, sb, d)
			}
		}
		out = append(out, a[next:]...)
		if strings.Join(out, "\n") != strings.Join(b, "\n") {
			t.Fatalf("a patched by\n%s\nis %q, want %q", d, out, b)
		}
	})
}
