package api_test

import (
	"strings"
	"testing"

	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/ghapp"
	"github.com/jetloop/jetloop/policies"
)

// apply warns, and still stores, a definition whose GitHub tools have no
// credentials to use; the warning names the settings that would give
// them.
func TestApplyWarnsWithoutGitHubCredentials(t *testing.T) {
	t.Setenv(ghapp.EnvAppID, "")
	t.Setenv(ghapp.EnvToken, "")
	h := start(t, api.Config{})
	def := "name: gh\nmodel: {provider: scripted}\ntools: [github_comment]\n"
	res, err := h.client.Apply(ctx(t), api.ApplyRequest{Files: []api.File{{Name: "gh.yaml", Content: def}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Applied) != 1 || len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "agent gh: github_comment will answer with an error") ||
		!strings.Contains(res.Warnings[0], "JETLOOP_GITHUB_APP_ID") || !strings.Contains(res.Warnings[0], "github.token_env") {
		t.Fatalf("apply: %+v", res)
	}

	// With credentials there is nothing to warn about.
	d := policies.Definition{Name: "gh", Tools: []string{"github_label"}}
	if w := api.KeyWarnings(d, func(k string) string { return map[string]string{ghapp.EnvToken: "t"}[k] }); len(w) != 0 {
		t.Fatalf("warnings with a token: %v", w)
	}
	d.GitHub = &ghapp.Settings{TokenEnv: "MY_TOKEN"}
	if w := api.KeyWarnings(d, func(string) string { return "" }); len(w) != 1 || !strings.Contains(w[0], "MY_TOKEN is not set") {
		t.Fatalf("warnings with an unset token_env: %v", w)
	}
}
