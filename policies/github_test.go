package policies_test

import (
	"strings"
	"testing"

	"github.com/jetloop/jetloop/policies"
)

func TestGitHubSettings(t *testing.T) {
	c, err := policies.Parse("gh.yaml", []byte(`name: gh
model: {provider: scripted}
github:
  app_id: 123456
  private_key_file: /etc/jetloop/app.pem
  base_url: https://ghe.example.com/api/v3/
`))
	if err != nil {
		t.Fatal(err)
	}
	if g := c.Definition.GitHub; g == nil || g.AppID != 123456 || g.PrivateKeyFile != "/etc/jetloop/app.pem" || g.BaseURL != "https://ghe.example.com/api/v3/" {
		t.Fatalf("github: %+v", c.Definition.GitHub)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"github:\n  app_id: 5\n", "gh.yaml:4:"},
		{"github:\n  app_id: 5\n", "app_id without a private key"},
		{"github:\n  token_env: TOK\n  app_id: 5\n  private_key_env: K\n", "token_env and app_id"},
		{"github:\n  base_url: ftp://x\n", "base_url"},
		{"github:\n  installation: 5\n", "installation"},
	} {
		_, err := policies.Parse("gh.yaml", []byte("name: gh\nmodel: {provider: scripted}\n"+tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
