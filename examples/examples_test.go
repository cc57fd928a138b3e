package examples_test

import (
	"io/fs"
	"testing"

	"github.com/jetloop/jetloop/examples"
	"github.com/jetloop/jetloop/policies"
)

// Every example is a valid definition.
func TestExamplesParse(t *testing.T) {
	files, err := fs.Glob(examples.FS, "*.yaml")
	if err != nil || len(files) < 3 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			b, err := fs.ReadFile(examples.FS, f)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := policies.Parse(f, b); err != nil {
				t.Fatal(err)
			}
		})
	}
}
