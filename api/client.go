package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/streams"
)

// DefaultClientTimeout bounds a request whose context has no deadline.
const DefaultClientTimeout = 30 * time.Second

// Client calls the runtime API over a NATS connection.
type Client struct {
	nc    *nats.Conn
	names streams.Names
}

// NewClient returns a client of the API of the deployment named by names.
func NewClient(nc *nats.Conn, names streams.Names) *Client {
	return &Client{nc: nc, names: names}
}

// Agents lists the stored agent definitions.
func (c *Client) Agents(ctx context.Context) (AgentsResponse, error) {
	return call[AgentsResponse](ctx, c, EndpointAgents, AgentsRequest{})
}

// Apply validates definitions and stores them, all or none.
func (c *Client) Apply(ctx context.Context, req ApplyRequest) (ApplyResponse, error) {
	return call[ApplyResponse](ctx, c, EndpointApply, req)
}

// History reads an agent's versions and rollout changes.
func (c *Client) History(ctx context.Context, req HistoryRequest) (HistoryResponse, error) {
	return call[HistoryResponse](ctx, c, EndpointHistory, req)
}

// Definition reads one version of an agent.
func (c *Client) Definition(ctx context.Context, req DefinitionRequest) (DefinitionResponse, error) {
	return call[DefinitionResponse](ctx, c, EndpointDefinition, req)
}

// Diff compares two versions of an agent.
func (c *Client) Diff(ctx context.Context, req DiffRequest) (DiffResponse, error) {
	return call[DiffResponse](ctx, c, EndpointDiff, req)
}

// Rollback stores an earlier version's content as the agent's next
// version.
func (c *Client) Rollback(ctx context.Context, req RollbackRequest) (ChangeResponse, error) {
	return call[ChangeResponse](ctx, c, EndpointRollback, req)
}

// Rollout starts, changes, promotes or ends an agent's rollout.
func (c *Client) Rollout(ctx context.Context, req RolloutRequest) (ChangeResponse, error) {
	return call[ChangeResponse](ctx, c, EndpointRollout, req)
}

// Send sends a user message to a session.
func (c *Client) Send(ctx context.Context, req SendRequest) (SendResponse, error) {
	return call[SendResponse](ctx, c, EndpointSend, req)
}

// Status lists sessions.
func (c *Client) Status(ctx context.Context, req StatusRequest) (StatusResponse, error) {
	return call[StatusResponse](ctx, c, EndpointStatus, req)
}

// Show reads a session's state and transcript.
func (c *Client) Show(ctx context.Context, req ShowRequest) (ShowResponse, error) {
	return call[ShowResponse](ctx, c, EndpointShow, req)
}

// Context returns what a session's next model call receives.
func (c *Client) Context(ctx context.Context, req ContextRequest) (ContextResponse, error) {
	return call[ContextResponse](ctx, c, EndpointContext, req)
}

// Control publishes a control message with verb for a session and
// returns once JetStream has stored it.
func (c *Client) Control(ctx context.Context, verb control.Verb, req ControlRequest) (ControlResponse, error) {
	if _, err := control.ParseVerb(string(verb)); err != nil {
		return ControlResponse{}, err
	}
	return call[ControlResponse](ctx, c, string(verb), req)
}

// Schedules lists schedules, or resumes or suspends one.
func (c *Client) Schedules(ctx context.Context, req SchedulesRequest) (SchedulesResponse, error) {
	return call[SchedulesResponse](ctx, c, EndpointSchedules, req)
}

// DLQ lists, shows or redrives dead letters.
func (c *Client) DLQ(ctx context.Context, req DLQRequest) (DLQResponse, error) {
	return call[DLQResponse](ctx, c, EndpointDLQ, req)
}

// Events reads recent admission decisions.
func (c *Client) Events(ctx context.Context, req EventsRequest) (EventsResponse, error) {
	return call[EventsResponse](ctx, c, EndpointEvents, req)
}

// call sends req to endpoint and decodes the response, or the *Error the
// service answered with.
func call[Resp any](ctx context.Context, c *Client, endpoint string, req any) (Resp, error) {
	var zero Resp
	subject := c.names.API(endpoint)
	body, err := json.Marshal(req)
	if err != nil {
		return zero, fmt.Errorf("api: %s: encode request: %w", endpoint, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultClientTimeout)
		defer cancel()
	}
	msg, err := c.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Data: body})
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return zero, &Error{Code: http.StatusServiceUnavailable,
			Message: fmt.Sprintf("no jetloop API answers on %s: is `jetloop dev` or `jetloop ingest` running against this server and prefix?", subject)}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return zero, &Error{Code: http.StatusGatewayTimeout, Message: fmt.Sprintf("%s: no answer in time; the request may or may not have taken effect", subject)}
	case err != nil:
		return zero, &Error{Code: http.StatusServiceUnavailable, Message: fmt.Sprintf("%s: %v", subject, err)}
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		return zero, responseError(subject, code, msg)
	}
	var resp Resp
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return zero, &Error{Code: http.StatusInternalServerError, Message: fmt.Sprintf("%s: decode response: %v", subject, err)}
	}
	return resp, nil
}

// responseError reads an error answer: the *Error in the body when there
// is one, else micro's headers.
func responseError(subject, code string, msg *nats.Msg) error {
	var e Error
	if err := json.Unmarshal(msg.Data, &e); err == nil && e.Code != 0 && e.Message != "" {
		return &e
	}
	n, err := strconv.Atoi(code)
	if err != nil {
		n = http.StatusInternalServerError
	}
	desc := msg.Header.Get(micro.ErrorHeader)
	if desc == "" {
		desc = subject + " failed"
	}
	return &Error{Code: n, Message: desc}
}
