package ghapp_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-github/v89/github"

	"github.com/jetloop/jetloop/ghapp"
	"github.com/jetloop/jetloop/internal/ghfake"
)

func appSettings(t *testing.T, fake *ghfake.Server) ghapp.Settings {
	return ghapp.Settings{AppID: ghfake.AppID, PrivateKeyFile: fake.WriteKey(t, t.TempDir()), BaseURL: fake.URL()}
}

func newClients(t *testing.T, opts ghapp.Options) *ghapp.Clients {
	t.Helper()
	if opts.Getenv == nil {
		opts.Getenv = func(string) string { return "" }
	}
	c, err := ghapp.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func comment(ctx context.Context, c *ghapp.Client, repo string, n int, body string) (*github.IssueComment, error) {
	owner, name, _ := ghapp.SplitRepo(repo)
	cm, _, err := c.Issues.CreateComment(ctx, owner, name, n, &github.IssueComment{Body: &body})
	return cm, err
}

// Twenty sessions of one installation that need a token at the same
// moment cause one token exchange, and all of them post.
func TestRefreshRaceOneExchange(t *testing.T) {
	fake := ghfake.New(t)
	fake.AddInstallation(7, "octo/repo")
	clients := newClients(t, ghapp.Options{})
	s := appSettings(t, fake)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Go(func() {
			<-start
			c, err := clients.For(ctx, s, ghapp.Target{Repo: "octo/repo", Installation: 7})
			if err == nil {
				_, err = comment(ctx, c, "octo/repo", 1, "hello "+string(rune('a'+i)))
			}
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := fake.Exchanges(); n != 1 {
		t.Fatalf("token exchanges: %d, want 1", n)
	}
	if n := len(fake.Comments("octo/repo", 1)); n != 20 {
		t.Fatalf("comments: %d, want 20", n)
	}
}

// Without an installation id the repository's installation is looked up
// (with the App JWT) once, and its token is used.
func TestRepositoryInstallation(t *testing.T) {
	fake := ghfake.New(t)
	fake.AddInstallation(11, "octo/a")
	fake.AddInstallation(12, "octo/b")
	clients := newClients(t, ghapp.Options{})
	s := appSettings(t, fake)
	ctx := context.Background()
	for range 3 {
		c, err := clients.For(ctx, s, ghapp.Target{Repo: "octo/b"})
		if err != nil {
			t.Fatal(err)
		}
		if c.Installation != 12 {
			t.Fatalf("installation %d, want 12", c.Installation)
		}
		if _, err := comment(ctx, c, "octo/b", 3, "x"); err != nil {
			t.Fatal(err)
		}
	}
	if got := fake.Comments("octo/b", 3); len(got) != 3 || got[0].Installation != 12 {
		t.Fatalf("comments %+v", got)
	}
	if n := fake.Exchanges(); n != 1 {
		t.Fatalf("exchanges %d, want 1", n)
	}
	// A repository the App is not installed on.
	if _, err := clients.For(ctx, s, ghapp.Target{Repo: "octo/none"}); err == nil || !strings.Contains(err.Error(), "octo/none") {
		t.Fatalf("err %v, want one naming octo/none", err)
	}
	// An installation's token does not reach another installation's
	// repository: GitHub answers 404.
	c, err := clients.For(ctx, s, ghapp.Target{Repo: "octo/b", Installation: 11})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := comment(ctx, c, "octo/b", 3, "x"); !ghapp.IsNotFound(err) {
		t.Fatalf("err %v, want 404", err)
	}
}

// A key that is not the App's is refused by the JWT check.
func TestWrongKeyRefused(t *testing.T) {
	fake := ghfake.New(t)
	other := ghfake.New(t)
	fake.AddInstallation(7, "octo/repo")
	clients := newClients(t, ghapp.Options{})
	s := ghapp.Settings{AppID: ghfake.AppID, PrivateKeyFile: other.WriteKey(t, t.TempDir()), BaseURL: fake.URL()}
	c, err := clients.For(context.Background(), s, ghapp.Target{Repo: "octo/repo", Installation: 7})
	if err != nil {
		t.Fatal(err)
	}
	_, err = comment(context.Background(), c, "octo/repo", 1, "x")
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("err %v, want a 401 from the token exchange", err)
	}
	if fake.Exchanges() != 0 || len(fake.Comments("", 0)) != 0 {
		t.Fatal("a token was issued to a wrong key")
	}
}

func TestTokenAuth(t *testing.T) {
	fake := ghfake.New(t)
	fake.AddToken("ghp_secret")
	env := map[string]string{"MY_TOKEN": "ghp_secret", ghapp.EnvToken: "ghp_wrong"}
	clients := newClients(t, ghapp.Options{Getenv: func(k string) string { return env[k] }})
	ctx := context.Background()
	c, err := clients.For(ctx, ghapp.Settings{TokenEnv: "MY_TOKEN", BaseURL: fake.URL()}, ghapp.Target{Repo: "o/r"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := comment(ctx, c, "o/r", 5, "hi"); err != nil {
		t.Fatal(err)
	}
	// The deployment's token is used when the agent names none; this one
	// is wrong, and GitHub says so.
	c, err = clients.For(ctx, ghapp.Settings{BaseURL: fake.URL()}, ghapp.Target{Repo: "o/r"})
	if err != nil {
		t.Fatal(err)
	}
	var er *github.ErrorResponse
	if _, err := comment(ctx, c, "o/r", 5, "hi"); !errors.As(err, &er) || er.Response.StatusCode != http.StatusUnauthorized {
		t.Fatalf("err %v, want 401", err)
	}
}

// A rate-limited answer that resets soon is waited out and the request
// sent again, once; other requests of the credential wait with it.
func TestRateLimitWaited(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit func(*ghfake.Server)
	}{
		{"primary 403 with x-ratelimit-reset", func(f *ghfake.Server) { f.LimitPrimary(1, time.Now().Add(time.Second)) }},
		{"secondary 429 with Retry-After", func(f *ghfake.Server) { f.LimitSecondary(1, http.StatusTooManyRequests, time.Second) }},
		{"secondary 403 with Retry-After", func(f *ghfake.Server) { f.LimitSecondary(1, http.StatusForbidden, time.Second) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := ghfake.New(t)
			fake.AddInstallation(7, "octo/repo")
			clients := newClients(t, ghapp.Options{})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := clients.For(ctx, appSettings(t, fake), ghapp.Target{Repo: "octo/repo", Installation: 7})
			if err != nil {
				t.Fatal(err)
			}
			tc.limit(fake)
			cm, err := comment(ctx, c, "octo/repo", 1, "after the limit")
			if err != nil {
				t.Fatal(err)
			}
			if got := fake.Comments("octo/repo", 1); len(got) != 1 || got[0].ID != cm.GetID() {
				t.Fatalf("comments %+v, want the one answered (%d)", got, cm.GetID())
			}
			if fake.RateLimited() != 1 {
				t.Fatalf("rate-limited answers %d, want 1", fake.RateLimited())
			}
		})
	}
}

// A limit that resets later than the request may wait fails at once with
// the reset time, and holds back the credential's next request without
// sending it.
func TestRateLimitTooLong(t *testing.T) {
	fake := ghfake.New(t)
	fake.AddInstallation(7, "octo/repo")
	clients := newClients(t, ghapp.Options{MaxRateLimitWait: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := appSettings(t, fake)
	c, err := clients.For(ctx, s, ghapp.Target{Repo: "octo/repo", Installation: 7})
	if err != nil {
		t.Fatal(err)
	}
	reset := time.Now().Add(time.Hour)
	fake.LimitPrimary(1, reset)
	_, err = comment(ctx, c, "octo/repo", 1, "x")
	var rl *github.RateLimitError
	if !errors.As(err, &rl) {
		t.Fatalf("err %v, want a rate limit error", err)
	}
	before := fake.Requests()
	c2, err := clients.For(ctx, s, ghapp.Target{Repo: "octo/repo", Installation: 7})
	if err != nil {
		t.Fatal(err)
	}
	_, err = comment(ctx, c2, "octo/repo", 1, "y")
	var ours *ghapp.RateLimitError
	if !errors.As(err, &ours) || ours.Reset.Unix() != reset.Unix() {
		t.Fatalf("err %v, want ghapp.RateLimitError until %s", err, reset)
	}
	if fake.Requests() != before {
		t.Fatal("a request was sent while its credential was rate limited")
	}
	if len(fake.Comments("", 0)) != 0 {
		t.Fatal("a comment was posted")
	}
}

// A token is reused until a minute before it expires: with an hour left
// three calls make one exchange; with less than a minute every call needs
// a fresh one.
func TestTokenReusedUntilShortlyBeforeExpiry(t *testing.T) {
	for _, tc := range []struct {
		ttl       time.Duration
		exchanges int
	}{{time.Hour, 1}, {50 * time.Second, 3}} {
		fake := ghfake.New(t)
		fake.AddInstallation(7, "octo/repo")
		fake.SetTokenTTL(tc.ttl)
		clients := newClients(t, ghapp.Options{})
		s := appSettings(t, fake)
		for range 3 {
			c, err := clients.For(context.Background(), s, ghapp.Target{Repo: "octo/repo", Installation: 7})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := comment(context.Background(), c, "octo/repo", 1, "x"); err != nil {
				t.Fatal(err)
			}
		}
		if n := fake.Exchanges(); n != tc.exchanges {
			t.Errorf("token lifetime %s: %d exchanges for 3 calls, want %d", tc.ttl, n, tc.exchanges)
		}
	}
}

// GitHub refuses an installation token past its expiry (the fake as
// GitHub does), and a JWT whose times are off.
func TestExpiredTokenRefused(t *testing.T) {
	fake := ghfake.New(t)
	fake.AddInstallation(7, "octo/repo")
	clients := newClients(t, ghapp.Options{})
	c, err := clients.For(context.Background(), appSettings(t, fake), ghapp.Target{Repo: "octo/repo", Installation: 7})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := comment(context.Background(), c, "octo/repo", 1, "x"); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(2 * time.Hour)
	fake.SetClock(func() time.Time { return later })
	var er *github.ErrorResponse
	if _, err := comment(context.Background(), c, "octo/repo", 1, "y"); !errors.As(err, &er) || er.Response.StatusCode != http.StatusUnauthorized {
		t.Fatalf("err %v, want 401 for an expired token", err)
	}
	// A fresh client's exchange signs a JWT with this machine's clock,
	// which the fake's two hours ahead finds expired.
	c2, err := newClients(t, ghapp.Options{}).For(context.Background(), appSettings(t, fake), ghapp.Target{Repo: "octo/repo", Installation: 7})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := comment(context.Background(), c2, "octo/repo", 1, "z"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("err %v, want the exchange refused", err)
	}
	if n := len(fake.Comments("octo/repo", 1)); n != 1 {
		t.Fatalf("%d comments, want 1", n)
	}
	// Back on time, the refused token is not used again: the next client
	// exchanges a new one.
	fake.SetClock(time.Now)
	before := fake.Exchanges()
	c3, err := clients.For(context.Background(), appSettings(t, fake), ghapp.Target{Repo: "octo/repo", Installation: 7})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := comment(context.Background(), c3, "octo/repo", 1, "again"); err != nil {
		t.Fatal(err)
	}
	if fake.Exchanges() != before+1 {
		t.Fatalf("exchanges %d, want %d: the refused token was kept", fake.Exchanges(), before+1)
	}
}
