// Package ghfake is an in-process fake of the GitHub REST API on
// loopback, for tests. It speaks the real wire format: it verifies the
// App JWT's RS256 signature with the App's public key and its claims,
// issues installation tokens with an expiry and enforces them (scoped to
// the installation's repositories), and answers issue comments, pull
// request reviews, check runs and labels with GitHub's response shapes,
// paging (Link headers) and errors (401, 404, 422). It can answer
// requests rate-limited (403 with x-ratelimit-*, or 429 with Retry-After)
// and records what was posted, by whom, and how many token exchanges were
// made. GET /app (the App JWT) and GET /user (a personal access token)
// say who writes, and AddComment, AddReview and AddCheckRun plant what
// others wrote, so a probe can be shown to read only its own writes.
package ghfake
