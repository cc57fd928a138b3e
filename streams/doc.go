// Package streams owns jetloop's layout on JetStream: the name of every
// stream, KV bucket and object store, every subject and key (built by the
// functions of Names, so no other package spells one by hand), their
// configuration (retention, dedupe windows, per-message TTL, atomic
// publish, message schedules, replicas, byte and message limits) and
// Provision, which creates or updates them idempotently. Every resource is
// bounded by its share of a storage budget (Limits); what holds data not
// yet consumed refuses new writes when full, and for JL_IN, where the
// server cannot (message schedules forbid discard new), Room refuses them
// before its limits are reached, and refuses an agent or a source past
// its share of that room (Shares); what only remembers for a while
// (JL_AUDIT, jl_dedupe) drops its oldest.
//
// It does not publish or consume application messages, and it does not
// define what the messages mean: events/ owns the CloudEvents mapping and
// the encoding of agent and session names into subject tokens that Names
// uses.
package streams
