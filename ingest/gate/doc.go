// Package gate admits HTTP connections to the receivers before their
// bodies cost anything: a sender gets a request slot and room for its body
// from a pool, and its body must arrive at a minimum rate within a
// deadline, or the request is cut.
//
// There are two pools. Senders whose credentials are in the headers (a
// bearer token) are checked before they reach the verified pool. Senders
// that can only be verified once the whole body is read (GitHub's and
// Slack's signatures are HMACs of the body) draw from the unverified
// pool, which is bounded in total and per remote address (an IPv4 address,
// an IPv6 /64), so that no number of unauthenticated connections can take
// the slots or bytes of authenticated traffic, and one address cannot take
// the whole unverified pool. A receiver can also refuse, before anything
// else, every address outside a list of networks (GitHub's published hook
// ranges, say). Conns bounds a listener's open connections in total and
// per address, idle keep-alive connections giving way to new ones.
// A request answered with nothing of its body still in use gives the
// body's buffer to the next request's body (Admission.Recycle), so a
// steady flow of webhooks reads into the same memory, not new.
//
// Gate does not verify credentials (the receivers do, since only they know
// which), parse bodies or rate-limit events (package admission does).
package gate
