package cli_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/jetloop/jetloop/api"
)

// TestAgentsRolloutGuardFlags: a guard flag given alone changes that part
// of the guard in force, and the others stay as they were.
func TestAgentsRolloutGuardFlags(t *testing.T) {
	natsURL, _, _ := runDev(t, nil)
	dir := t.TempDir()
	file := filepath.Join(dir, "g.yaml")
	write := func(answer string) {
		t.Helper()
		body := fmt.Sprintf(`name: g
model: {provider: scripted, then: {text: %q}}
triggers:
  - {name: request, when: 'event.type == "dev.jetloop.request"', session: event.subject}
`, answer)
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, answer := range []string{"one", "two"} {
		write(answer)
		if code, out, errs := run(t, nil, "apply", file, "--server", natsURL); code != 0 {
			t.Fatalf("apply %s: exit %d, %s %s", answer, code, out, errs)
		}
	}
	guard := func() api.HistoryResponse {
		t.Helper()
		code, out, errs := run(t, nil, "agents", "history", "g", "--server", natsURL, "--json")
		if code != 0 {
			t.Fatalf("history: exit %d, %s", code, errs)
		}
		var h api.HistoryResponse
		if err := json.Unmarshal([]byte(out), &h); err != nil {
			t.Fatalf("history --json: %v\n%s", err, out)
		}
		if h.Rollout == nil || h.Rollout.Guard == nil {
			t.Fatalf("no guarded rollout in force: %+v", h.Rollout)
		}
		return h
	}
	if code, out, errs := run(t, nil, "agents", "rollout", "g", "--version", "1", "--percent", "10", "--max-failure-rate", "0.3", "--min-runs", "7",
		"--compare-to-stable=false", "--server", natsURL); code != 0 {
		t.Fatalf("rollout: exit %d, %s %s", code, out, errs)
	}
	if g := guard().Rollout.Guard; g.MaxFailureRate != 0.3 || g.MinRuns != 7 || g.CompareToStable == nil || *g.CompareToStable {
		t.Fatalf("guard after the start: %+v", g)
	}
	if code, out, errs := run(t, nil, "agents", "rollout", "g", "--version", "1", "--percent", "20", "--min-runs", "9", "--server", natsURL); code != 0 {
		t.Fatalf("rollout --min-runs: exit %d, %s %s", code, out, errs)
	}
	h := guard()
	if g := h.Rollout.Guard; h.Rollout.Percent != 20 || g.MaxFailureRate != 0.3 || g.MinRuns != 9 || g.CompareToStable == nil || *g.CompareToStable {
		t.Fatalf("guard after --min-runs alone: %+v at %v%%", g, h.Rollout.Percent)
	}
	if code, out, errs := run(t, nil, "agents", "rollout", "g", "--version", "1", "--percent", "20", "--max-failure-rate", "0.1", "--server", natsURL); code != 0 {
		t.Fatalf("rollout --max-failure-rate: exit %d, %s %s", code, out, errs)
	}
	if g := guard().Rollout.Guard; g.MaxFailureRate != 0.1 || g.MinRuns != 9 || g.CompareToStable == nil || *g.CompareToStable {
		t.Fatalf("guard after --max-failure-rate alone: %+v", g)
	}
}
