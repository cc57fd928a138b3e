package ghfake

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// AppID is the fake App's id.
const AppID = 4242

// Who writes: AppSlug is the fake App's slug (GET /app), BotLogin the
// login of its bot account, which writes with an installation token, and
// TokenLogin the login of the user every personal access token is of
// (GET /user).
const (
	AppSlug    = "jetloop-fake"
	BotLogin   = AppSlug + "[bot]"
	TokenLogin = "jetloop-user"
)

// Server is the fake GitHub API. Its methods are safe for concurrent use.
type Server struct {
	srv *httptest.Server
	key *rsa.PrivateKey

	mu sync.Mutex
	// TokenTTL is the lifetime of the installation tokens issued next.
	tokenTTL      time.Duration
	installations map[int64][]string // id → repositories
	tokens        map[string]token
	pats          map[string]bool
	exchanges     int
	nextID        int64
	comments      []Comment
	reviews       []Review
	checks        []CheckRun
	labels        map[string][]string // repo#n → names
	limited       []limit
	limitedCount  int
	requests      int
	onCreate      func(kind string, id int64)
	now           func() time.Time
}

type token struct {
	installation int64
	expires      time.Time
}

type limit struct {
	status     int
	retryAfter time.Duration // 0: primary limit with reset
	reset      time.Time
}

// Comment is an issue or pull request comment as posted.
type Comment struct {
	ID      int64
	Repo    string
	Number  int
	Body    string
	Created time.Time
	// Installation is the installation whose token posted it (0: a token).
	Installation int64
	// Author is the login that wrote it.
	Author string
}

// Review is a pull request review as posted.
type Review struct {
	ID       int64
	Repo     string
	Number   int
	Body     string
	State    string
	Comments []json.RawMessage
	Created  time.Time
	// Author is the login that wrote it.
	Author string
}

// CheckRun is a check run as created and last updated.
type CheckRun struct {
	ID         int64
	Repo       string
	Name       string
	HeadSHA    string
	ExternalID string
	Status     string
	Conclusion string
	Title      string
	Summary    string
	Text       string
	Started    time.Time
	Completed  time.Time
	Updates    int
	// AppID is the App that created it.
	AppID int64
}

// New starts the fake on loopback; it is closed by t.Cleanup.
func New(t testing.TB) *Server {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatalf("ghfake: key: %v", err)
	}
	s := &Server{key: key, tokenTTL: time.Hour, installations: map[int64][]string{}, tokens: map[string]token{},
		pats: map[string]bool{}, labels: map[string][]string{}, nextID: 1000, now: time.Now}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// URL is the API root, with a trailing slash: a github.base_url.
func (s *Server) URL() string { return s.srv.URL + "/" }

// PrivateKeyPEM is the App's private key, PKCS#1 PEM as GitHub issues it.
func (s *Server) PrivateKeyPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(s.key)})
}

// WriteKey writes the private key into dir and returns its path.
func (s *Server) WriteKey(t testing.TB, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "app.pem")
	if err := os.WriteFile(p, s.PrivateKeyPEM(), 0o600); err != nil {
		t.Fatalf("ghfake: write key: %v", err)
	}
	return p
}

// AddInstallation installs the App on repos (owner/name) as installation id.
func (s *Server) AddInstallation(id int64, repos ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.installations[id] = append(s.installations[id], repos...)
}

// AddToken accepts tok as a personal access token for every repository.
func (s *Server) AddToken(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pats[tok] = true
}

// IssueToken issues an installation token of installation id, as an
// exchange would, for a test that hands it out as a plain token.
func (s *Server) IssueToken(id int64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exchanges++
	tok := fmt.Sprintf("ghs_fake%d_%d", id, s.exchanges)
	s.tokens[tok] = token{installation: id, expires: s.now().Add(s.tokenTTL)}
	return tok
}

// SetTokenTTL sets the lifetime of the installation tokens issued next.
func (s *Server) SetTokenTTL(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokenTTL = d
}

// Exchanges counts the installation tokens issued.
func (s *Server) Exchanges() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exchanges
}

// Requests counts the API requests answered (token exchanges included).
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// RateLimited counts the requests answered rate-limited.
func (s *Server) RateLimited() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limitedCount
}

// LimitPrimary answers the next n API requests (token exchanges aside)
// 403 with x-ratelimit-remaining 0 and x-ratelimit-reset at reset.
func (s *Server) LimitPrimary(n int, reset time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.limited = append(s.limited, limit{status: http.StatusForbidden, reset: reset})
	}
}

// LimitSecondary answers the next n API requests with status (403 or 429)
// and Retry-After.
func (s *Server) LimitSecondary(n, status int, retryAfter time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.limited = append(s.limited, limit{status: status, retryAfter: retryAfter})
	}
}

// AddComment stores a comment by author on repo#number, as if someone
// else had written it, and returns it.
func (s *Server) AddComment(repo string, number int, author, body string) Comment {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	c := Comment{ID: s.nextID, Repo: repo, Number: number, Body: body, Created: s.now(), Author: author}
	s.comments = append(s.comments, c)
	return c
}

// AddReview stores a review by author on repo#number, as if someone else
// had written it, and returns it.
func (s *Server) AddReview(repo string, number int, author, body string) Review {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	rv := Review{ID: s.nextID, Repo: repo, Number: number, Body: body, State: "COMMENTED", Created: s.now(), Author: author}
	s.reviews = append(s.reviews, rv)
	return rv
}

// AddCheckRun stores a completed check run of another App (appID) on
// repo's commit sha, and returns it.
func (s *Server) AddCheckRun(repo, name, sha, externalID string, appID int64) CheckRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	now := s.now()
	c := CheckRun{ID: s.nextID, Repo: repo, Name: name, HeadSHA: sha, ExternalID: externalID, Status: "completed",
		Conclusion: "success", Started: now, Completed: now, AppID: appID}
	s.checks = append(s.checks, c)
	return c
}

// OnCreate calls f after a comment, review or check run ("comment",
// "review", "check_run") is stored and before its answer is written: a
// crash test kills the caller there.
func (s *Server) OnCreate(f func(kind string, id int64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onCreate = f
}

// Comments returns the comments posted on repo#number (all of them when
// repo is empty), in order.
func (s *Server) Comments(repo string, number int) []Comment {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Comment
	for _, c := range s.comments {
		if repo == "" || (c.Repo == repo && c.Number == number) {
			out = append(out, c)
		}
	}
	return out
}

// Reviews returns the reviews posted on repo#number.
func (s *Server) Reviews(repo string, number int) []Review {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Review
	for _, r := range s.reviews {
		if r.Repo == repo && r.Number == number {
			out = append(out, r)
		}
	}
	return out
}

// CheckRuns returns the check runs of repo.
func (s *Server) CheckRuns(repo string) []CheckRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []CheckRun
	for _, c := range s.checks {
		if c.Repo == repo {
			out = append(out, c)
		}
	}
	return out
}

// Labels returns the labels of repo#number.
func (s *Server) Labels(repo string, number int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.labels[fmt.Sprintf("%s#%d", repo, number)])
}

// apiError is GitHub's error body.
type apiError struct {
	Message          string       `json:"message"`
	Errors           []fieldError `json:"errors,omitempty"`
	DocumentationURL string       `json:"documentation_url"`
	Status           string       `json:"status"`
}

type fieldError struct {
	Resource string `json:"resource"`
	Code     string `json:"code"`
	Field    string `json:"field"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status int, msg string, errs ...fieldError) {
	writeJSON(w, status, apiError{Message: msg, Errors: errs, DocumentationURL: "https://docs.github.com/rest", Status: strconv.Itoa(status)})
}

// caller is who a request authenticated as.
type caller struct {
	installation int64 // 0 with pat
	pat          bool
	app          bool
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests++
	s.mu.Unlock()
	w.Header().Set("X-GitHub-Request-Id", fmt.Sprintf("FAKE:%d", time.Now().UnixNano()))
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	// /app/installations/{id}/access_tokens and /repos/{o}/{r}/installation
	// authenticate as the App.
	if len(parts) == 4 && parts[0] == "app" && parts[1] == "installations" && parts[3] == "access_tokens" && r.Method == http.MethodPost {
		if msg := s.verifyJWT(r); msg != "" {
			fail(w, http.StatusUnauthorized, msg)
			return
		}
		s.exchange(w, parts[2])
		return
	}
	if len(parts) == 1 && parts[0] == "app" && r.Method == http.MethodGet {
		if msg := s.verifyJWT(r); msg != "" {
			fail(w, http.StatusUnauthorized, msg)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": AppID, "slug": AppSlug, "node_id": "A_4242", "name": "jetloop fake",
			"owner": map[string]any{"login": "jetloop", "type": "Organization"}, "html_url": "https://github.com/apps/" + AppSlug})
		return
	}
	if len(parts) == 4 && parts[0] == "repos" && parts[3] == "installation" && r.Method == http.MethodGet {
		if msg := s.verifyJWT(r); msg != "" {
			fail(w, http.StatusUnauthorized, msg)
			return
		}
		s.repoInstallation(w, parts[1]+"/"+parts[2])
		return
	}
	c, ok := s.authenticate(r)
	if !ok {
		fail(w, http.StatusUnauthorized, "Bad credentials")
		return
	}
	if s.rateLimit(w, c) {
		return
	}
	s.rateHeaders(w, 4999)
	if len(parts) == 1 && parts[0] == "user" && r.Method == http.MethodGet {
		if !c.pat {
			fail(w, http.StatusForbidden, "Resource not accessible by integration")
			return
		}
		writeJSON(w, http.StatusOK, userJSON(TokenLogin))
		return
	}
	if len(parts) < 4 || parts[0] != "repos" {
		fail(w, http.StatusNotFound, "Not Found")
		return
	}
	repo := parts[1] + "/" + parts[2]
	if !s.canAccess(c, repo) {
		fail(w, http.StatusNotFound, "Not Found")
		return
	}
	rest := parts[3:]
	switch {
	case len(rest) == 3 && rest[0] == "issues" && rest[2] == "comments":
		n, err := strconv.Atoi(rest[1])
		if err != nil {
			fail(w, http.StatusNotFound, "Not Found")
			return
		}
		if r.Method == http.MethodPost {
			s.createComment(w, r, c, repo, n)
		} else if r.Method == http.MethodGet {
			s.listComments(w, r, repo, n)
		} else {
			fail(w, http.StatusMethodNotAllowed, "Method Not Allowed")
		}
	case len(rest) == 3 && rest[0] == "pulls" && rest[2] == "reviews":
		n, err := strconv.Atoi(rest[1])
		if err != nil {
			fail(w, http.StatusNotFound, "Not Found")
			return
		}
		if r.Method == http.MethodPost {
			s.createReview(w, r, c, repo, n)
		} else {
			s.listReviews(w, r, repo, n)
		}
	case len(rest) == 1 && rest[0] == "check-runs" && r.Method == http.MethodPost:
		s.createCheck(w, r, repo)
	case len(rest) == 2 && rest[0] == "check-runs" && r.Method == http.MethodPatch:
		id, _ := strconv.ParseInt(rest[1], 10, 64)
		s.updateCheck(w, r, repo, id)
	case len(rest) == 3 && rest[0] == "commits" && rest[2] == "check-runs" && r.Method == http.MethodGet:
		s.listChecks(w, r, repo, rest[1])
	case len(rest) >= 3 && rest[0] == "issues" && rest[2] == "labels":
		n, err := strconv.Atoi(rest[1])
		if err != nil {
			fail(w, http.StatusNotFound, "Not Found")
			return
		}
		s.labelsOp(w, r, repo, n, rest[3:])
	default:
		fail(w, http.StatusNotFound, "Not Found")
	}
}

// verifyJWT checks an App JWT: RS256 signed with the App's key, iss the
// App id, issued no later than a minute ahead, expiring within ten
// minutes and not yet expired. It returns GitHub's message for a bad one.
func (s *Server) verifyJWT(r *http.Request) string {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		return "A JSON web token could not be decoded"
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "A JSON web token could not be decoded"
	}
	var hdr struct {
		Alg string `json:"alg"`
	}
	if b, err := base64.RawURLEncoding.DecodeString(parts[0]); err != nil || json.Unmarshal(b, &hdr) != nil || hdr.Alg != "RS256" {
		return "A JSON web token could not be decoded"
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return "A JSON web token could not be decoded"
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(&s.key.PublicKey, crypto.SHA256, sum[:], sig); err != nil {
		return "A JSON web token could not be decoded"
	}
	var claims struct {
		Iss json.RawMessage `json:"iss"`
		Iat int64           `json:"iat"`
		Exp int64           `json:"exp"`
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || json.Unmarshal(b, &claims) != nil {
		return "A JSON web token could not be decoded"
	}
	iss := strings.Trim(string(claims.Iss), `"`)
	if iss != strconv.Itoa(AppID) {
		return fmt.Sprintf("Integration %s not found", iss)
	}
	now := s.clock().Unix()
	switch {
	case claims.Iat > now+60:
		return "'Issued at' claim ('iat') must be an Integer representing a time in the past."
	case claims.Exp <= now:
		return "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires."
	case claims.Exp-claims.Iat > 600:
		return "'Expiration time' claim ('exp') is too far in the future"
	}
	return ""
}

func (s *Server) exchange(w http.ResponseWriter, idText string) {
	id, _ := strconv.ParseInt(idText, 10, 64)
	s.mu.Lock()
	_, ok := s.installations[id]
	if !ok {
		s.mu.Unlock()
		fail(w, http.StatusNotFound, "Not Found")
		return
	}
	s.exchanges++
	tok := fmt.Sprintf("ghs_fake%d_%d", id, s.exchanges)
	exp := s.now().Add(s.tokenTTL).UTC().Truncate(time.Second)
	s.tokens[tok] = token{installation: id, expires: exp}
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]any{
		"token": tok, "expires_at": exp.Format(time.RFC3339),
		"permissions":          map[string]string{"issues": "write", "pull_requests": "write", "checks": "write", "metadata": "read"},
		"repository_selection": "selected",
	})
}

func (s *Server) repoInstallation(w http.ResponseWriter, repo string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, repos := range s.installations {
		if slices.Contains(repos, repo) {
			owner, _, _ := strings.Cut(repo, "/")
			writeJSON(w, http.StatusOK, map[string]any{"id": id, "app_id": AppID, "target_type": "Organization",
				"account": map[string]any{"login": owner, "type": "Organization"}, "repository_selection": "selected",
				"access_tokens_url": fmt.Sprintf("%s/app/installations/%d/access_tokens", s.srv.URL, id)})
			return
		}
	}
	fail(w, http.StatusNotFound, "Not Found")
}

func (s *Server) authenticate(r *http.Request) (caller, bool) {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "token ")
	if !ok {
		tok, ok = strings.CutPrefix(h, "Bearer ")
	}
	if !ok {
		return caller{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pats[tok] {
		return caller{pat: true}, true
	}
	t, ok := s.tokens[tok]
	if !ok || !s.now().Before(t.expires) {
		return caller{}, false
	}
	return caller{installation: t.installation}, true
}

func (s *Server) canAccess(c caller, repo string) bool {
	if c.pat {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.installations[c.installation], repo)
}

// rateLimit answers the request rate-limited if one is queued.
func (s *Server) rateLimit(w http.ResponseWriter, c caller) bool {
	s.mu.Lock()
	if len(s.limited) == 0 {
		s.mu.Unlock()
		return false
	}
	l := s.limited[0]
	s.limited = s.limited[1:]
	s.limitedCount++
	s.mu.Unlock()
	if l.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(l.retryAfter.Round(time.Second)/time.Second)))
		s.rateHeaders(w, 4000)
		fail(w, l.status, "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.")
		return true
	}
	w.Header().Set("X-Ratelimit-Limit", "5000")
	w.Header().Set("X-Ratelimit-Remaining", "0")
	w.Header().Set("X-Ratelimit-Used", "5000")
	w.Header().Set("X-Ratelimit-Reset", strconv.FormatInt(l.reset.Unix(), 10))
	w.Header().Set("X-Ratelimit-Resource", "core")
	fail(w, l.status, fmt.Sprintf("API rate limit exceeded for installation ID %d.", c.installation))
	return true
}

func (s *Server) rateHeaders(w http.ResponseWriter, remaining int) {
	w.Header().Set("X-Ratelimit-Limit", "5000")
	w.Header().Set("X-Ratelimit-Remaining", strconv.Itoa(remaining))
	w.Header().Set("X-Ratelimit-Used", strconv.Itoa(5000-remaining))
	w.Header().Set("X-Ratelimit-Reset", strconv.FormatInt(s.clock().Add(time.Hour).Unix(), 10))
	w.Header().Set("X-Ratelimit-Resource", "core")
}

func (s *Server) created(kind string, id int64) {
	s.mu.Lock()
	f := s.onCreate
	s.mu.Unlock()
	if f != nil {
		f(kind, id)
	}
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	if err := dec.Decode(v); err != nil {
		fail(w, http.StatusBadRequest, "Problems parsing JSON")
		return false
	}
	return true
}

// login is who writes with the caller's token.
func (c caller) login() string {
	if c.pat {
		return TokenLogin
	}
	return BotLogin
}

// userJSON is the user object of login: a bot's when it ends in [bot].
func userJSON(login string) map[string]any {
	if strings.HasSuffix(login, "[bot]") {
		return map[string]any{"login": login, "id": 99, "type": "Bot", "node_id": "BOT_99",
			"html_url": "https://github.com/apps/" + strings.TrimSuffix(login, "[bot]")}
	}
	return map[string]any{"login": login, "id": 1000 + len(login), "type": "User", "node_id": "U_" + login,
		"html_url": "https://github.com/" + login}
}

func (s *Server) commentJSON(c Comment) map[string]any {
	ts := c.Created.UTC().Format(time.RFC3339)
	return map[string]any{
		"id": c.ID, "node_id": fmt.Sprintf("IC_%d", c.ID),
		"url":       fmt.Sprintf("%s/repos/%s/issues/comments/%d", s.srv.URL, c.Repo, c.ID),
		"html_url":  fmt.Sprintf("https://github.com/%s/issues/%d#issuecomment-%d", c.Repo, c.Number, c.ID),
		"issue_url": fmt.Sprintf("%s/repos/%s/issues/%d", s.srv.URL, c.Repo, c.Number),
		"body":      c.Body, "user": userJSON(c.Author), "created_at": ts, "updated_at": ts,
		"author_association": "NONE",
	}
}

func (s *Server) createComment(w http.ResponseWriter, r *http.Request, c caller, repo string, n int) {
	var in struct {
		Body *string `json:"body"`
	}
	if !decode(w, r, &in) {
		return
	}
	if in.Body == nil || *in.Body == "" {
		fail(w, http.StatusUnprocessableEntity, "Validation Failed", fieldError{Resource: "IssueComment", Code: "missing_field", Field: "body"})
		return
	}
	if len(*in.Body) > 65536 {
		fail(w, http.StatusUnprocessableEntity, "Validation Failed", fieldError{Resource: "IssueComment", Code: "custom", Field: "body"})
		return
	}
	s.mu.Lock()
	s.nextID++
	cm := Comment{ID: s.nextID, Repo: repo, Number: n, Body: *in.Body, Created: s.now(), Installation: c.installation, Author: c.login()}
	s.comments = append(s.comments, cm)
	s.mu.Unlock()
	s.created("comment", cm.ID)
	writeJSON(w, http.StatusCreated, s.commentJSON(cm))
}

// page applies per_page and page to n items and writes the Link header.
func (s *Server) page(w http.ResponseWriter, r *http.Request, n int) (lo, hi int) {
	q := r.URL.Query()
	per, _ := strconv.Atoi(q.Get("per_page"))
	if per <= 0 {
		per = 30
	}
	per = min(per, 100)
	pg, _ := strconv.Atoi(q.Get("page"))
	if pg <= 0 {
		pg = 1
	}
	last := max(1, (n+per-1)/per)
	link := func(p int, rel string) string {
		u := *r.URL
		v := u.Query()
		v.Set("page", strconv.Itoa(p))
		v.Set("per_page", strconv.Itoa(per))
		u.RawQuery = v.Encode()
		return fmt.Sprintf(`<%s%s>; rel="%s"`, s.srv.URL, u.RequestURI(), rel)
	}
	var links []string
	if pg < last {
		links = append(links, link(pg+1, "next"), link(last, "last"))
	}
	if pg > 1 {
		links = append(links, link(1, "first"), link(pg-1, "prev"))
	}
	if len(links) > 0 {
		w.Header().Set("Link", strings.Join(links, ", "))
	}
	lo = min(n, (pg-1)*per)
	return lo, min(n, lo+per)
}

func (s *Server) listComments(w http.ResponseWriter, r *http.Request, repo string, n int) {
	var since time.Time
	if v := r.URL.Query().Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			fail(w, http.StatusUnprocessableEntity, "Validation Failed", fieldError{Resource: "IssueComment", Code: "invalid", Field: "since"})
			return
		}
		since = t
	}
	var sel []Comment
	for _, c := range s.Comments(repo, n) {
		if !c.Created.Before(since) {
			sel = append(sel, c)
		}
	}
	lo, hi := s.page(w, r, len(sel))
	out := []map[string]any{}
	for _, c := range sel[lo:hi] {
		out = append(out, s.commentJSON(c))
	}
	writeJSON(w, http.StatusOK, out)
}

var reviewStates = map[string]string{"APPROVE": "APPROVED", "REQUEST_CHANGES": "CHANGES_REQUESTED", "COMMENT": "COMMENTED", "": "PENDING"}

func (s *Server) reviewJSON(rv Review) map[string]any {
	return map[string]any{
		"id": rv.ID, "node_id": fmt.Sprintf("PRR_%d", rv.ID), "user": userJSON(rv.Author), "body": rv.Body, "state": rv.State,
		"html_url":           fmt.Sprintf("https://github.com/%s/pull/%d#pullrequestreview-%d", rv.Repo, rv.Number, rv.ID),
		"pull_request_url":   fmt.Sprintf("%s/repos/%s/pulls/%d", s.srv.URL, rv.Repo, rv.Number),
		"submitted_at":       rv.Created.UTC().Format(time.RFC3339),
		"commit_id":          "6dcb09b5b57875f334f61aebed695e2e4193db5e",
		"author_association": "NONE",
	}
}

func (s *Server) createReview(w http.ResponseWriter, r *http.Request, c caller, repo string, n int) {
	var in struct {
		Body     string            `json:"body"`
		Event    string            `json:"event"`
		Comments []json.RawMessage `json:"comments"`
	}
	if !decode(w, r, &in) {
		return
	}
	state, ok := reviewStates[in.Event]
	if !ok {
		fail(w, http.StatusUnprocessableEntity, "Validation Failed", fieldError{Resource: "PullRequestReview", Code: "invalid", Field: "event"})
		return
	}
	if (in.Event == "REQUEST_CHANGES" || in.Event == "COMMENT") && in.Body == "" && len(in.Comments) == 0 {
		fail(w, http.StatusUnprocessableEntity, "Unprocessable Entity: Review body is required for "+in.Event)
		return
	}
	for _, c := range in.Comments {
		var dc struct {
			Path string `json:"path"`
			Body string `json:"body"`
			Line int    `json:"line"`
			Pos  int    `json:"position"`
		}
		if json.Unmarshal(c, &dc) != nil || dc.Path == "" || dc.Body == "" || (dc.Line == 0 && dc.Pos == 0) {
			fail(w, http.StatusUnprocessableEntity, "Validation Failed", fieldError{Resource: "PullRequestReviewComment", Code: "missing_field", Field: "path, body and line"})
			return
		}
	}
	s.mu.Lock()
	s.nextID++
	rv := Review{ID: s.nextID, Repo: repo, Number: n, Body: in.Body, State: state, Comments: in.Comments, Created: s.now(), Author: c.login()}
	s.reviews = append(s.reviews, rv)
	s.mu.Unlock()
	s.created("review", rv.ID)
	writeJSON(w, http.StatusOK, s.reviewJSON(rv))
}

func (s *Server) listReviews(w http.ResponseWriter, r *http.Request, repo string, n int) {
	all := s.Reviews(repo, n)
	lo, hi := s.page(w, r, len(all))
	out := []map[string]any{}
	for _, rv := range all[lo:hi] {
		out = append(out, s.reviewJSON(rv))
	}
	writeJSON(w, http.StatusOK, out)
}

type checkInput struct {
	Name        *string `json:"name"`
	HeadSHA     *string `json:"head_sha"`
	ExternalID  *string `json:"external_id"`
	Status      *string `json:"status"`
	Conclusion  *string `json:"conclusion"`
	CompletedAt *string `json:"completed_at"`
	Output      *struct {
		Title   string `json:"title"`
		Summary string `json:"summary"`
		Text    string `json:"text"`
	} `json:"output"`
}

var conclusions = []string{"action_required", "cancelled", "failure", "neutral", "success", "skipped", "stale", "timed_out"}

func (s *Server) applyCheck(w http.ResponseWriter, c *CheckRun, in checkInput) bool {
	if in.Name != nil {
		c.Name = *in.Name
	}
	if in.ExternalID != nil {
		c.ExternalID = *in.ExternalID
	}
	if in.Status != nil {
		if !slices.Contains([]string{"queued", "in_progress", "completed"}, *in.Status) {
			fail(w, http.StatusUnprocessableEntity, "Validation Failed", fieldError{Resource: "CheckRun", Code: "invalid", Field: "status"})
			return false
		}
		c.Status = *in.Status
	}
	if in.Conclusion != nil {
		if !slices.Contains(conclusions, *in.Conclusion) {
			fail(w, http.StatusUnprocessableEntity, "Validation Failed", fieldError{Resource: "CheckRun", Code: "invalid", Field: "conclusion"})
			return false
		}
		c.Conclusion = *in.Conclusion
		c.Status = "completed"
	}
	if c.Status == "completed" && c.Conclusion == "" {
		fail(w, http.StatusUnprocessableEntity, "Validation Failed", fieldError{Resource: "CheckRun", Code: "missing_field", Field: "conclusion"})
		return false
	}
	if c.Status == "completed" && c.Completed.IsZero() {
		c.Completed = s.clock()
	}
	if in.Output != nil {
		if in.Output.Summary == "" || in.Output.Title == "" {
			fail(w, http.StatusUnprocessableEntity, "Validation Failed", fieldError{Resource: "CheckRun", Code: "missing_field", Field: "output.title and output.summary"})
			return false
		}
		c.Title, c.Summary, c.Text = in.Output.Title, in.Output.Summary, in.Output.Text
	}
	return true
}

func (s *Server) checkJSON(c CheckRun) map[string]any {
	var completed any
	if !c.Completed.IsZero() {
		completed = c.Completed.UTC().Format(time.RFC3339)
	}
	var conclusion any
	if c.Conclusion != "" {
		conclusion = c.Conclusion
	}
	return map[string]any{
		"id": c.ID, "node_id": fmt.Sprintf("CR_%d", c.ID), "name": c.Name, "head_sha": c.HeadSHA, "external_id": c.ExternalID,
		"url":      fmt.Sprintf("%s/repos/%s/check-runs/%d", s.srv.URL, c.Repo, c.ID),
		"html_url": fmt.Sprintf("https://github.com/%s/runs/%d", c.Repo, c.ID),
		"status":   c.Status, "conclusion": conclusion,
		"started_at": c.Started.UTC().Format(time.RFC3339), "completed_at": completed,
		"output": map[string]any{"title": c.Title, "summary": c.Summary, "text": c.Text, "annotations_count": 0,
			"annotations_url": fmt.Sprintf("%s/repos/%s/check-runs/%d/annotations", s.srv.URL, c.Repo, c.ID)},
		"app": map[string]any{"id": c.AppID, "slug": appSlug(c.AppID), "name": appSlug(c.AppID)},
	}
}

func (s *Server) createCheck(w http.ResponseWriter, r *http.Request, repo string) {
	var in checkInput
	if !decode(w, r, &in) {
		return
	}
	if in.Name == nil || *in.Name == "" || in.HeadSHA == nil || *in.HeadSHA == "" {
		fail(w, http.StatusUnprocessableEntity, "Validation Failed", fieldError{Resource: "CheckRun", Code: "missing_field", Field: "name and head_sha"})
		return
	}
	c := CheckRun{Repo: repo, HeadSHA: *in.HeadSHA, Status: "queued", Started: s.clock(), AppID: AppID}
	if !s.applyCheck(w, &c, in) {
		return
	}
	s.mu.Lock()
	s.nextID++
	c.ID = s.nextID
	s.checks = append(s.checks, c)
	s.mu.Unlock()
	s.created("check_run", c.ID)
	writeJSON(w, http.StatusCreated, s.checkJSON(c))
}

func (s *Server) updateCheck(w http.ResponseWriter, r *http.Request, repo string, id int64) {
	var in checkInput
	if !decode(w, r, &in) {
		return
	}
	s.mu.Lock()
	i := slices.IndexFunc(s.checks, func(c CheckRun) bool { return c.ID == id && c.Repo == repo })
	if i < 0 {
		s.mu.Unlock()
		fail(w, http.StatusNotFound, "Not Found")
		return
	}
	c := s.checks[i]
	s.mu.Unlock()
	if !s.applyCheck(w, &c, in) {
		return
	}
	c.Updates++
	s.mu.Lock()
	s.checks[i] = c
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, s.checkJSON(c))
}

func (s *Server) listChecks(w http.ResponseWriter, r *http.Request, repo, ref string) {
	name := r.URL.Query().Get("check_name")
	var sel []CheckRun
	for _, c := range s.CheckRuns(repo) {
		if c.HeadSHA == ref && (name == "" || c.Name == name) {
			sel = append(sel, c)
		}
	}
	lo, hi := s.page(w, r, len(sel))
	runs := []map[string]any{}
	for _, c := range sel[lo:hi] {
		runs = append(runs, s.checkJSON(c))
	}
	writeJSON(w, http.StatusOK, map[string]any{"total_count": len(sel), "check_runs": runs})
}

func labelJSON(repo, name string) map[string]any {
	return map[string]any{"id": len(name), "node_id": "LA_" + name, "name": name, "color": "ededed", "default": false,
		"description": nil, "url": fmt.Sprintf("https://api.github.com/repos/%s/labels/%s", repo, url.PathEscape(name))}
}

func (s *Server) labelsOp(w http.ResponseWriter, r *http.Request, repo string, n int, rest []string) {
	key := fmt.Sprintf("%s#%d", repo, n)
	switch {
	case r.Method == http.MethodPost && len(rest) == 0:
		var in struct {
			Labels []string `json:"labels"`
		}
		body, _ := readAll(r)
		if json.Unmarshal(body, &in) != nil {
			// The API also takes a bare array of names.
			if json.Unmarshal(body, &in.Labels) != nil {
				fail(w, http.StatusBadRequest, "Problems parsing JSON")
				return
			}
		}
		if len(in.Labels) == 0 {
			fail(w, http.StatusUnprocessableEntity, "Validation Failed", fieldError{Resource: "Label", Code: "missing_field", Field: "labels"})
			return
		}
		s.mu.Lock()
		for _, l := range in.Labels {
			if !slices.Contains(s.labels[key], l) {
				s.labels[key] = append(s.labels[key], l)
			}
		}
		s.mu.Unlock()
	case r.Method == http.MethodDelete && len(rest) == 1:
		name := rest[0]
		s.mu.Lock()
		i := slices.Index(s.labels[key], name)
		if i < 0 {
			s.mu.Unlock()
			fail(w, http.StatusNotFound, "Label does not exist")
			return
		}
		s.labels[key] = slices.Delete(s.labels[key], i, i+1)
		s.mu.Unlock()
	case r.Method == http.MethodGet && len(rest) == 0:
	default:
		fail(w, http.StatusNotFound, "Not Found")
		return
	}
	out := []map[string]any{}
	for _, l := range s.Labels(repo, n) {
		out = append(out, labelJSON(repo, l))
	}
	writeJSON(w, http.StatusOK, out)
}

func readAll(r *http.Request) ([]byte, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(http.MaxBytesReader(nil, r.Body, 1<<20))
	return b.Bytes(), err
}

func (s *Server) clock() time.Time {
	s.mu.Lock()
	f := s.now
	s.mu.Unlock()
	return f()
}

// SetClock replaces the fake's clock (token expiry, JWT times).
func (s *Server) SetClock(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = now
}

func appSlug(id int64) string {
	if id == AppID {
		return AppSlug
	}
	return fmt.Sprintf("app-%d", id)
}
