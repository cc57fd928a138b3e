package ghapp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v89/github"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Options.
const (
	DefaultTimeout          = 30 * time.Second
	DefaultMaxRateLimitWait = 2 * time.Minute
	// DefaultInstallationTTL is how long the installation found for a
	// repository is reused.
	DefaultInstallationTTL = 10 * time.Minute
)

// Options configure Clients. The zero value is usable.
type Options struct {
	// Transport carries every request (default a clone of
	// http.DefaultTransport).
	Transport http.RoundTripper
	// Timeout bounds one HTTP request (default DefaultTimeout).
	Timeout time.Duration
	// MaxRateLimitWait is the longest a request waits for a rate limit to
	// reset before it fails (default DefaultMaxRateLimitWait).
	MaxRateLimitWait time.Duration
	// InstallationTTL is how long a repository's installation is cached
	// (default DefaultInstallationTTL).
	InstallationTTL time.Duration
	// Getenv and ReadFile read the deployment's defaults and key files
	// (default os.Getenv and os.ReadFile).
	Getenv   func(string) string
	ReadFile func(string) ([]byte, error)
	// Logger receives a line per token exchange and rate limit (default
	// slog.Default()).
	Logger *slog.Logger
	// Metrics registers the collectors when set.
	Metrics prometheus.Registerer
}

func (o *Options) setDefaults() {
	if o.Transport == nil {
		o.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxRateLimitWait <= 0 {
		o.MaxRateLimitWait = DefaultMaxRateLimitWait
	}
	if o.InstallationTTL <= 0 {
		o.InstallationTTL = DefaultInstallationTTL
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.ReadFile == nil {
		o.ReadFile = os.ReadFile
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Clients hands out GitHub clients and keeps what they share across the
// sessions of a worker: the installation tokens, the installations of
// repositories, and the rate limits each credential is under. It is safe
// for concurrent use.
type Clients struct {
	opts    Options
	metrics *metrics

	mu    sync.Mutex
	creds map[string]*credential // by credentialKey
	repos map[string]*repoInstallation
}

// New returns Clients with opts.
func New(opts Options) (*Clients, error) {
	opts.setDefaults()
	c := &Clients{opts: opts, metrics: newMetrics(), creds: map[string]*credential{}, repos: map[string]*repoInstallation{}}
	if opts.Metrics != nil {
		if err := c.metrics.register(opts.Metrics); err != nil {
			return nil, fmt.Errorf("ghapp: register metrics: %w", err)
		}
	}
	return c, nil
}

// Target is what a request acts on: a repository (owner/name) and, for
// an App, the installation whose token it uses (0: the repository's).
type Target struct {
	Repo         string
	Installation int64
}

// Split returns the owner and name of t.Repo, or an error naming it.
func (t Target) Split() (owner, name string, err error) {
	return SplitRepo(t.Repo)
}

// SplitRepo splits "owner/name".
func SplitRepo(repo string) (owner, name string, err error) {
	owner, name, ok := strings.Cut(repo, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("repository %q: want owner/name", repo)
	}
	return owner, name, nil
}

// Client is one request's view of GitHub: a go-github client
// authenticated for its Target, and how.
type Client struct {
	*github.Client
	// Auth says where the credentials came from (Auth.From).
	From string
	// AppID is the App whose installation token the client uses (0 for a
	// token).
	AppID int64
	// Installation is the App installation the token is of (0 for a
	// token).
	Installation int64

	cr *credential
}

// ErrUnknownLogin reports a token GitHub names no user for (an App's
// installation token given as github.token_env): who it writes as cannot
// be asked.
var ErrUnknownLogin = errors.New("the token's account cannot be asked")

// rateLimitedErr reports go-github's rate-limit errors.
func rateLimitedErr(err error) bool {
	var rl *github.RateLimitError
	var abuse *github.AbuseRateLimitError
	return errors.As(err, &rl) || errors.As(err, &abuse)
}

// Login is the login of the account the client writes as: the App's bot
// ("<slug>[bot]", from GET /app) or the token's user (GET /user). It is
// asked once per credential and worker. A probe reads it to tell its
// own writes from anyone else's that carry the same marker. It fails
// with ErrUnknownLogin for a token that has no user.
func (c *Client) Login(ctx context.Context) (string, error) {
	return c.cr.login(ctx)
}

// For returns a client for target with the credentials s resolves to (see
// Resolve). As an App, it uses the installation token of
// target.Installation, or of the repository's installation, which it
// looks up once per InstallationTTL.
func (c *Clients) For(ctx context.Context, s Settings, target Target) (*Client, error) {
	auth, err := Resolve(s, c.opts.Getenv, c.opts.ReadFile)
	if err != nil {
		return nil, err
	}
	if auth.Token != "" {
		cr := c.credential("token\x00"+auth.BaseURL+"\x00"+digest([]byte(auth.Token)), func() *credential {
			cr := &credential{rt: bearer{token: auth.Token, next: c.opts.Transport}}
			cr.whoami = func(ctx context.Context) (string, error) {
				gc, err := c.client(auth.BaseURL, cr)
				if err != nil {
					return "", err
				}
				u, _, err := gc.Users.Get(ctx, "")
				var er *github.ErrorResponse
				if errors.As(err, &er) && er.Response != nil && er.Response.StatusCode == http.StatusForbidden && !rateLimitedErr(err) {
					// An App's installation token given as a token: it has
					// no user, and GitHub does not say which App it is.
					return "", fmt.Errorf("github: %s: %w: GET /user answers %d", auth.From, ErrUnknownLogin, er.Response.StatusCode)
				}
				if err != nil {
					return "", fmt.Errorf("github: user of %s: %w", auth.From, err)
				}
				return u.GetLogin(), nil
			}
			return cr
		})
		gc, err := c.client(auth.BaseURL, cr)
		if err != nil {
			return nil, err
		}
		return &Client{Client: gc, From: auth.From, cr: cr}, nil
	}
	inst := target.Installation
	if inst == 0 {
		if inst, err = c.repoInstallation(ctx, auth, target.Repo); err != nil {
			return nil, err
		}
	}
	var buildErr error
	cr := c.credential(appKey(auth)+"\x00"+strconv.FormatInt(inst, 10), func() *credential {
		tr, err := ghinstallation.New(c.opts.Transport, auth.AppID, inst, auth.PrivateKey)
		if err != nil {
			buildErr = fmt.Errorf("github: %s: %w", auth.From, err)
			return nil
		}
		tr.BaseURL = strings.TrimSuffix(auth.BaseURL, "/")
		tr.Client = &http.Client{Transport: exchangeCounter{next: c.opts.Transport, c: c, inst: inst}, Timeout: c.opts.Timeout}
		return &credential{rt: tr, installation: true, whoami: func(ctx context.Context) (string, error) {
			gc, err := c.appClient(auth)
			if err != nil {
				return "", err
			}
			app, _, err := gc.Apps.Get(ctx, "")
			if err != nil {
				return "", fmt.Errorf("github: app %d (%s): %w", auth.AppID, auth.From, err)
			}
			if app.GetSlug() == "" {
				return "", fmt.Errorf("github: app %d (%s): GitHub named no slug", auth.AppID, auth.From)
			}
			return app.GetSlug() + "[bot]", nil
		}}
	})
	if cr == nil {
		return nil, buildErr
	}
	gc, err := c.client(auth.BaseURL, cr)
	if err != nil {
		return nil, err
	}
	return &Client{Client: gc, From: auth.From, AppID: auth.AppID, Installation: inst, cr: cr}, nil
}

// credential returns the credential under key, building it once.
func (c *Clients) credential(key string, build func() *credential) *credential {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cr, ok := c.creds[key]; ok {
		return cr
	}
	cr := build()
	if cr != nil {
		cr.limit = &limiter{}
		cr.key = key
		c.creds[key] = cr
	}
	return cr
}

// drop forgets cr when GitHub refused its installation token (revoked,
// or expired by GitHub's clock before ours): the next client exchanges a
// new one. A credential already replaced stays as it is.
func (c *Clients) drop(cr *credential) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.creds[cr.key] == cr {
		delete(c.creds, cr.key)
		c.opts.Logger.Warn("github refused an installation token; the next request exchanges a new one")
	}
}

func (c *Clients) client(base string, cr *credential) (*github.Client, error) {
	hc := &http.Client{Timeout: c.opts.Timeout, Transport: &rateLimited{next: cr.rt, cr: cr, l: cr.limit, max: c.opts.MaxRateLimitWait, c: c}}
	gc, err := github.NewClient(github.WithHTTPClient(hc), github.WithURLs(&base, &base), github.WithUserAgent("jetloop"))
	if err != nil {
		return nil, fmt.Errorf("github: client for %s: %w", base, err)
	}
	return gc, nil
}

// credential is what the clients of one token or installation share.
type credential struct {
	rt    http.RoundTripper
	limit *limiter
	key   string
	// installation marks an App installation's token, which GitHub may
	// refuse before it expires by our clock.
	installation bool

	// whoami asks GitHub who writes with the credential; who is its
	// answer, asked once at a time under whoMu.
	whoami func(context.Context) (string, error)
	whoMu  sync.Mutex
	who    string
	whoErr error
}

func (cr *credential) login(ctx context.Context) (string, error) {
	cr.whoMu.Lock()
	defer cr.whoMu.Unlock()
	if cr.who == "" && cr.whoErr == nil {
		who, err := cr.whoami(ctx)
		if errors.Is(err, ErrUnknownLogin) {
			// It stays unknown: not asked again.
			cr.whoErr = err
		}
		if err != nil {
			return "", err
		}
		cr.who = who
	}
	return cr.who, cr.whoErr
}

func appKey(a Auth) string {
	return "app\x00" + strconv.FormatInt(a.AppID, 10) + "\x00" + a.BaseURL + "\x00" + digest(a.PrivateKey)
}

func digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// repoInstallation is a repository's installation, looked up once at a
// time.
type repoInstallation struct {
	mu      sync.Mutex
	id      int64
	fetched time.Time
}

// repoInstallation finds the installation of the App on repo, asking
// GitHub at most once per InstallationTTL and once at a time.
func (c *Clients) repoInstallation(ctx context.Context, auth Auth, repo string) (int64, error) {
	owner, name, err := SplitRepo(repo)
	if err != nil {
		return 0, fmt.Errorf("github: %w", err)
	}
	key := appKey(auth) + "\x00" + repo
	c.mu.Lock()
	ri, ok := c.repos[key]
	if !ok {
		ri = &repoInstallation{}
		c.repos[key] = ri
	}
	c.mu.Unlock()
	ri.mu.Lock()
	defer ri.mu.Unlock()
	if ri.id != 0 && time.Since(ri.fetched) < c.opts.InstallationTTL {
		return ri.id, nil
	}
	gc, err := c.appClient(auth)
	if err != nil {
		return 0, err
	}
	inst, _, err := gc.Apps.GetRepositoryInstallation(ctx, owner, name)
	if err != nil {
		return 0, fmt.Errorf("github: installation of app %d on %s: %w", auth.AppID, repo, err)
	}
	ri.id, ri.fetched = inst.GetID(), time.Now()
	return ri.id, nil
}

// appClient is a client that authenticates as the App itself, with its
// JWT.
func (c *Clients) appClient(auth Auth) (*github.Client, error) {
	atr, err := ghinstallation.NewAppsTransport(c.opts.Transport, auth.AppID, auth.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("github: %s: %w", auth.From, err)
	}
	atr.BaseURL = strings.TrimSuffix(auth.BaseURL, "/")
	base := auth.BaseURL
	gc, err := github.NewClient(github.WithHTTPClient(&http.Client{Transport: atr, Timeout: c.opts.Timeout}), github.WithURLs(&base, &base), github.WithUserAgent("jetloop"))
	if err != nil {
		return nil, fmt.Errorf("github: client for %s: %w", base, err)
	}
	return gc, nil
}

// bearer authenticates with a token.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// exchangeCounter counts and logs installation token exchanges.
type exchangeCounter struct {
	next http.RoundTripper
	c    *Clients
	inst int64
}

func (e exchangeCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := e.next.RoundTrip(req)
	outcome := "ok"
	switch {
	case err != nil:
		outcome = "error"
	case resp.StatusCode/100 != 2:
		outcome = strconv.Itoa(resp.StatusCode)
	}
	e.c.metrics.exchanges.WithLabelValues(outcome).Inc()
	e.c.opts.Logger.Debug("github installation token exchange", "installation", e.inst, "outcome", outcome)
	return resp, err
}

// IsNotFound reports whether err is GitHub's 404.
func IsNotFound(err error) bool {
	var er *github.ErrorResponse
	return errors.As(err, &er) && er.Response != nil && er.Response.StatusCode == http.StatusNotFound
}
