package policies_test

import (
	"strings"
	"testing"

	"github.com/jetloop/jetloop/policies"
)

// A prompt that names a field the event lacks renders nothing there, not
// text/template's "<no value>"; a prompt whose rendering could grow with
// the square of the event (nested ranges, templates calling templates) is
// refused when the definition loads.
func TestPromptTemplates(t *testing.T) {
	tests := []struct {
		name, prompt string
		want         string
		refused      string
	}{
		{name: "missing field", prompt: `"Title: {{.data.pull_request.title}}; labels: {{.data.labels}}."`, want: "Title: Fix it; labels: ."},
		{name: "one range", prompt: `"{{range .data.items}}{{.}},{{end}}"`, want: "1,2,"},
		{name: "nested range", prompt: `"{{range .data.items}}{{range $.data.items}}x{{end}}{{end}}"`, refused: "range inside a range"},
		{name: "range in an if in a range", prompt: `"{{range .data.items}}{{if .}}{{range $.data.items}}x{{end}}{{end}}{{end}}"`, refused: "range inside a range"},
		{name: "define", prompt: `"{{define \"a\"}}x{{end}}{{template \"a\"}}"`, refused: "not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := policies.Parse("a.yaml", []byte(`name: a
model: {provider: scripted}
triggers:
  - name: t
    when: "true"
    prompt: `+tt.prompt+"\n"))
			if tt.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tt.refused) || !strings.Contains(err.Error(), "a.yaml:6:") {
					t.Fatalf("err %v, want a.yaml:6: ... %q", err, tt.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			vars := githubEvent(t, "x", `{"pull_request": {"title": "Fix it"}, "items": [1, 2]}`)
			got, err := c.Triggers[0].RenderPrompt(vars)
			if err != nil || got != tt.want {
				t.Fatalf("prompt %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
