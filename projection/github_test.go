package projection_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/projection"
)

// fixtures are real deliveries from the octokit/webhooks examples (MIT,
// testdata/github/LICENSE.octokit-webhooks).
const fixtures = "testdata/github"

func load(t *testing.T, rel string) ([]byte, any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtures, rel))
	if err != nil {
		t.Fatal(err)
	}
	v, err := policies.ParseJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	return b, v
}

// typeOf is the CloudEvents type ingest gives a fixture: its folder is
// the X-GitHub-Event name, the body's action the rest.
func typeOf(rel string, data any) string {
	name := filepath.Base(filepath.Dir(rel))
	action, _ := data.(map[string]any)["action"].(string)
	if action == "" {
		return projection.GitHubPrefix + name
	}
	return projection.GitHubPrefix + name + "." + action
}

// Every real delivery projects to a small JSON object naming the event,
// its action and repository, far smaller than the body it stands for.
func TestEveryFixtureProjects(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(fixtures, "*", "*.json"))
	if err != nil || len(files) < 30 {
		t.Fatalf("%d fixtures, %v", len(files), err)
	}
	for _, f := range files {
		rel, _ := filepath.Rel(fixtures, f)
		t.Run(rel, func(t *testing.T) {
			raw, data := load(t, rel)
			typ := typeOf(rel, data)
			p, ok := projection.GitHub(typ, data)
			if !ok {
				t.Fatalf("%s: no projection", typ)
			}
			name, _, _ := projection.GitHubKind(typ)
			if p["event"] != name {
				t.Errorf("event %v, want %s", p["event"], name)
			}
			if _, has := data.(map[string]any)["repository"]; has && p["repository"] == "" {
				t.Errorf("no repository")
			}
			b, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > len(raw)/4 || len(b) > 4<<10 {
				t.Errorf("projection is %d bytes of a %d-byte body: %s", len(b), len(raw), b)
			}
		})
	}
}

func TestProjectionsByKind(t *testing.T) {
	tests := []struct {
		file string
		want map[string]any
		not  []string
	}{
		{file: "pull_request/opened.payload.json", want: map[string]any{
			"event": "pull_request", "action": "opened", "repository": "Codertocat/Hello-World", "number": int64(2),
			"title": "Update the README with new information.", "author": "Codertocat", "url": "https://github.com/Codertocat/Hello-World/pull/2",
			"body": "This is a pretty simple change that we need to pull into master.", "base": "master", "head": "changes", "state": "open",
		}, not: []string{"before"}},
		{file: "pull_request/synchronize.payload.json", want: map[string]any{
			"action": "synchronize", "number": int64(2), "before": "f95f852bd8fca8fcc58a9a2d6c842781e32a215e", "after": "ec26c3e57ca3a959ca5aad62de7213c562f8c821",
		}, not: []string{"body"}},
		{file: "pull_request/opened.with-null-body.json", want: map[string]any{"action": "opened"}, not: []string{"body"}},
		{file: "pull_request/labeled.payload.json", want: map[string]any{"action": "labeled", "label": "bug"}},
		{file: "pull_request/closed.payload.json", want: map[string]any{"action": "closed", "state": "closed"}},
		{file: "issue_comment/created.payload.json", want: map[string]any{"event": "issue_comment", "number": int64(1), "title": "Spelling error in the README file"}},
		{file: "push/with-new-branch.payload.json", want: map[string]any{"event": "push", "created": true}},
		{file: "check_run/completed.payload.json", want: map[string]any{"event": "check_run", "action": "completed"}},
		{file: "workflow_run/completed.with-pull-requests.payload.json", want: map[string]any{"event": "workflow_run"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			_, data := load(t, tt.file)
			p, ok := projection.GitHub(typeOf(tt.file, data), data)
			if !ok {
				t.Fatal("no projection")
			}
			for k, v := range tt.want {
				if p[k] != v {
					t.Errorf("%s = %#v, want %#v (%v)", k, p[k], v, p)
				}
			}
			for _, k := range tt.not {
				if _, has := p[k]; has {
					t.Errorf("has %s: %v", k, p[k])
				}
			}
		})
	}
	_, data := load(t, "issue_comment/created.payload.json")
	p, _ := projection.GitHub("com.github.issue_comment.created", data)
	if c, _ := p["comment"].(map[string]any); c["author"] != "Codertocat" || !strings.Contains(c["body"].(string), "You are totally right") {
		t.Errorf("comment %v", p["comment"])
	}
	_, data = load(t, "check_run/completed.payload.json")
	p, _ = projection.GitHub("com.github.check_run.completed", data)
	if c, _ := p["check_run"].(map[string]any); c["conclusion"] != "success" || c["name"] != "Octocoders-linter" || len(c["pull_requests"].([]any)) != 1 {
		t.Errorf("check_run %v", p["check_run"])
	}
	_, data = load(t, "workflow_run/completed.with-pull-requests.payload.json")
	p, _ = projection.GitHub("com.github.workflow_run.completed", data)
	if w, _ := p["workflow_run"].(map[string]any); w["conclusion"] != "success" || w["pull_requests"].([]any)[0] != int64(2) {
		t.Errorf("workflow_run %v", p["workflow_run"])
	}
}

// A long body is cut to BodyBytes on a rune boundary, with the size of
// what was left out; a commit list to MaxCommits.
func TestBounds(t *testing.T) {
	long := strings.Repeat("é", projection.BodyBytes)
	data := map[string]any{"action": "opened", "pull_request": map[string]any{"number": int64(1), "body": long}}
	p, _ := projection.GitHub("com.github.pull_request.opened", data)
	b := p["body"].(string)
	if len(b) > projection.BodyBytes+32 || !strings.Contains(b, "bytes more]") || !strings.HasPrefix(b, "éé") {
		t.Errorf("body %d bytes: %q", len(b), b[len(b)-40:])
	}
	var commits []any
	for range 50 {
		commits = append(commits, map[string]any{"id": "0123456789abcdef", "message": "fix\n\nlong story"})
	}
	p, _ = projection.GitHub("com.github.push", map[string]any{"ref": "refs/heads/main", "commits": commits})
	if got := len(p["commits"].([]any)); got != projection.MaxCommits || p["commits_not_listed"] != 30 {
		t.Errorf("%d commits listed, %v not", got, p["commits_not_listed"])
	}
	if c := p["commits"].([]any)[0].(map[string]any); c["message"] != "fix" || c["id"] != "0123456789ab" {
		t.Errorf("commit %v", c)
	}
	if _, ok := projection.GitHub("dev.jetloop.tick", map[string]any{}); ok {
		t.Error("a tick projected")
	}
	if _, ok := projection.GitHub("com.github.push", "text"); ok {
		t.Error("text data projected")
	}
}

func TestText(t *testing.T) {
	raw, data := load(t, "pull_request/synchronize.payload.json")
	ev := projection.Event{Type: "com.github.pull_request.synchronize", Source: "https://github.com/Codertocat/Hello-World", Subject: "pull/2",
		ContentType: "application/json", Data: raw, Parsed: data}
	body, mode := projection.Default(ev)
	if mode != projection.Projected {
		t.Fatalf("mode %s", mode)
	}
	text := projection.Text(ev, body, mode, 57, true)
	if !strings.HasPrefix(text, "Event com.github.pull_request.synchronize from https://github.com/Codertocat/Hello-World about pull/2:\n{") ||
		!strings.HasSuffix(text, `read_event {"seq": 57} reads all of it]`) || len(text) > len(raw)/4 {
		t.Errorf("text %d bytes: %s", len(text), text)
	}
	if text := projection.Text(ev, body, mode, 57, false); strings.Contains(text, "read_event") {
		t.Errorf("text names read_event for an agent without it: %s", text)
	}
	req := projection.Event{Type: "dev.jetloop.request", Request: true, ContentType: "application/json", Data: []byte(`{"text":"hi"}`)}
	body, mode = projection.Default(req)
	if got := projection.Text(req, body, mode, 3, true); got != "hi" || mode != projection.Full {
		t.Errorf("request %q %s", got, mode)
	}
}
