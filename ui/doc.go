// Package ui is the dashboard: a web page served under /ui/ by the
// ingest's HTTP listener, shipped inside the binary (embed), with no
// build step and no asset from anywhere else. The page is plain HTML,
// one stylesheet and one hand-written JavaScript module; it reads and
// acts through the runtime API's HTTP routes (package api's MountHTTP:
// sessions, a session's timeline and context, blobs, agents, schedules,
// admission decisions, dead letters, control verbs, and the status
// stream), never the buckets.
//
// It owns who may see the page: a login by the API bearer token, or by a
// one-time link (LoginLink) that `jetloop dev` prints, either of which
// sets a session cookie (HttpOnly, SameSite=Strict, Secure when the
// request came over TLS) signed with a key derived from the token, so
// every ingest process with the same token accepts it and changing the
// token signs everyone out. Auth implements api.Authenticator: the API's
// routes take the cookie in place of the bearer token, and a request that
// changes anything must carry the page's CSRF token (X-CSRF-Token) and
// come from the page's origin.
//
// It does not implement the operations (package api does) or hold any
// state beyond the outstanding one-time codes of this process.
package ui
