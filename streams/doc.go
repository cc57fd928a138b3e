// Package streams owns jetloop's layout on JetStream: the name of every
// stream, KV bucket and object store, every subject and key (built by the
// functions of Names, so no other package spells one by hand), their
// configuration (retention, dedupe windows, per-message TTL, atomic
// publish, message schedules, replicas) and Provision, which creates or
// updates them idempotently.
//
// It does not publish or consume application messages, and it does not
// define what the messages mean: events/ owns the CloudEvents mapping and
// the encoding of agent and session names into subject tokens that Names
// uses.
package streams
