package worker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/ghapp"
	"github.com/jetloop/jetloop/internal/ghfake"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/worker"
)

// githubTools are the GitHub tools of one worker process, with its own
// clients (tokens, rate limits).
func githubTools(t *testing.T) worker.ToolMap {
	t.Helper()
	clients, err := ghapp.New(ghapp.Options{Getenv: func(string) string { return "" }, MaxRateLimitWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	m := worker.ToolMap{}
	for _, tool := range tools.GitHub(tools.GitHubConfig{Clients: clients}) {
		m[tool.Spec().Name] = tool
	}
	return m
}

// A probe GitHub rate-limits is asked again once the limit resets, and
// that does not count as a recovery: the interrupted comment is settled
// with the comment GitHub holds, not as "may or may not have run" after
// as many rate-limited lookups as recovery allows attempts.
func TestProbeRateLimitedIsAskedAgain(t *testing.T) {
	e := setup(t)
	fake := ghfake.New(t)
	fake.AddInstallation(3, "octo/repo")
	def := policies.Definition{
		Name: "gh", Tools: []string{"github_comment"},
		GitHub: &ghapp.Settings{AppID: ghfake.AppID, PrivateKeyFile: fake.WriteKey(t, t.TempDir()), BaseURL: fake.URL()},
		Model: scripted(
			policies.ScriptEntry{Text: "Commenting.", ToolCalls: []policies.ScriptToolCall{{Name: "github_comment",
				Args: map[string]any{"repo": "octo/repo", "number": 9, "body": "Looks good."}}}},
			policies.ScriptEntry{Text: "Commented."},
		),
	}
	posted, release := make(chan struct{}), make(chan struct{})
	first := true
	fake.OnCreate(func(string, int64) {
		if first {
			first = false
			close(posted)
			<-release // the worker stops before it hears the answer
		}
	})

	// The first worker loses its NATS connection after GitHub stored the
	// comment and before it settled the call, as if it had died there.
	nc1, js1 := natstest.Connect(t, e.url)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w1, err := worker.New(ctx, js1, worker.Config{ID: "w1", WorkDir: t.TempDir(), Definitions: defs{"gh": def}, Agents: []string{"gh"},
		Tools: githubTools(t), LeaseTTL: 2 * time.Second, AckWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w1.Run(ctx) }()
	ref := e.ref(t, "gh", "s1")
	e.send(t, ref, "comment")
	select {
	case <-posted:
	case <-time.After(30 * time.Second):
		t.Fatal("no comment posted")
	}
	nc1.Close()
	cancel()
	close(release)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the first worker did not stop")
	}
	store, err := record.Open(context.Background(), e.js, e.names)
	if err != nil {
		t.Fatal(err)
	}
	if st, _, err := store.Load(context.Background(), ref); err != nil || st.Pending == nil {
		t.Fatalf("state %+v (%v): want the call's intent left", st, err)
	}

	// The next worker has one recovery attempt, and its probe meets a
	// rate limit that resets in an hour: it must not use the attempt up.
	// A worker started after it (its clients not limited) asks again and
	// finds the comment.
	fake.LimitPrimary(1, time.Now().Add(time.Hour))
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	cfg := worker.Config{ID: "w2", WorkDir: t.TempDir(), Definitions: defs{"gh": def}, Agents: []string{"gh"}, Tools: githubTools(t),
		LeaseTTL: 2 * time.Second, AckWait: 2 * time.Second, MaxRecoveries: 1}
	w2, err := worker.New(ctx2, e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done2 := make(chan error, 1)
	go func() { done2 <- w2.Run(ctx2) }()
	natstest.WaitFor(t, 30*time.Second, func() error {
		if n := fake.RateLimited(); n != 1 {
			return fmt.Errorf("%d rate-limited answers", n)
		}
		return nil
	})
	cancel2()
	if err := <-done2; err != nil {
		t.Fatalf("w2: %v", err)
	}
	cfg.ID, cfg.WorkDir, cfg.Tools = "w3", "", githubTools(t)
	e.start(t, cfg)
	tr := e.waitStatus(t, ref, record.StatusDone)
	comments := fake.Comments("octo/repo", 9)
	if len(comments) != 1 {
		t.Fatalf("%d comments, want 1", len(comments))
	}
	if fake.RateLimited() != 1 {
		t.Fatalf("%d rate-limited answers, want the probe's 1", fake.RateLimited())
	}
	for _, en := range tr.Transcript {
		if en.Kind == record.KindToolResult && (en.IsError || !strings.HasPrefix(en.Result, fmt.Sprintf("posted comment %d ", comments[0].ID))) {
			t.Fatalf("result %q (error %v), want comment %d", en.Result, en.IsError, comments[0].ID)
		}
	}
}
