// Package admission decides which agents an event reaches, before it can
// cost a token.
//
// It owns the evaluation of every agent's triggers (their CEL `when`,
// `session` and `rate.key` expressions, compiled by package policies), the
// live set of definitions (Rules, kept current from jl_agents), rate
// limits (a token bucket per agent, trigger and key, its state in KV and
// updated by compare-and-set so every ingest process shares it), debounce
// (one delayed `@at` schedule message per session, or per debounce key
// within it, on jl.debounce.<agent>.<session>[.<key-hash>], replaced
// through Nats-Rollup by each event of a burst, so the server fires once
// with the latest data and the burst's count, after the quiet window or
// the max_wait since the burst's first event; an event whose replacement
// was stored only after the server copied the burst to fire is debounced
// again), the decision records in JL_AUDIT, and the dead letters
// in JL_DLQ for events whose rules failed to evaluate.
//
// Decision records are written with group commit (WriteRecords):
// while no write of records is in flight, an event's records are
// published at once, each alone, a JSON object on
// jl.audit.admission.<agent> with a Nats-Msg-Id naming the decision;
// records that arrive while one is in flight wait for its
// acknowledgement (or its caller's giving up) and are then published
// together, one message per agent holding up to MaxGroupRecords
// records (and MaxGroupBytes, or the server's max payload less 1 KiB
// where that is smaller), one JSON object a line, its Jetloop-Records
// header saying how many, and no Nats-Msg-Id. A caller returns nil
// only once the message holding its records is stored (it returns an
// error when its context ends or the write's wait runs out first, and
// its records may still be stored later), and a message that fails
// fails every caller it held. A group is never sent twice,
// so a retry after a failed write can store a decision again; Recent
// reads both forms (ParseRecords), skips a line that holds no decision
// record (`null` and `{}` included; ReadRecent counts the messages
// that had such lines), and returns a
// decision stored twice within the stream's duplicate window once.
// What the writer stores and fails to store is told to a
// RecordObserver (Admitter.ObserveRecords): the ingest's metrics.
//
// Delegate events (events.TypeDelegate, a session's delegate call) are
// decided by the host's own rule (DelegateRule) rather than the agent's
// triggers: admitted to the child session they address unless the
// delegation is deeper than its tree's max_hops or the agent's, repeats
// an (agent, task) pair of its path, or offers an input the agent's
// reads: does not name; such a delegation is Refused, recorded with the
// reason, which goes back to the delegating session.
//
// It sits in the ingest pipeline after dedupe and before the publish of
// admitted events. It does not verify senders, build CloudEvents, dedupe
// or publish admitted events to jl.in (package ingest does), and it does
// not parse definitions (package policies does).
package admission
