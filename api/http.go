package api

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/ingest/gate"
)

// maxControlBody bounds the body of an HTTP control request.
const maxControlBody = control.MaxData + 4<<10

// HTTPConfig configures the HTTP routes of the API.
type HTTPConfig struct {
	// Token is the bearer token every route requires. Empty: the routes
	// answer 503 (not configured).
	Token string
	// Sessions, when set, also admits requests without an Authorization
	// header that it authenticates: the dashboard's, by their session
	// cookie (package ui), which must carry its CSRF token to change
	// anything. Nil: the bearer token alone.
	Sessions Authenticator
	// Gate admits a request, once its token is checked, from its verified
	// pool and reads the body at its minimum rate within the request's
	// deadline. Share the listener's gate. Nil: a gate of its own, with
	// package gate's defaults.
	Gate *gate.Gate
	// Stop ends the status streams when it is closed (the process
	// stops), so the listener's graceful shutdown does not wait for
	// them; nil: they end when their clients go.
	Stop <-chan struct{}
	// MaxStreams bounds the status streams served at once; default
	// DefaultMaxStreams.
	MaxStreams int
	// MaxStreamsPerSignIn bounds the status streams of one sign-in (a
	// browser's session cookie, as Sessions names it when it implements
	// SignIns) at once, so one browser (tabs left open, a page that
	// leaks its streams) cannot take every stream; 429 beyond. Default
	// DefaultMaxStreamsPerSignIn. Requests with the bearer token are
	// bounded by MaxStreams alone.
	MaxStreamsPerSignIn int
}

// SignIns is what an Authenticator may also do: name the sign-in a
// request it admits belongs to (the same for every request of one
// browser's session), so the API bounds what one sign-in holds open.
type SignIns interface {
	SignIn(r *http.Request) string
}

// Authenticator authenticates a request that carries no bearer token,
// by what else it carries (a session cookie): nil admits it; an *Error
// (401, 403) refuses it with its code. A request that would change
// something (any method but GET and HEAD) must also prove it comes from
// the page the session was given (a CSRF token).
type Authenticator interface {
	Authenticate(r *http.Request) error
}

// HTTPControl is the body of POST /v1/agents/{agent}/sessions/{session}/control.
type HTTPControl struct {
	Verb   control.Verb `json:"verb"`
	Text   string       `json:"text,omitempty"`
	CallID string       `json:"call_id,omitempty"`
	Turn   *int         `json:"turn,omitempty"`
	As     string       `json:"as,omitempty"`
}

// MountHTTP registers the API's HTTP routes on mux, each the operation of
// the NATS endpoint it names (a session name, which may hold "/" and "#",
// percent-encoded in the path):
//
//	POST /v1/agents/{agent}/sessions/{session}/control    → ControlResponse, 202 (steer … fork)
//	GET  /v1/sessions[?agent&status&since&limit&cursor]     → StatusResponse (status, paged)
//	GET  /v1/sessions/stream[?agent&session&status]         → text/event-stream of status changes (jl.status.>)
//	GET  /v1/agents/{agent}/sessions/{session}[?from&limit] → ShowResponse (show)
//	GET  /v1/agents/{agent}/sessions/{session}/context    → ContextResponse (context)
//	GET  /v1/agents/{agent}/sessions/{session}/blobs/{handle}[?offset&limit] → BlobResponse
//	GET  /v1/agents                                         → AgentsResponse (agents)
//	GET  /v1/agents/{agent}/history                         → HistoryResponse (agents history)
//	GET  /v1/schedules                                      → SchedulesResponse (schedules)
//	POST /v1/agents/{agent}/schedules/{schedule}/{action}   → SchedulesResponse (schedules resume|suspend|trigger)
//	GET  /v1/events[?agent&since&limit]                     → EventsResponse (events)
//	GET  /v1/dlq[?reason&agent&since&from&limit]            → DLQResponse (dlq ls)
//	GET  /v1/dlq/{seq}                                      → DLQResponse (dlq show)
//	POST /v1/dlq/{seq}/redrive                              → DLQResponse (dlq redrive)
//
// Every route takes the bearer token, or a session of cfg.Sessions. A
// control request's Idempotency-Key header is the message id: a retry
// with the same key is answered as the first. A query parameter a route
// does not take, or one given twice, is refused with 400. Errors answer
// {"code": ..., "message": ...} with the code as status.
func (s *Service) MountHTTP(mux *http.ServeMux, cfg HTTPConfig) {
	if cfg.Gate == nil {
		cfg.Gate, _ = gate.New(gate.Config{})
	}
	if cfg.MaxStreams == 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	if cfg.MaxStreamsPerSignIn == 0 {
		cfg.MaxStreamsPerSignIn = DefaultMaxStreamsPerSignIn
	}
	session := "/v1/agents/{agent}/sessions/{session}"
	mux.Handle("POST "+session+"/control", s.httpRoute("control", cfg, maxControlBody, s.httpControl))
	mux.Handle("GET /v1/sessions", s.httpRoute("sessions", cfg, 0, s.httpSessions))
	mux.Handle("GET /v1/sessions/stream", s.streamRoute(cfg))
	mux.Handle("GET "+session, s.httpRoute("show", cfg, 0, s.httpShow))
	mux.Handle("GET "+session+"/context", s.httpRoute("context", cfg, 0, s.httpContext))
	mux.Handle("GET "+session+"/blobs/{handle}", s.httpRoute("blob", cfg, 0, s.httpBlob))
	mux.Handle("GET /v1/agents", s.httpRoute("agents", cfg, 0, s.httpAgents))
	mux.Handle("GET /v1/agents/{agent}/history", s.httpRoute("history", cfg, 0, s.httpHistory))
	mux.Handle("GET /v1/schedules", s.httpRoute("schedules", cfg, 0, s.httpSchedules))
	mux.Handle("POST /v1/agents/{agent}/schedules/{schedule}/{action}", s.httpRoute("schedules", cfg, 4<<10, s.httpScheduleAction))
	mux.Handle("GET /v1/events", s.httpRoute("events", cfg, 0, s.httpEvents))
	mux.Handle("GET /v1/dlq", s.httpRoute("dlq", cfg, 0, s.httpDLQ))
	mux.Handle("GET /v1/dlq/{seq}", s.httpRoute("dlq", cfg, 0, s.httpDLQShow))
	mux.Handle("POST /v1/dlq/{seq}/redrive", s.httpRoute("dlq", cfg, 4<<10, s.httpDLQRedrive))
}

// authenticate admits a request by its bearer token or, without an
// Authorization header, by cfg's Sessions.
func authenticate(cfg HTTPConfig, r *http.Request) error {
	if cfg.Token == "" {
		return errorf(http.StatusServiceUnavailable, "API token not configured (JETLOOP_API_TOKEN)")
	}
	h := r.Header.Get("Authorization")
	if h == "" && cfg.Sessions != nil {
		return cfg.Sessions.Authenticate(r)
	}
	got, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(cfg.Token)) != 1 {
		return errorf(http.StatusUnauthorized, "missing or wrong bearer token")
	}
	return nil
}

// httpRoute wraps a route with the authentication (bearer token or
// session), a slot from the gate's verified pool, the body (at most
// maxBody bytes, read at the gate's minimum rate), a deadline, errors as
// JSON and metrics.
func (s *Service) httpRoute(name string, cfg HTTPConfig, maxBody int64, fn func(ctx context.Context, r *http.Request, body []byte) (int, any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		status, resp, err := func() (int, any, error) {
			if err := authenticate(cfg, r); err != nil {
				gate.Unread(w)
				return 0, nil, err
			}
			adm, err := cfg.Gate.Admit(cfg.Gate.Verified(), r, maxBody)
			if err != nil {
				gate.Unread(w)
				return 0, nil, gateError(err)
			}
			defer adm.Release()
			ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
			defer cancel()
			var body []byte
			if maxBody > 0 {
				deadline, _ := ctx.Deadline()
				if body, err = adm.ReadBody(w, r, maxBody, deadline); err != nil {
					return 0, nil, gateError(err)
				}
			}
			return fn(ctx, r, body)
		}()
		if err != nil {
			e := classify(err)
			status, resp = e.Code, e
			if e.Code == http.StatusServiceUnavailable {
				w.Header().Set("Retry-After", "5")
			}
			s.logFailure(name, "http", e)
		}
		s.observe(name, "http", status, start)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(resp)
	})
}

// gateError is the API error of a refusal by the gate.
func gateError(err error) error {
	if st := gate.Status(err); st != 0 {
		return &Error{Code: st, Message: err.Error()}
	}
	return errorf(http.StatusBadRequest, "%v", err)
}

func (s *Service) httpControl(ctx context.Context, r *http.Request, body []byte) (int, any, error) {
	req, err := decode[HTTPControl](body)
	if err != nil {
		return 0, nil, err
	}
	if req.Verb == "" {
		return 0, nil, errorf(http.StatusBadRequest, `body needs "verb": one of steer, interrupt, resume, cancel, approve, deny, fork`)
	}
	verb, err := control.ParseVerb(string(req.Verb))
	if err != nil {
		return 0, nil, err
	}
	id := r.Header.Get("Idempotency-Key")
	resp, err := s.control(ctx, verb, ControlRequest{
		Agent: r.PathValue("agent"), Session: r.PathValue("session"),
		Text: req.Text, CallID: req.CallID, Turn: req.Turn, As: req.As, ID: id,
	}, sourceHTTP)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, resp, nil
}
