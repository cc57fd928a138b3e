package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

// apply warns, and still stores, a definition whose GitHub tools have no
// credentials to use: the warning names the settings that would give
// them.
func TestApplyWarnsWithoutGitHubCredentials(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.ClientURL())
	if _, err := streams.Provision(t.Context(), js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	def := filepath.Join(t.TempDir(), "gh.yaml")
	if err := os.WriteFile(def, []byte(`name: gh
model: {provider: scripted}
tools: [github_comment]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := run(t, nil, "apply", "--server", srv.ClientURL(), def)
	if code != 0 || !strings.Contains(out, "gh version 1") {
		t.Fatalf("apply: exit %d, %s %s", code, out, errs)
	}
	if !strings.Contains(errs, "warning: agent gh: github_comment will answer with an error") ||
		!strings.Contains(errs, "JETLOOP_GITHUB_APP_ID") || !strings.Contains(errs, "github.token_env") {
		t.Fatalf("stderr %q: want a warning naming the settings", errs)
	}
	// With a token in the environment there is nothing to warn about.
	code, _, errs = run(t, map[string]string{"JETLOOP_GITHUB_TOKEN": "t"}, "apply", "--server", srv.ClientURL(), def)
	if code != 0 || strings.Contains(errs, "warning") {
		t.Fatalf("apply with a token: exit %d, stderr %q", code, errs)
	}
}
