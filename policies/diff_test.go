package policies

import (
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
