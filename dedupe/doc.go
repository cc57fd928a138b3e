// Package dedupe makes each delivery of an event act once.
//
// It owns the two layers of DESIGN §6. The first is the stream's
// Nats-Msg-Id window: MsgID names each publish of an event to one
// session subject, so a retried publish inside JL_IN's duplicate window
// (2 minutes by default) is dropped by the server. The second is the
// jl_dedupe bucket, whose keys live for a per-key TTL (72 hours by
// default): Store.Seen answers whether an event was handled before, and
// Store.Record marks it handled once every publish it caused has been
// acknowledged. GitHub redelivers a webhook with the same delivery GUID up
// to three days later; the bucket catches those. A record can carry a
// digest of the request (WithDigest), so that an id reused for another
// request is ErrConflict rather than a duplicate; Claim and Amend let a
// caller claim an id before it acts (control requests, applied control
// messages).
//
// Seen's lookup and Record's and Claim's create are an event's two
// operations on the bucket, so the store makes them as plain requests on
// the bucket's stream (a direct get of the key's last message, a publish
// expecting none) and reads their answers as jetstream's KV API reads
// them, without its per-call key check and option building; a bucket the
// KV API would reach another way (an API prefix or domain, a mirror, no
// direct gets) goes through the KV API. Either way a create that loses
// to another write of the key is a duplicate, not an error: on a
// replicated bucket the server refuses a create of a key another write
// is being proposed for with a wrong last sequence (10164) that the KV
// API's Create of a deleted key returns as it is, and the winner may not
// be readable yet, so Claim reads it again, or creates again, a few
// times.
//
// It sits in the ingest pipeline after the CloudEvent is built and before
// admission. It does not decide what an event admits, and does not
// publish events: it only names and remembers them.
package dedupe
