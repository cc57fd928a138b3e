package cli_test

import (
	"regexp"
	"strings"
	"testing"
)

// TestEveryVerbHasHelp runs every verb the usage lists with --help and
// -h, and the subcommands of those that have them: each exits 0 and
// prints its usage, without connecting anywhere.
func TestEveryVerbHasHelp(t *testing.T) {
	code, _, usage := run(t, nil, "help")
	if code != 0 {
		t.Fatalf("help: exit %d", code)
	}
	verbs := regexp.MustCompile(`(?m)^  ([a-z-]+) `).FindAllStringSubmatch(usage, -1)
	if len(verbs) < 20 {
		t.Fatalf("usage lists %d verbs:\n%s", len(verbs), usage)
	}
	lines := [][]string{}
	for _, v := range verbs {
		lines = append(lines, []string{v[1], "--help"}, []string{v[1], "-h"})
	}
	lines = append(lines,
		[]string{"dlq", "ls", "--help"}, []string{"dlq", "redrive", "--help"},
		[]string{"schedules", "trigger", "--help"}, []string{"schedules", "backfill", "--help"},
		[]string{"agents", "history", "--help"})
	for _, args := range lines {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errs := run(t, nil, append(args, "--server", "nats://127.0.0.1:1")...)
			if code != 0 || !strings.Contains(out+errs, "Usage: jetloop "+args[0]) {
				t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
			}
		})
	}
}
