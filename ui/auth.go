package ui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/jetloop/jetloop/api"
)

// Defaults of Auth.
const (
	// DefaultSessionTTL is how long a sign-in lasts.
	DefaultSessionTTL = 12 * time.Hour
	// DefaultLinkTTL is how long a one-time login link can be used.
	DefaultLinkTTL = 10 * time.Minute
	// MaxLinks bounds the one-time links outstanding at once; minting
	// one more forgets the oldest.
	MaxLinks = 100
	// MaxSignedOut bounds the signed-out sessions remembered until they
	// would have expired; past it the one closest to expiring is
	// forgotten (and would sign in again until then).
	MaxSignedOut = 10000
	// CookieName is the session cookie.
	CookieName = "jetloop_session"
	// CSRFHeader carries the page's CSRF token on every request that
	// changes something.
	CSRFHeader = "X-CSRF-Token"
)

// Auth signs people in to the dashboard and authenticates their
// requests. Its zero value is not usable: make it with NewAuth.
type Auth struct {
	token string
	key   []byte
	ttl   time.Duration
	link  time.Duration
	now   func() time.Time
	// failures bounds wrong tokens at the login form, for every sender
	// together.
	failures *rate.Limiter

	mu sync.Mutex
	// codes are the outstanding one-time codes, by their hash, with
	// when each expires.
	codes map[string]time.Time
	// out are the sessions signed out before they expire, by their
	// cookie's signature, with when each would have.
	out map[string]time.Time
}

// AuthOption adjusts an Auth.
type AuthOption func(*Auth)

// WithSessionTTL sets how long a sign-in lasts.
func WithSessionTTL(d time.Duration) AuthOption { return func(a *Auth) { a.ttl = d } }

// WithClock sets the clock (tests).
func WithClock(now func() time.Time) AuthOption { return func(a *Auth) { a.now = now } }

// NewAuth makes the dashboard's sign-in for the API bearer token. An
// empty token is refused: the dashboard is off without one.
func NewAuth(token string, opts ...AuthOption) (*Auth, error) {
	if token == "" {
		return nil, errors.New("ui: no API token (JETLOOP_API_TOKEN): the dashboard needs one to sign in with")
	}
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("jetloop dashboard session key v1"))
	a := &Auth{token: token, key: m.Sum(nil), ttl: DefaultSessionTTL, link: DefaultLinkTTL, now: time.Now,
		failures: rate.NewLimiter(rate.Limit(5), 20), codes: map[string]time.Time{}, out: map[string]time.Time{}}
	for _, o := range opts {
		o(a)
	}
	if a.ttl < time.Minute {
		return nil, fmt.Errorf("ui: session lifetime %s: want at least a minute", a.ttl)
	}
	return a, nil
}

// LoginLink mints a one-time code and returns base's login URL that
// redeems it: the first GET of it signs in, within DefaultLinkTTL. The
// link is as good as the token until then: print it where the token
// could be read, never into logs.
func (a *Auth) LoginLink(base string) (string, error) {
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("ui: one-time code: %w", err)
	}
	code := base64.RawURLEncoding.EncodeToString(raw)
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for h, exp := range a.codes {
		if !exp.After(now) {
			delete(a.codes, h)
		}
	}
	for len(a.codes) >= MaxLinks {
		var oldest string
		for h, exp := range a.codes {
			if oldest == "" || exp.Before(a.codes[oldest]) {
				oldest = h
			}
		}
		delete(a.codes, oldest)
	}
	a.codes[digest(code)] = now.Add(a.link)
	return strings.TrimRight(base, "/") + "/ui/login?code=" + url.QueryEscape(code), nil
}

// redeem uses up a one-time code, reporting whether it was good.
func (a *Auth) redeem(code string) bool {
	if code == "" || len(code) > 128 {
		return false
	}
	h := digest(code)
	a.mu.Lock()
	defer a.mu.Unlock()
	exp, ok := a.codes[h]
	delete(a.codes, h)
	return ok && exp.After(a.now())
}

// checkToken compares a token given at the login form, in constant time.
// Once wrong ones come faster than the limiter's rate, every token is
// refused unread until the rate allows again, the right one as well: a
// guesser must not learn which guess was right by its answer. (The
// one-time link and the API's bearer token still work meanwhile.)
func (a *Auth) checkToken(got string) (ok, limited bool) {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failures.TokensAt(now) < 1 {
		return false, true
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(a.token)) == 1 {
		return true, false
	}
	a.failures.AllowN(now, 1)
	return false, false
}

func digest(s string) string {
	h := sha256.Sum256([]byte(s))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

func (a *Auth) mac(parts ...string) string {
	m := hmac.New(sha256.New, a.key)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// newSession is the value of a new session cookie: its expiry, a nonce
// and their signature.
func (a *Auth) newSession() (string, time.Time, error) {
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return "", time.Time{}, fmt.Errorf("ui: session: %w", err)
	}
	exp := a.now().Add(a.ttl).Truncate(time.Second)
	body := "v1." + strconv.FormatInt(exp.Unix(), 10) + "." + base64.RawURLEncoding.EncodeToString(raw)
	return body + "." + a.mac("session", body), exp, nil
}

// valid reports whether v is a session cookie this token signed that has
// not expired.
func (a *Auth) valid(v string) bool {
	i := strings.LastIndexByte(v, '.')
	if i < 0 || len(v) > 256 {
		return false
	}
	body, sig := v[:i], v[i+1:]
	if !hmac.Equal([]byte(sig), []byte(a.mac("session", body))) {
		return false
	}
	f := strings.Split(body, ".")
	if len(f) != 3 || f[0] != "v1" {
		return false
	}
	exp, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || a.now().Unix() >= exp {
		return false
	}
	a.mu.Lock()
	_, out := a.out[sig]
	a.mu.Unlock()
	return !out
}

// signOut makes session cookie v nobody's, wherever a copy of it is,
// until it would have expired (in this process: another process that
// serves the dashboard with the same token keeps admitting it until
// then).
func (a *Auth) signOut(v string) {
	i := strings.LastIndexByte(v, '.')
	f := strings.Split(v[:max(i, 0)], ".")
	if i < 0 || len(f) != 3 {
		return
	}
	exp, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return
	}
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, e := range a.out {
		if !e.After(now) {
			delete(a.out, k)
		}
	}
	for len(a.out) >= MaxSignedOut {
		var soonest string
		for k, e := range a.out {
			if soonest == "" || e.Before(a.out[soonest]) {
				soonest = k
			}
		}
		delete(a.out, soonest)
	}
	a.out[v[i+1:]] = time.Unix(exp, 0)
}

// csrf is the CSRF token of session cookie v: the page holds it, a
// request from elsewhere cannot know it.
func (a *Auth) csrf(v string) string { return a.mac("csrf", v) }

// session returns the request's valid session cookie.
func (a *Auth) session(r *http.Request) (string, bool) {
	c, err := r.Cookie(CookieName)
	if err != nil || !a.valid(c.Value) {
		return "", false
	}
	return c.Value, true
}

// Authenticate admits a request with a valid session cookie; one that
// changes something (any method but GET and HEAD) also needs the
// session's CSRF token in X-CSRF-Token and, when its browser says where
// it comes from (Origin, Sec-Fetch-Site), the page's origin. It
// implements api.Authenticator.
func (a *Auth) Authenticate(r *http.Request) error {
	v, ok := a.session(r)
	if !ok {
		return &api.Error{Code: http.StatusUnauthorized, Message: "not signed in: sign in at /ui/login, or send the API bearer token"}
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return nil
	}
	if err := sameOrigin(r); err != nil {
		return err
	}
	got := r.Header.Get(CSRFHeader)
	if got == "" || !hmac.Equal([]byte(got), []byte(a.csrf(v))) {
		return &api.Error{Code: http.StatusForbidden, Message: "missing or wrong " + CSRFHeader + ": a request that changes something must come from the dashboard's page"}
	}
	return nil
}

// SignIn names the sign-in of a request with a valid session cookie (a
// digest of the cookie, the same for every request of that browser's
// session); empty without one. It implements api.SignIns, which bounds
// the status streams one sign-in holds open.
func (a *Auth) SignIn(r *http.Request) string {
	v, ok := a.session(r)
	if !ok {
		return ""
	}
	return digest(v)
}

// sameOrigin refuses a request its browser says comes from another site.
func sameOrigin(r *http.Request) error {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return &api.Error{Code: http.StatusForbidden, Message: "request from another site (Sec-Fetch-Site: " + site + ")"}
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return &api.Error{Code: http.StatusForbidden, Message: "request from another origin (" + o + ")"}
		}
	}
	return nil
}

// setSession signs the request's sender in: a new session cookie.
func (a *Auth) setSession(w http.ResponseWriter, r *http.Request) error {
	v, exp, err := a.newSession()
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: v, Path: "/", Expires: exp, MaxAge: int(a.ttl / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r)})
	return nil
}

// clearSession signs the sender out.
func clearSession(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r)})
}

// secure reports whether the request came over TLS, to this listener or
// to a proxy in front of it that says so.
func secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}
