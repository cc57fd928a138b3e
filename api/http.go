package api

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/jetloop/jetloop/control"
)

// maxControlBody bounds the body of an HTTP control request.
const maxControlBody = control.MaxData + 4<<10

// HTTPConfig configures the HTTP routes of the API.
type HTTPConfig struct {
	// Token is the bearer token every route requires. Empty: the routes
	// answer 503 (not configured).
	Token string
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
//	GET  /v1/sessions[?agent=A&status=S]                  bearer token → StatusResponse
//
// A control request's Idempotency-Key header is the message id: a retry
// with the same key inside JL_CTL's duplicate window is stored once.
// Errors answer {"code": ..., "message": ...} with the code as status.
func (s *Service) MountHTTP(mux *http.ServeMux, cfg HTTPConfig) {
	mux.Handle("POST /v1/agents/{agent}/sessions/{session}/control", s.httpRoute("control", cfg, s.httpControl))
	mux.Handle("GET /v1/sessions", s.httpRoute("sessions", cfg, s.httpSessions))
}

// httpRoute wraps a route with the bearer check, a deadline, errors as
// JSON and metrics.
func (s *Service) httpRoute(name string, cfg HTTPConfig, fn func(ctx context.Context, r *http.Request) (int, any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		status, resp, err := func() (int, any, error) {
			if cfg.Token == "" {
				return 0, nil, errorf(http.StatusServiceUnavailable, "API token not configured (JETLOOP_API_TOKEN)")
			}
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(cfg.Token)) != 1 {
				return 0, nil, errorf(http.StatusUnauthorized, "missing or wrong bearer token")
			}
			ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
			defer cancel()
			return fn(ctx, r)
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

func (s *Service) httpControl(ctx context.Context, r *http.Request) (int, any, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxControlBody+1))
	if err != nil {
		return 0, nil, errorf(http.StatusBadRequest, "read body: %v", err)
	}
	if len(body) > maxControlBody {
		return 0, nil, &Error{Code: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("body over %d bytes", maxControlBody)}
	}
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

func (s *Service) httpSessions(ctx context.Context, r *http.Request) (int, any, error) {
	q := r.URL.Query()
	resp, err := s.status(ctx, StatusRequest{Agent: q.Get("agent"), Status: q.Get("status")})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, resp, nil
}
