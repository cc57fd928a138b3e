// Package api is the runtime API: the NATS micro service "jetloop" on
// jl.api.<endpoint>, with one endpoint per CLI verb (agents, apply, send,
// status, show, steer, interrupt, resume, cancel, approve, deny, fork,
// schedules, events, dlq, and an agent's versions: history, definition,
// diff, rollback, rollout), and the HTTP routes that expose the same
// operations (MountHTTP: control, the paged status list, show, context,
// blobs, agents, history, schedules, events, dead letters) with the status
// stream (server-sent events of jl.status.>), which the dashboard (package
// ui) calls with its session cookie in place of the bearer token.
//
// The CLI is one client of it (Client); an orchestrating agent is another:
// everything a person can do with `jetloop …` is a request on NATS. Requests
// and responses are JSON (the types in this package). A failed request is
// answered with micro's error headers, Nats-Service-Error-Code (an HTTP
// status: 400 bad request, 404 not found, 409 conflict, 500 internal, 503
// unavailable, 504 timeout) and Nats-Service-Error (the message), and the
// Client turns them into an *Error that errors.Is matches against
// ErrBadRequest, ErrNotFound, ErrConflict, ErrUnavailable and ErrTimeout.
//
// A control verb is checked against the session before it is published
// (CheckControl): an unknown agent or session is 404, a verb the session
// cannot take as it stands is 409 (an approve of a call that is not
// pending names the pending one), a fork past the last turn is 400, and
// nothing is stored.
//
// Several processes may serve the API at once: micro's queue group gives
// each request to one of them. Nothing is kept in the service: every
// endpoint reads and writes JetStream (jl_agents, jl_sessions, JL_IN,
// JL_CTL, jl_schedules, JL_AUDIT) through the packages that own those
// records.
//
// It does not apply control messages (the worker does), validate them
// (package control does) or decide who may call it: NATS permissions on
// jl.api.> and the HTTP bearer token do.
package api
