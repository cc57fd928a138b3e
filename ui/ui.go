package ui

import (
	"bytes"
	"embed"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
)

//go:embed assets
var assets embed.FS

// pages are the HTML documents, rendered per request (the CSRF token,
// a login error).
var pages = template.Must(template.ParseFS(assets, "assets/*.html"))

// static are the assets served as they are: the stylesheet and the
// script.
var static = func() fs.FS {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err)
	}
	return sub
}()

// securityHeaders are set on every response of the dashboard: nothing
// from elsewhere runs or loads, the page cannot be framed, and no URL
// (a login link's code) leaks to another site. The referrer policy is
// same-origin, not no-referrer: under no-referrer a browser posts the
// page's forms (sign in, sign out) with Origin: null, and in no secure
// context (plain HTTP to a name that is not loopback) without
// Sec-Fetch-Site either, so they could not be told from another site's.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
		"base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
	"X-Content-Type-Options": "nosniff",
	"Referrer-Policy":        "same-origin",
	"X-Frame-Options":        "DENY",
}

// Mount registers the dashboard on mux:
//
//	GET  /, /ui             → redirect to /ui/
//	GET  /ui/{$}            the page (signed in), else a redirect to the login
//	GET  /ui/assets/…       stylesheet and script
//	GET  /ui/login[?code=]  the login form; a one-time code signs in
//	POST /ui/login          token=… signs in
//	POST /ui/logout         signs out (CSRF token required): the
//	                        cookie is refused from then on, copies too
//
// The page reads and acts through the API's routes, which take the
// session cookie when MountHTTP's Sessions is a.
func (a *Auth) Mount(mux *http.ServeMux, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &handler{a: a, log: log}
	mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusFound))
	mux.HandleFunc("GET /ui/{$}", h.page)
	mux.Handle("GET /ui/assets/", withHeaders(http.StripPrefix("/ui/assets/", assetServer())))
	mux.HandleFunc("GET /ui/login", h.loginForm)
	mux.HandleFunc("POST /ui/login", h.login)
	mux.HandleFunc("POST /ui/logout", h.logout)
}

type handler struct {
	a   *Auth
	log *slog.Logger
}

// assetServer serves the static assets; the HTML documents are only
// rendered.
func assetServer() http.Handler {
	files := http.FileServerFS(static)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ".html") || r.URL.Path == "" || strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

func withHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range securityHeaders {
			w.Header().Set(k, v)
		}
		h.ServeHTTP(w, r)
	})
}

func render(w http.ResponseWriter, status int, name string, data any) {
	var b bytes.Buffer
	if err := pages.ExecuteTemplate(&b, name, data); err != nil {
		http.Error(w, "render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	for k, v := range securityHeaders {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// page serves the dashboard to a signed-in sender, with the session's
// CSRF token.
func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	v, ok := h.a.session(r)
	if !ok {
		http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
		return
	}
	render(w, http.StatusOK, "index.html", map[string]string{"CSRF": h.a.csrf(v)})
}

type loginData struct {
	Error string
}

// loginForm shows the form, or redeems a one-time code.
func (h *handler) loginForm(w http.ResponseWriter, r *http.Request) {
	code := r.URL.Query().Get("code")
	if code == "" {
		if _, ok := h.a.session(r); ok {
			http.Redirect(w, r, "/ui/", http.StatusSeeOther)
			return
		}
		render(w, http.StatusOK, "login.html", loginData{})
		return
	}
	if !h.a.redeem(code) {
		h.log.Info("dashboard login link refused: used or expired", "remote", r.RemoteAddr)
		render(w, http.StatusUnauthorized, "login.html", loginData{Error: "This login link was used already or has expired. Sign in with the API token."})
		return
	}
	if err := h.a.setSession(w, r); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	h.log.Info("dashboard sign-in by a one-time link", "remote", r.RemoteAddr)
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

// maxLoginBody bounds the login form.
const maxLoginBody = 4 << 10

// login signs in with the API token.
func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	if err := sameOrigin(r); err != nil {
		render(w, http.StatusForbidden, "login.html", loginData{Error: "Sign in from this page."})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	if err := r.ParseForm(); err != nil {
		render(w, http.StatusBadRequest, "login.html", loginData{Error: "The form could not be read."})
		return
	}
	ok, limited := h.a.checkToken(strings.TrimSpace(r.PostForm.Get("token")))
	switch {
	case limited:
		w.Header().Set("Retry-After", "5")
		render(w, http.StatusTooManyRequests, "login.html", loginData{Error: "Too many wrong tokens; wait a few seconds."})
		return
	case !ok:
		h.log.Info("dashboard sign-in refused: wrong token", "remote", r.RemoteAddr)
		render(w, http.StatusUnauthorized, "login.html", loginData{Error: "That is not the API token."})
		return
	}
	if err := h.a.setSession(w, r); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	h.log.Info("dashboard sign-in by the token", "remote", r.RemoteAddr)
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

// logout signs out: it takes the page's CSRF token, so another site
// cannot sign a user out.
func (h *handler) logout(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	_ = r.ParseForm()
	if r.Header.Get(CSRFHeader) == "" {
		r.Header.Set(CSRFHeader, r.PostForm.Get("csrf"))
	}
	if err := h.a.Authenticate(r); err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	if v, ok := h.a.session(r); ok {
		h.a.signOut(v)
	}
	clearSession(w, r)
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}
