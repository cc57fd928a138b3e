package tools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/ghapp"
	"github.com/jetloop/jetloop/internal/ghfake"
	"github.com/jetloop/jetloop/tools"
)

const sha = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"

type ghEnv struct {
	fake *ghfake.Server
	reg  *tools.Registry
	set  ghapp.Settings
}

func newGHEnv(t *testing.T, env map[string]string) ghEnv {
	t.Helper()
	fake := ghfake.New(t)
	fake.AddInstallation(1, "Codertocat/Hello-World")
	clients, err := ghapp.New(ghapp.Options{Getenv: func(k string) string { return env[k] }, MaxRateLimitWait: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(tools.RegistryOptions{}, tools.GitHub(tools.GitHubConfig{Clients: clients})...)
	if err != nil {
		t.Fatal(err)
	}
	return ghEnv{fake: fake, reg: reg, set: ghapp.Settings{AppID: ghfake.AppID, PrivateKeyFile: fake.WriteKey(t, t.TempDir()), BaseURL: fake.URL()}}
}

func (e ghEnv) call(id, args string) tools.Call {
	return tools.Call{ID: id, Agent: "pr-reviewer", Session: "Codertocat/Hello-World#2", Args: json.RawMessage(args),
		Started: time.Now(), GitHub: e.set,
		Thread: &events.Thread{Repo: "Codertocat/Hello-World", Number: 2, Installation: 1, HeadSHA: sha}}
}

func run(t *testing.T, reg *tools.Registry, name string, c tools.Call) tools.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := reg.Run(ctx, name, c)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func probe(t *testing.T, reg *tools.Registry, name string, c tools.Call) (tools.Result, bool) {
	t.Helper()
	res, found, err := reg.Probe(context.Background(), name, c)
	if err != nil {
		t.Fatalf("probe %s: %v", name, err)
	}
	return res, found
}

func TestGitHubCommentAndProbe(t *testing.T) {
	e := newGHEnv(t, nil)
	if got := e.reg.Class("github_comment"); got != tools.ClassProbe {
		t.Fatalf("class %s, want probe", got)
	}
	c := e.call("call_7", `{"body": "LGTM."}`)
	if _, found := probe(t, e.reg, "github_comment", c); found {
		t.Fatal("probe found a comment before the call")
	}
	res := run(t, e.reg, "github_comment", c)
	posted := e.fake.Comments("Codertocat/Hello-World", 2)
	if res.IsError || len(posted) != 1 {
		t.Fatalf("result %+v, comments %+v", res, posted)
	}
	want := "<!-- jetloop:pr-reviewer/Codertocat/Hello-World#2/call_7 -->"
	if !strings.HasPrefix(posted[0].Body, "LGTM.") || !strings.HasSuffix(posted[0].Body, want) {
		t.Fatalf("body %q, want the text and the marker %s", posted[0].Body, want)
	}
	if !strings.Contains(res.Content, fmt.Sprint(posted[0].ID)) || !strings.Contains(res.Content, "#issuecomment-") {
		t.Fatalf("result %q does not name comment %d and its URL", res.Content, posted[0].ID)
	}
	got, found := probe(t, e.reg, "github_comment", c)
	if !found || got.Content != res.Content {
		t.Fatalf("probe: found %v %q, want %q", found, got.Content, res.Content)
	}
	// Another call's marker is not this one's.
	if _, found := probe(t, e.reg, "github_comment", e.call("call_8", `{"body": "LGTM."}`)); found {
		t.Fatal("probe of another call found this one's comment")
	}
	// An explicit target.
	res = run(t, e.reg, "github_comment", e.call("call_9", `{"repo": "Codertocat/Hello-World", "number": 5, "body": "x"}`))
	if res.IsError || len(e.fake.Comments("Codertocat/Hello-World", 5)) != 1 {
		t.Fatalf("explicit target: %+v", res)
	}
}

// Probes page through a long thread.
func TestGitHubCommentProbePages(t *testing.T) {
	e := newGHEnv(t, nil)
	for i := range 230 {
		if res := run(t, e.reg, "github_comment", e.call(fmt.Sprintf("c%d", i), `{"body": "n"}`)); res.IsError {
			t.Fatal(res.Content)
		}
	}
	if _, found := probe(t, e.reg, "github_comment", e.call("c229", `{"body": "n"}`)); !found {
		t.Fatal("the last comment of three pages was not found")
	}
	if _, found := probe(t, e.reg, "github_comment", e.call("c230", `{"body": "n"}`)); found {
		t.Fatal("found a comment never posted")
	}
}

func TestGitHubNoCredentials(t *testing.T) {
	e := newGHEnv(t, nil)
	c := e.call("call_1", `{"body": "x"}`)
	c.GitHub = ghapp.Settings{}
	res := run(t, e.reg, "github_comment", c)
	if !res.IsError || !strings.Contains(res.Content, "JETLOOP_GITHUB_APP_ID") || !strings.Contains(res.Content, "github.app_id") {
		t.Fatalf("result %+v, want an error naming the settings", res)
	}
	c.Thread = nil
	c.GitHub = e.set
	if res := run(t, e.reg, "github_comment", c); !res.IsError || !strings.Contains(res.Content, "pass repo") {
		t.Fatalf("without a thread: %+v", res)
	}
}

func TestGitHubReview(t *testing.T) {
	e := newGHEnv(t, nil)
	c := e.call("r1", `{"event": "REQUEST_CHANGES", "body": "Please add a test.", "comments": [{"path": "README.md", "line": 3, "body": "typo"}]}`)
	res := run(t, e.reg, "github_review", c)
	rv := e.fake.Reviews("Codertocat/Hello-World", 2)
	if res.IsError || len(rv) != 1 || rv[0].State != "CHANGES_REQUESTED" || len(rv[0].Comments) != 1 || !strings.Contains(rv[0].Body, tools.MarkerComment(c)) {
		t.Fatalf("result %+v, reviews %+v", res, rv)
	}
	if got, found := probe(t, e.reg, "github_review", c); !found || got.Content != res.Content {
		t.Fatalf("probe %v %q", found, got.Content)
	}
	if res := run(t, e.reg, "github_review", e.call("r2", `{"event": "COMMENT"}`)); !res.IsError || !strings.Contains(res.Content, "body is required") {
		t.Fatalf("comment without body: %+v", res)
	}
	if res := run(t, e.reg, "github_review", e.call("r3", `{"event": "MERGE"}`)); !res.IsError || !strings.Contains(res.Content, "event") {
		t.Fatalf("bad event: %+v", res)
	}
	if res := run(t, e.reg, "github_review", e.call("r4", `{"event": "APPROVE"}`)); res.IsError {
		t.Fatalf("approve without body: %+v", res)
	}
}

func TestGitHubCheck(t *testing.T) {
	e := newGHEnv(t, nil)
	c := e.call("k1", `{"name": "jetloop review", "status": "in_progress", "summary": "Reviewing."}`)
	if _, found := probe(t, e.reg, "github_check", c); found {
		t.Fatal("found before the call")
	}
	res := run(t, e.reg, "github_check", c)
	runs := e.fake.CheckRuns("Codertocat/Hello-World")
	if res.IsError || len(runs) != 1 || runs[0].HeadSHA != sha || runs[0].ExternalID != tools.Marker(c) || runs[0].Status != "in_progress" {
		t.Fatalf("result %+v, runs %+v", res, runs)
	}
	if got, found := probe(t, e.reg, "github_check", c); !found || got.Content != res.Content {
		t.Fatalf("probe %v %q, want %q", found, got.Content, res.Content)
	}
	upd := run(t, e.reg, "github_check", e.call("k2", fmt.Sprintf(`{"check_run_id": %d, "conclusion": "success", "summary": "Done."}`, runs[0].ID)))
	runs = e.fake.CheckRuns("Codertocat/Hello-World")
	if upd.IsError || runs[0].Conclusion != "success" || runs[0].Status != "completed" || runs[0].Summary != "Done." {
		t.Fatalf("update %+v, runs %+v", upd, runs)
	}
	if res := run(t, e.reg, "github_check", e.call("k3", `{"summary": "x"}`)); !res.IsError || !strings.Contains(res.Content, "name is required") {
		t.Fatalf("no name: %+v", res)
	}
}

func TestGitHubLabel(t *testing.T) {
	e := newGHEnv(t, nil)
	if e.reg.Class("github_label") != tools.ClassSafe {
		t.Fatal("github_label is not replay-safe")
	}
	for range 2 {
		if res := run(t, e.reg, "github_label", e.call("l1", `{"add": ["bug", "triage"]}`)); res.IsError {
			t.Fatal(res.Content)
		}
	}
	if got := e.fake.Labels("Codertocat/Hello-World", 2); len(got) != 2 {
		t.Fatalf("labels %v", got)
	}
	for range 2 {
		res := run(t, e.reg, "github_label", e.call("l2", `{"remove": ["triage"]}`))
		if res.IsError || !strings.HasSuffix(res.Content, ": bug") {
			t.Fatalf("remove: %+v", res)
		}
	}
	if res := run(t, e.reg, "github_label", e.call("l3", `{}`)); !res.IsError {
		t.Fatal("an empty call was accepted")
	}
}

// A rate limit that resets later than a request may wait is answered at
// once, saying nothing was done; one that resets soon is waited out.
func TestGitHubRateLimitResult(t *testing.T) {
	e := newGHEnv(t, nil)
	// Prime the token so that the limit hits the comment.
	if res := run(t, e.reg, "github_label", e.call("l", `{"add": ["x"]}`)); res.IsError {
		t.Fatal(res.Content)
	}
	e.fake.LimitPrimary(1, time.Now().Add(time.Hour))
	res := run(t, e.reg, "github_comment", e.call("c1", `{"body": "x"}`))
	if !res.IsError || !strings.Contains(res.Content, "rate limit") || !strings.Contains(res.Content, "nothing was") {
		t.Fatalf("result %+v", res)
	}
	if n := len(e.fake.Comments("", 0)); n != 0 {
		t.Fatalf("%d comments posted", n)
	}
}

// GitHub stores a write whose answer never reaches the worker (the
// request times out, the connection drops): the tool looks for the
// call's marker before it answers, so the model hears that the comment,
// review or check run is there, with its id, instead of a failure it
// would make again, posting twice.
func TestGitHubAnswerLostAfterTheWrite(t *testing.T) {
	fake := ghfake.New(t)
	fake.AddInstallation(1, "Codertocat/Hello-World")
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	fake.OnCreate(func(string, int64) { <-release }) // stored; the answer waits
	clients, err := ghapp.New(ghapp.Options{Getenv: func(string) string { return "" }, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(tools.RegistryOptions{}, tools.GitHub(tools.GitHubConfig{Clients: clients})...)
	if err != nil {
		t.Fatal(err)
	}
	e := ghEnv{fake: fake, reg: reg, set: ghapp.Settings{AppID: ghfake.AppID, PrivateKeyFile: fake.WriteKey(t, t.TempDir()), BaseURL: fake.URL()}}
	for _, tc := range []struct {
		tool, args string
		count      func() int
	}{
		{"github_comment", `{"body": "LGTM."}`, func() int { return len(fake.Comments("Codertocat/Hello-World", 2)) }},
		{"github_review", `{"event": "COMMENT", "body": "Nice."}`, func() int { return len(fake.Reviews("Codertocat/Hello-World", 2)) }},
		{"github_check", `{"name": "jetloop", "conclusion": "success", "summary": "ok"}`, func() int { return len(fake.CheckRuns("Codertocat/Hello-World")) }},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			res := run(t, e.reg, tc.tool, e.call("lost-"+tc.tool, tc.args))
			if n := tc.count(); n != 1 {
				t.Fatalf("%d stored, want 1", n)
			}
			if res.IsError || !strings.Contains(res.Content, "github.com/") {
				t.Fatalf("result %+v, want the stored write with its URL", res)
			}
		})
	}
}

// A marker is no secret (a call id is the model's, or the runtime's
// call_<n>): a comment or review by someone else carrying the marker of a
// call that never ran, or another App's check run with it as external_id,
// is not the call's effect, and its probe says not found, so the call is
// made once rather than settled with a write it never made.
func TestGitHubProbeReadsOnlyItsOwnWrites(t *testing.T) {
	e := newGHEnv(t, nil)
	const repo = "Codertocat/Hello-World"
	c := e.call("call_3", `{"body": "x"}`)
	e.fake.AddComment(repo, 2, "mallory", "quoting: "+tools.MarkerComment(c))
	if _, found := probe(t, e.reg, "github_comment", c); found {
		t.Fatal("a comment by someone else settled the call")
	}
	rc := e.call("call_4", `{"event": "COMMENT", "body": "x"}`)
	e.fake.AddReview(repo, 2, "mallory", tools.MarkerComment(rc))
	if _, found := probe(t, e.reg, "github_review", rc); found {
		t.Fatal("a review by someone else settled the call")
	}
	kc := e.call("call_5", `{"name": "jetloop", "summary": "x"}`)
	e.fake.AddCheckRun(repo, "jetloop", sha, tools.Marker(kc), 77)
	if _, found := probe(t, e.reg, "github_check", kc); found {
		t.Fatal("another App's check run settled the call")
	}
	// The tool's own writes are found, past the others'.
	for _, w := range []struct{ tool string }{{"github_comment"}, {"github_review"}, {"github_check"}} {
		call := map[string]tools.Call{"github_comment": c, "github_review": rc, "github_check": kc}[w.tool]
		res := run(t, e.reg, w.tool, call)
		if got, found := probe(t, e.reg, w.tool, call); !found || got.Content != res.Content {
			t.Fatalf("%s: probe found %v %q, want %q", w.tool, found, got.Content, res.Content)
		}
	}
}

// With a token the tool writes as the token's user (GET /user): its own
// comment is found, someone else's with the marker is not.
func TestGitHubProbeWithAToken(t *testing.T) {
	e := newGHEnv(t, map[string]string{"TOK": "ghp_probe"})
	e.fake.AddToken("ghp_probe")
	e.set = ghapp.Settings{TokenEnv: "TOK", BaseURL: e.fake.URL()}
	c := e.call("call_1", `{"body": "x"}`)
	e.fake.AddComment("Codertocat/Hello-World", 2, "mallory", tools.MarkerComment(c))
	if _, found := probe(t, e.reg, "github_comment", c); found {
		t.Fatal("a comment by someone else settled the call")
	}
	res := run(t, e.reg, "github_comment", c)
	if got, found := probe(t, e.reg, "github_comment", c); !found || got.Content != res.Content {
		t.Fatalf("probe found %v %q, want %q", found, got.Content, res.Content)
	}
	if cs := e.fake.Comments("Codertocat/Hello-World", 2); cs[len(cs)-1].Author != ghfake.TokenLogin {
		t.Fatalf("posted as %q", cs[len(cs)-1].Author)
	}
}

// An App's installation token given as a token has no user (GET /user
// answers 403): the probe then takes a bot's write with the marker as the
// call's, and still no person's.
func TestGitHubProbeWithAnInstallationToken(t *testing.T) {
	env := map[string]string{}
	e := newGHEnv(t, env)
	env["TOK"] = e.fake.IssueToken(1)
	e.set = ghapp.Settings{TokenEnv: "TOK", BaseURL: e.fake.URL()}
	c := e.call("call_1", `{"body": "x"}`)
	e.fake.AddComment("Codertocat/Hello-World", 2, "mallory", tools.MarkerComment(c))
	if _, found := probe(t, e.reg, "github_comment", c); found {
		t.Fatal("a comment by a person settled the call")
	}
	res := run(t, e.reg, "github_comment", c)
	if got, found := probe(t, e.reg, "github_comment", c); !found || got.Content != res.Content {
		t.Fatalf("probe found %v %q, want %q", found, got.Content, res.Content)
	}
}
