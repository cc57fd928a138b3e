package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/dlq"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/schedule"
)

// Sentinels that an *Error matches by its code.
var (
	// ErrBadRequest (400): the request cannot be served as it is.
	ErrBadRequest = errors.New("bad request")
	// ErrNotFound (404): no such agent, session or schedule.
	ErrNotFound = errors.New("not found")
	// ErrConflict (409): the request does not fit the state of what it
	// addresses: an approve of a call that is not pending, a fork onto a
	// session that exists, a redrive of a dead letter that names nowhere
	// to go back to.
	ErrConflict = errors.New("conflict")
	// ErrNotAdmitted (422): a request the addressed agent does not take
	// (requests: off, or no trigger admits it); the message says why.
	ErrNotAdmitted = errors.New("not admitted")
	// ErrRateLimited (429): a request a rate limit dropped.
	ErrRateLimited = errors.New("rate limited")
	// ErrInternal (500): the service failed.
	ErrInternal = errors.New("internal error")
	// ErrUnavailable (503): no service answered, or JetStream did not;
	// try again.
	ErrUnavailable = errors.New("unavailable")
	// ErrTimeout (504): the request did not finish in time; it may or may
	// not have taken effect.
	ErrTimeout = errors.New("timeout")
)

var sentinels = map[int]error{
	http.StatusBadRequest:          ErrBadRequest,
	http.StatusNotFound:            ErrNotFound,
	http.StatusConflict:            ErrConflict,
	http.StatusUnprocessableEntity: ErrNotAdmitted,
	http.StatusTooManyRequests:     ErrRateLimited,
	http.StatusInternalServerError: ErrInternal,
	http.StatusServiceUnavailable:  ErrUnavailable,
	http.StatusGatewayTimeout:      ErrTimeout,
}

// Error is a failed request: an HTTP status as its code, and what failed.
type Error struct {
	// Code is an HTTP status: 400, 404, 409, 413, 422, 429, 500, 503 or
	// 504.
	Code int `json:"code"`
	// Message names what failed and why.
	Message string `json:"message"`
	// Problems lists every problem of a refused apply, one a line, as
	// "file:line:col: field: what".
	Problems []string `json:"problems,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s (%d)", e.Message, e.Code) }

// Is matches the sentinel of e's code.
func (e *Error) Is(target error) bool {
	s, ok := sentinels[e.Code]
	return ok && s == target
}

// errorf returns an *Error with code.
func errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// classify maps an error of the packages behind the API to an *Error.
func classify(err error) *Error {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, control.ErrInvalid), errors.Is(err, policies.ErrInvalid):
		return &Error{Code: http.StatusBadRequest, Message: err.Error()}
	case errors.Is(err, record.ErrNotFound), errors.Is(err, policies.ErrNotFound), errors.Is(err, schedule.ErrNotFound), errors.Is(err, dlq.ErrNotFound):
		return &Error{Code: http.StatusNotFound, Message: err.Error()}
	case errors.Is(err, dlq.ErrCannotRedrive):
		return &Error{Code: http.StatusConflict, Message: err.Error()}
	case errors.Is(err, dlq.ErrNoReadmit):
		return &Error{Code: http.StatusServiceUnavailable, Message: err.Error()}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return &Error{Code: http.StatusGatewayTimeout, Message: err.Error()}
	case errors.Is(err, context.Canceled), errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected):
		return &Error{Code: http.StatusServiceUnavailable, Message: err.Error()}
	}
	return &Error{Code: http.StatusInternalServerError, Message: err.Error()}
}

// codeString renders a code for micro's error header.
func codeString(code int) string { return strconv.Itoa(code) }
