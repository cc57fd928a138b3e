package streams_test

import (
	"os"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/streams"
)

// TestREADMEListsLayout keeps the README's architecture table in step with
// the declared layout: every stream, bucket and subject space is named there.
func TestREADMEListsLayout(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, res := range streams.Layout(streams.Options{}) {
		if !strings.Contains(readme, "`"+res.Name+"`") {
			t.Errorf("README does not list %s %s", res.Kind, res.Name)
		}
		for _, subj := range res.Stream.Subjects {
			stem := strings.TrimSuffix(subj, ">")
			if !strings.Contains(readme, "`"+stem) {
				t.Errorf("README does not list the subjects %s of %s", subj, res.Name)
			}
		}
	}
}
