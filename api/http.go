package api

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
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
	// Gate admits a request, once its token is checked, from its verified
	// pool and reads the body at its minimum rate within the request's
	// deadline. Share the listener's gate. Nil: a gate of its own, with
	// package gate's defaults.
	Gate *gate.Gate
}

// HTTPControl is the body of POST /v1/agents/{agent}/sessions/{session}/control.
type HTTPControl struct {
	Verb   control.Verb `json:"verb"`
	Text   string       `json:"text,omitempty"`
	CallID string       `json:"call_id,omitempty"`
	Turn   *int         `json:"turn,omitempty"`
	As     string       `json:"as,omitempty"`
}

// MountHTTP registers the API's HTTP routes on mux:
//
//	POST /v1/agents/{agent}/sessions/{session}/control   bearer token → control message (202 with ControlResponse)
//	GET  /v1/sessions[?agent=A&status=S&since=T&limit=N&cursor=C]                  bearer token → StatusResponse
//	GET  /v1/agents/{agent}/sessions/{session}/context   bearer token → ContextResponse
//
// A control request's Idempotency-Key header is the message id: a retry
// with the same key inside JL_CTL's duplicate window is stored once.
// Errors answer {"code": ..., "message": ...} with the code as status.
func (s *Service) MountHTTP(mux *http.ServeMux, cfg HTTPConfig) {
	if cfg.Gate == nil {
		cfg.Gate, _ = gate.New(gate.Config{})
	}
	mux.Handle("POST /v1/agents/{agent}/sessions/{session}/control", s.httpRoute("control", cfg, maxControlBody, s.httpControl))
	mux.Handle("GET /v1/sessions", s.httpRoute("sessions", cfg, 0, s.httpSessions))
	mux.Handle("GET /v1/agents/{agent}/sessions/{session}/context", s.httpRoute("context", cfg, 0, s.httpContext))
}

func (s *Service) httpContext(ctx context.Context, r *http.Request, _ []byte) (int, any, error) {
	resp, err := s.sessionContext(ctx, ContextRequest{Agent: r.PathValue("agent"), Session: r.PathValue("session")})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, resp, nil
}

// httpRoute wraps a route with the bearer check, a slot from the gate's
// verified pool, the body (at most maxBody bytes, read at the gate's
// minimum rate), a deadline, errors as JSON and metrics.
func (s *Service) httpRoute(name string, cfg HTTPConfig, maxBody int64, fn func(ctx context.Context, r *http.Request, body []byte) (int, any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		status, resp, err := func() (int, any, error) {
			if cfg.Token == "" {
				gate.Unread(w)
				return 0, nil, errorf(http.StatusServiceUnavailable, "API token not configured (JETLOOP_API_TOKEN)")
			}
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(cfg.Token)) != 1 {
				gate.Unread(w)
				return 0, nil, errorf(http.StatusUnauthorized, "missing or wrong bearer token")
			}
			release, err := cfg.Gate.Admit(cfg.Gate.Verified(), r, maxBody)
			if err != nil {
				gate.Unread(w)
				return 0, nil, gateError(err)
			}
			defer release()
			ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
			defer cancel()
			var body []byte
			if maxBody > 0 {
				deadline, _ := ctx.Deadline()
				if body, err = cfg.Gate.ReadBody(w, r, maxBody, deadline); err != nil {
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

func (s *Service) httpSessions(ctx context.Context, r *http.Request, _ []byte) (int, any, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return 0, nil, errorf(http.StatusBadRequest, "query: %v", err)
	}
	for k, vs := range q {
		switch {
		case k != "agent" && k != "status" && k != "since" && k != "limit" && k != "cursor":
			return 0, nil, errorf(http.StatusBadRequest, "unknown query parameter %q: want agent, status, since, limit or cursor", k)
		case len(vs) > 1:
			return 0, nil, errorf(http.StatusBadRequest, "query parameter %q given %d times", k, len(vs))
		}
	}
	req := StatusRequest{Agent: q.Get("agent"), Status: q.Get("status")}
	if v := q.Get("since"); v != "" {
		if req.Since, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return 0, nil, errorf(http.StatusBadRequest, "since %q: want an RFC 3339 time", v)
		}
	}
	if v := q.Get("limit"); v != "" {
		if req.Limit, err = strconv.Atoi(v); err != nil || req.Limit < 1 {
			return 0, nil, errorf(http.StatusBadRequest, "limit %q: want a positive number", v)
		}
	}
	if v := q.Get("cursor"); v != "" {
		if req.Cursor, err = strconv.ParseUint(v, 10, 64); err != nil {
			return 0, nil, errorf(http.StatusBadRequest, "cursor %q: want the next of the previous page", v)
		}
	}
	resp, err := s.status(ctx, req)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, resp, nil
}
