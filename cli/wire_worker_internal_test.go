package cli

import (
	"slices"
	"testing"

	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools"
)

// The tools a worker runs are the tools definitions are checked against:
// a tool added to one and not the other fails here, not in a user's run.
func TestWorkerToolsAreTheKnownTools(t *testing.T) {
	var names []string
	for _, tl := range workerTools(&Runtime{Names: streams.Default(), Getenv: func(string) string { return "" }}, nil, nil, nil, nil, nil, 0) {
		names = append(names, tl.Spec().Name)
	}
	slices.Sort(names)
	if want := tools.Names(); !slices.Equal(names, want) {
		t.Fatalf("worker tools %v, definitions are checked against %v", names, want)
	}
}
