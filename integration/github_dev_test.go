package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/ghapp"
	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/internal/ghfake"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
)

// toolResults returns the results of a transcript's calls of tool.
func toolResults(tr []map[string]any, tool string) []map[string]any {
	var out []map[string]any
	for _, e := range tr {
		if e["kind"] == "tool_result" && e["name"] == tool {
			out = append(out, e)
		}
	}
	return out
}

// TestDevGitHubCommentOnceAcrossKill is the acceptance of agents that act
// back, on `jetloop dev` as users run it, with the example pr-reviewer's
// github: pointed at a fake GitHub: a signed pull_request opened delivery
// leads to one comment on the pull request carrying the call's marker,
// posted with the App's installation token; kill -9 of dev right after
// GitHub stored the comment (before the answer reached the worker), then
// a restart, adds none: recovery finds the comment by its marker and the
// transcript shows its real id; a redelivery of the delivery adds none.
// The example mention-responder answers a comment in the thread.
func TestDevGitHubCommentOnceAcrossKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop")
	}
	bin := buildJetloop(t)
	data := t.TempDir()
	t.Setenv("JETLOOP_GITHUB_SECRET", ingestSecret)
	t.Setenv("JETLOOP_LEASE_TTL", "2s")
	t.Setenv("JETLOOP_ACK_WAIT", "2s")
	t.Setenv(ghapp.EnvAppID, "")
	t.Setenv(ghapp.EnvToken, "")

	fake := ghfake.New(t)
	fake.AddInstallation(1, "Codertocat/Hello-World")
	key := fake.WriteKey(t, t.TempDir())
	posted, release := make(chan int64, 1), make(chan struct{})
	first := true
	fake.OnCreate(func(kind string, id int64) {
		if kind != "comment" || !first {
			return
		}
		first = false
		posted <- id
		<-release // the worker dies before it hears the answer
	})

	p := startProc(t, bin, devArgs(data)...)
	ready := p.waitReady(time.Minute)
	url, base := ready["nats"], ready["http"]
	for _, f := range []string{"../examples/pr-reviewer.yaml", "../examples/mention-responder.yaml"} {
		c, err := policies.LoadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		def := c.Definition
		def.GitHub = &ghapp.Settings{AppID: ghfake.AppID, PrivateKeyFile: key, BaseURL: fake.URL()}
		putAgent(t, url, def)
	}

	body, err := os.ReadFile("../ingest/testdata/github/pull_request/opened.payload.json")
	if err != nil {
		t.Fatal(err)
	}
	sig := ingest.Sign([]byte(ingestSecret), body)
	if status, out := postWebhook(t, base, "pull_request", "gh-1", body, sig); status != http.StatusAccepted {
		t.Fatalf("delivery: %d %v", status, out)
	}
	var id int64
	select {
	case id = <-posted:
	case <-time.After(time.Minute):
		t.Fatalf("no comment posted within a minute\ndev stderr:\n%s", p.Stderr())
	}
	_ = p.cmd.Process.Kill()
	_ = p.wait(time.Minute)
	close(release)

	p = startProc(t, bin, devArgs(data)...)
	ready = p.waitReady(time.Minute)
	url, base = ready["nats"], ready["http"]
	const ref = "pr-reviewer/Codertocat/Hello-World#2"
	var s showJSON
	natstest.WaitFor(t, time.Minute, func() error {
		var err error
		if s, err = show(t, bin, url, ref); err != nil {
			return err
		}
		if s.Status != "done" {
			return fmt.Errorf("status %s", s.Status)
		}
		return nil
	})
	comments := fake.Comments("Codertocat/Hello-World", 2)
	if len(comments) != 1 || comments[0].ID != id || comments[0].Installation != 1 {
		t.Fatalf("comments %+v, want the one posted before the kill (%d)", comments, id)
	}
	res := toolResults(s.Transcript, "github_comment")
	if len(res) != 1 || res[0]["is_error"] != false || !strings.Contains(res[0]["result"].(string), fmt.Sprintf("posted comment %d ", id)) {
		b, _ := json.MarshalIndent(s.Transcript, "", "  ")
		t.Fatalf("github_comment results %v, want one naming comment %d\n%s", res, id, b)
	}
	var call string
	for _, e := range s.Transcript {
		if e["kind"] == "tool_call" && e["name"] == "github_comment" {
			call = e["call_id"].(string)
		}
	}
	if want := fmt.Sprintf("<!-- jetloop:pr-reviewer/Codertocat/Hello-World#2/%s -->", call); !strings.HasSuffix(comments[0].Body, want) {
		t.Fatalf("comment body %q lacks the marker %s", comments[0].Body, want)
	}

	// A redelivery is a duplicate and posts nothing.
	if status, out := postWebhook(t, base, "pull_request", "gh-1", body, sig); status != http.StatusAccepted || out["duplicate"] != true {
		t.Fatalf("redelivery: %d %v", status, out)
	}

	// mention-responder answers in the thread.
	var comment map[string]any
	raw, err := os.ReadFile("../ingest/testdata/github/issue_comment/created.payload.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &comment); err != nil {
		t.Fatal(err)
	}
	comment["comment"].(map[string]any)["body"] = "@jetloop can you look at this?"
	comment["installation"] = map[string]any{"id": 1}
	cbody, _ := json.Marshal(comment)
	if status, out := postWebhook(t, base, "issue_comment", "gh-2", cbody, ingest.Sign([]byte(ingestSecret), cbody)); status != http.StatusAccepted {
		t.Fatalf("issue_comment delivery: %d %v", status, out)
	}
	number := int(comment["issue"].(map[string]any)["number"].(float64))
	if err := natstest.Poll(t.Context(), time.Minute, func() error {
		if n := len(fake.Comments("Codertocat/Hello-World", number)); n != 1 {
			return fmt.Errorf("%d comments on #%d", n, number)
		}
		return nil
	}); err != nil {
		st, _ := jetloopCmd(t, bin, "status", "--server", url)
		ev, _ := jetloopCmd(t, bin, "events", "--server", url)
		t.Fatalf("%v\nstatus:\n%s\nevents:\n%s\ndev stderr:\n%s", err, st, ev, p.Stderr())
	}
	if got := fake.Comments("Codertocat/Hello-World", number)[0].Body; !strings.HasPrefix(got, "Thanks for the mention") {
		t.Fatalf("answer %q", got)
	}
	if n := len(fake.Comments("Codertocat/Hello-World", 2)); n != 1 {
		t.Fatalf("%d comments on the pull request after the redelivery, want 1", n)
	}
}

// TestDevGitHubOneTokenForEverySession shows that every session of a
// worker uses one cache of installation tokens: twelve pull requests
// delivered at once to `jetloop dev` run twelve sessions, each posts its
// comment with the installation's token, and GitHub is asked for that
// token once (ghapp's TestRefreshRaceOneExchange shows the single flight
// of one refresh asked by many at the same moment).
func TestDevGitHubOneTokenForEverySession(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop")
	}
	bin := buildJetloop(t)
	t.Setenv("JETLOOP_GITHUB_SECRET", ingestSecret)
	t.Setenv(ghapp.EnvAppID, "")
	t.Setenv(ghapp.EnvToken, "")
	fake := ghfake.New(t)
	fake.AddInstallation(1, "Codertocat/Hello-World")
	key := fake.WriteKey(t, t.TempDir())

	p := startProc(t, bin, devArgs(t.TempDir())...)
	ready := p.waitReady(time.Minute)
	url, base := ready["nats"], ready["http"]
	c, err := policies.LoadFile("../examples/pr-reviewer.yaml")
	if err != nil {
		t.Fatal(err)
	}
	def := c.Definition
	def.GitHub = &ghapp.Settings{AppID: ghfake.AppID, PrivateKeyFile: key, BaseURL: fake.URL()}
	putAgent(t, url, def)

	raw, err := os.ReadFile("../ingest/testdata/github/pull_request/opened.payload.json")
	if err != nil {
		t.Fatal(err)
	}
	const prs = 12
	errs := make(chan error, prs)
	for n := 100; n < 100+prs; n++ {
		var payload map[string]any
		if err := json.Unmarshal(raw, &payload); err != nil {
			t.Fatal(err)
		}
		payload["number"] = n
		payload["pull_request"].(map[string]any)["number"] = n
		body, _ := json.Marshal(payload)
		go func() {
			status, out, err := postWebhookStatus(base, "pull_request", fmt.Sprintf("gh-many-%d", n), body, ingest.Sign([]byte(ingestSecret), body))
			if err != nil {
				errs <- err
				return
			}
			if status != http.StatusAccepted {
				errs <- fmt.Errorf("delivery of #%d: %d %v", n, status, out)
				return
			}
			errs <- nil
		}()
	}
	for range prs {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatal("deliveries not answered within a minute")
		}
	}
	if err := natstest.Poll(t.Context(), 2*time.Minute, func() error {
		for n := 100; n < 100+prs; n++ {
			if got := len(fake.Comments("Codertocat/Hello-World", n)); got != 1 {
				return fmt.Errorf("%d comments on #%d", got, n)
			}
		}
		return nil
	}); err != nil {
		st, _ := jetloopCmd(t, bin, "status", "--server", url)
		t.Fatalf("%v\nstatus:\n%s\ndev stderr:\n%s", err, st, p.Stderr())
	}
	for _, cm := range fake.Comments("", 0) {
		if cm.Installation != 1 {
			t.Fatalf("comment %+v not posted with installation 1's token", cm)
		}
	}
	if n := fake.Exchanges(); n != 1 {
		t.Fatalf("%d token exchanges for %d sessions of one installation, want 1", n, prs)
	}
}
