// Package health serves a process's liveness and readiness over HTTP:
// GET /healthz answers 200 while every registered check passes (NATS
// connected, streams provisioned), GET /readyz answers 200 once the process
// has finished starting and is not shutting down. It owns no checks of its
// own: components register theirs.
package health
