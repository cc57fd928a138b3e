// Package ghapp owns jetloop's side of the GitHub REST API: which
// credentials an agent acts with (a GitHub App or a token, from its
// definition's github: settings over the deployment's
// JETLOOP_GITHUB_APP_ID, JETLOOP_GITHUB_PRIVATE_KEY_FILE and
// JETLOOP_GITHUB_TOKEN), the installation tokens of an App, and GitHub's
// rate-limit answers.
//
// A worker holds one Clients for all its sessions. Clients.For returns a
// go-github client for one repository: as an App it mints the App JWT
// (RS256) and exchanges it for the installation token of the event's
// installation (or the repository's, looked up once and cached), caches the
// token until a minute before it expires, and refreshes it single-flight
// per installation, so sessions that need a token at the same moment cause
// one exchange; a token GitHub refuses (401: revoked, or expired by
// GitHub's clock before ours) is dropped, so the next request exchanges a
// new one. A 403 or 429 that GitHub marks as a rate limit
// (Retry-After, or x-ratelimit-remaining 0 with x-ratelimit-reset) holds
// back every request of that installation until the limit resets and is
// retried in the transport, so a rate limit costs the run neither a turn
// nor a token; a wait longer than MaxRateLimitWait, or past the call's
// deadline, fails the request at once with a *RateLimitError naming the
// reset time. Client.Login says who a credential writes as (the App's
// bot, from GET /app, or the token's user, from GET /user), asked once
// per credential, so a probe can tell the tool's own writes from others'
// that carry the same marker.
//
// It does not define tools (tools/ does, with this package's clients) or
// decide when a call may run again after a crash (the worker does, asking
// a tool's probe).
package ghapp
