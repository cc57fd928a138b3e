package ui_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/ui"
)

// clock is a test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// site serves the dashboard beside a route that Authenticate guards, as
// the API's routes are.
type site struct {
	*httptest.Server
	auth  *ui.Auth
	clock *clock
}

func start(t *testing.T, tls bool) *site {
	t.Helper()
	c := &clock{t: time.Now()}
	a, err := ui.NewAuth("s3cret-token", ui.WithClock(c.now))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	a.Mount(mux, nil)
	mux.HandleFunc("/v1/thing", func(w http.ResponseWriter, r *http.Request) {
		if err := a.Authenticate(r); err != nil {
			var e *api.Error
			errors.As(err, &e)
			http.Error(w, e.Message, e.Code)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	var srv *httptest.Server
	if tls {
		srv = httptest.NewTLSServer(mux)
	} else {
		srv = httptest.NewServer(mux)
	}
	t.Cleanup(srv.Close)
	return &site{Server: srv, auth: a, clock: c}
}

// browser is a client with a cookie jar that does not follow redirects.
func (s *site) browser(t *testing.T) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := *s.Client()
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

func get(t *testing.T, c *http.Client, u string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func send(t *testing.T, c *http.Client, method, u string, header map[string]string, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func sessionCookie(t *testing.T, resp *http.Response) *http.Cookie {
	t.Helper()
	for _, c := range resp.Cookies() {
		if c.Name == ui.CookieName {
			return c
		}
	}
	t.Fatalf("no %s cookie in %v", ui.CookieName, resp.Header)
	return nil
}

var csrfMeta = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`)

// The one-time link signs in once, with a cookie the page's scripts
// cannot read and other sites do not send; the page carries the CSRF
// token; a used or expired link signs nobody in.
func TestLoginLink(t *testing.T) {
	s := start(t, false)
	link, err := s.auth.LoginLink(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	b := s.browser(t)
	resp, _ := get(t, b, link)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("link: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	c := sessionCookie(t, resp)
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Secure || c.Path != "/" || c.MaxAge != int(ui.DefaultSessionTTL/time.Second) {
		t.Fatalf("cookie %+v: want HttpOnly, SameSite=Strict, Path=/, not Secure without TLS", c)
	}
	resp, page := get(t, b, s.URL+"/ui/")
	m := csrfMeta.FindStringSubmatch(page)
	if resp.StatusCode != 200 || m == nil || !strings.Contains(page, `src="/ui/assets/app.js"`) {
		t.Fatalf("page: %d\n%s", resp.StatusCode, page)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Fatalf("CSP %q", csp)
	}
	// Used once.
	other := s.browser(t)
	if resp, body := get(t, other, link); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "used already or has expired") || len(resp.Cookies()) != 0 {
		t.Fatalf("the link again: %d %v", resp.StatusCode, resp.Cookies())
	}
	// Expired after ten minutes.
	late, _ := s.auth.LoginLink(s.URL)
	s.clock.add(ui.DefaultLinkTTL + time.Second)
	if resp, _ := get(t, other, late); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("an expired link: %d", resp.StatusCode)
	}
	// The session lasts its lifetime, no more.
	if resp, body := get(t, b, s.URL+"/v1/thing"); resp.StatusCode != 200 {
		t.Fatalf("signed in: %d %s", resp.StatusCode, body)
	}
	s.clock.add(ui.DefaultSessionTTL)
	if resp, _ := get(t, b, s.URL+"/v1/thing"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a session past its lifetime: %d", resp.StatusCode)
	}
	if resp, _ := get(t, b, s.URL+"/ui/"); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/login" {
		t.Fatalf("the page signed out: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// The token signs in at the form; a wrong one does not, and many wrong
// ones are refused for a while; over TLS the cookie is Secure.
func TestLoginForm(t *testing.T) {
	s := start(t, true)
	b := s.browser(t)
	if resp, body := get(t, b, s.URL+"/ui/login"); resp.StatusCode != 200 || !strings.Contains(body, `<label for="token">`) {
		t.Fatalf("form: %d", resp.StatusCode)
	}
	form := func(token string) *http.Response {
		resp, _ := send(t, b, "POST", s.URL+"/ui/login", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, url.Values{"token": {token}}.Encode())
		return resp
	}
	if resp := form("s3cret-token"); resp.StatusCode != http.StatusSeeOther || !sessionCookie(t, resp).Secure {
		t.Fatalf("the token over TLS: %d %v", resp.StatusCode, resp.Cookies())
	}
	if resp := form("guess"); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Fatalf("a wrong token: %d", resp.StatusCode)
	}
	limited := false
	for range 40 {
		if form("guess").StatusCode == http.StatusTooManyRequests {
			limited = true
			break
		}
	}
	if !limited {
		t.Fatal("40 wrong tokens at once were all read")
	}
	// Past the rate, a guess is refused unread, the right one as well:
	// otherwise a guesser at any speed still learns which guess is right.
	if resp := form("s3cret-token"); resp.StatusCode != http.StatusTooManyRequests || len(resp.Cookies()) != 0 {
		t.Fatalf("the token past the rate of wrong ones: %d %v, want 429 and no cookie", resp.StatusCode, resp.Cookies())
	}
	s.clock.add(5 * time.Second)
	if resp := form("s3cret-token"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the token once the rate allows again: %d", resp.StatusCode)
	}
	resp, _ := send(t, b, "POST", s.URL+"/ui/login", map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "https://evil.example"}, "token=s3cret-token")
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a sign-in posted from another site: %d", resp.StatusCode)
	}
}

// A signed-in request reads; one that changes something needs the
// page's CSRF token and the page's origin; a forged or foreign cookie is
// nobody's.
func TestAuthenticate(t *testing.T) {
	s := start(t, false)
	b := s.browser(t)
	link, _ := s.auth.LoginLink(s.URL)
	get(t, b, link)
	_, page := get(t, b, s.URL+"/ui/")
	token := csrfMeta.FindStringSubmatch(page)[1]
	host := strings.TrimPrefix(s.URL, "http://")
	tests := []struct {
		name   string
		method string
		header map[string]string
		want   int
	}{
		{name: "read", method: "GET", want: 200},
		{name: "change without the token", method: "POST", want: http.StatusForbidden},
		{name: "change with a wrong token", method: "POST", header: map[string]string{ui.CSRFHeader: "x" + token}, want: http.StatusForbidden},
		{name: "change with the token", method: "POST", header: map[string]string{ui.CSRFHeader: token}, want: 200},
		{name: "with the token from the page's origin", method: "POST", header: map[string]string{ui.CSRFHeader: token, "Origin": "http://" + host, "Sec-Fetch-Site": "same-origin"}, want: 200},
		{name: "with the token from another origin", method: "POST", header: map[string]string{ui.CSRFHeader: token, "Origin": "http://evil.example"}, want: http.StatusForbidden},
		{name: "from another site", method: "DELETE", header: map[string]string{ui.CSRFHeader: token, "Sec-Fetch-Site": "cross-site"}, want: http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if resp, body := send(t, b, tt.method, s.URL+"/v1/thing", tt.header, ""); resp.StatusCode != tt.want {
				t.Fatalf("%d %s, want %d", resp.StatusCode, body, tt.want)
			}
		})
	}
	// A cookie of another token, or altered, signs nobody in.
	other, _ := ui.NewAuth("another-token")
	for name, v := range map[string]string{"forged": "v1.9999999999.AAAA.sig", "tampered": strings.Replace(b.Jar.Cookies(mustURL(s.URL))[0].Value, "v1.", "v1.9", 1)} {
		req, _ := http.NewRequest("GET", s.URL+"/v1/thing", nil)
		req.AddCookie(&http.Cookie{Name: ui.CookieName, Value: v})
		if err := s.auth.Authenticate(req); err == nil {
			t.Errorf("a %s cookie is admitted", name)
		}
	}
	req, _ := http.NewRequest("GET", s.URL+"/v1/thing", nil)
	req.AddCookie(b.Jar.Cookies(mustURL(s.URL))[0])
	if err := other.Authenticate(req); err == nil {
		t.Error("another token's auth admits this token's session")
	}
	// The sign-in the API bounds streams by: one per session cookie,
	// none for a cookie that signs nobody in.
	if other.SignIn(req) != "" || s.auth.SignIn(req) == "" || s.auth.SignIn(req) == b.Jar.Cookies(mustURL(s.URL))[0].Value {
		t.Errorf("sign-in %q (another token's %q)", s.auth.SignIn(req), other.SignIn(req))
	}
	var _ api.SignIns = s.auth
	// Sign out takes the token too.
	if resp, _ := send(t, b, "POST", s.URL+"/ui/logout", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, ""); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("sign out without the token: %d", resp.StatusCode)
	}
	resp, _ := send(t, b, "POST", s.URL+"/ui/logout", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, url.Values{"csrf": {token}}.Encode())
	if resp.StatusCode != http.StatusSeeOther || sessionCookie(t, resp).MaxAge >= 0 {
		t.Fatalf("sign out: %d %v", resp.StatusCode, resp.Cookies())
	}
	if resp, _ := get(t, b, s.URL+"/v1/thing"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("after signing out: %d", resp.StatusCode)
	}
	// The signed-out cookie is nobody's, also where it was copied.
	copied, _ := http.NewRequest("GET", s.URL+"/v1/thing", nil)
	copied.AddCookie(req.Cookies()[0])
	if err := s.auth.Authenticate(copied); err == nil {
		t.Fatal("a copy of the signed-out cookie is still signed in")
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// The page's assets ship in the binary; the HTML is only rendered, never
// served as a file; / leads to the dashboard.
func TestAssets(t *testing.T) {
	s := start(t, false)
	b := s.browser(t)
	for path, want := range map[string]string{"/ui/assets/app.js": "text/javascript", "/ui/assets/style.css": "text/css"} {
		resp, body := get(t, b, s.URL+path)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), want) || len(body) < 100 || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	for _, path := range []string{"/ui/assets/index.html", "/ui/assets/", "/ui/assets/nosuch.js"} {
		if resp, _ := get(t, b, s.URL+path); resp.StatusCode != 404 {
			t.Errorf("%s: %d, want 404", path, resp.StatusCode)
		}
	}
	if resp, _ := get(t, b, s.URL+"/"); resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("/: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	// No asset comes from elsewhere.
	for _, path := range []string{"/ui/assets/app.js", "/ui/assets/style.css", "/ui/login"} {
		_, body := get(t, b, s.URL+path)
		if strings.Contains(body, "http://") || strings.Contains(body, "https://") || strings.Contains(body, "//cdn") {
			t.Errorf("%s names another origin", path)
		}
	}
}

func TestNewAuthRefusesNoToken(t *testing.T) {
	if _, err := ui.NewAuth(""); err == nil || !strings.Contains(err.Error(), "JETLOOP_API_TOKEN") {
		t.Fatalf("NewAuth without a token: %v", err)
	}
}
