// Package ingest turns the outside world into admitted CloudEvents: the
// HTTP receivers for GitHub webhooks (POST /webhooks/github), CloudEvents
// over HTTP in binary and structured mode (POST /events) and user requests
// (POST /v1/agents/{agent}/sessions/{session}/messages).
//
// Before a receiver reads a body, package gate admits the request: a
// bearer token is checked from the headers and draws from the verified
// pool; a GitHub delivery, verified only by its body's signature, draws
// from the unverified pool, bounded per remote address, after the
// optional source-network list. The body is read at a minimum rate
// within the request's deadline.
//
// Every receiver verifies its sender and builds a CloudEvent (DESIGN §5);
// from there every event takes the same pipeline, assembled in one place
// (Pipeline) as middleware: dedupe, admission, publish; a worker runs the
// same Pipeline for the delegate events of its sessions. A sender
// gets 202 only once JetStream has acknowledged every publish the event
// caused; a duplicate gets 202 with "duplicate": true and publishes
// nothing but its decision record; when NATS is unreachable or a publish
// fails, 503 with Retry-After, never 2xx. Metrics counts every decision
// record the pipeline writes to JL_AUDIT (admission's, a duplicate's, a
// no_room refusal's), stored or failed.
//
// An event whose data is larger than a NATS message can carry (a GitHub
// body of up to 25 MB) is admitted on its full data and delivered with a
// claim check: the data goes to jl_blobs under a handle of the session it
// is delivered to, and the event's data becomes a BlobRef naming it
// (extension jlblob), which the session's agent reads with read_blob.
//
// It does not evaluate rules (package admission does), remember events
// (package dedupe does) or run agents (the worker does).
package ingest
