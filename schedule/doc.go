// Package schedule turns the schedules of agent definitions into NATS
// server message schedules and keeps their health.
//
// The Reconciler keeps exactly one schedule message per (agent, schedule)
// on jl.sched.<agent>.<schedule> in JL_IN, targeting the session's
// jl.in.<agent>.<session> subject: it adds, replaces and removes them as
// definitions change, idempotently and safely with several reconcilers
// running at once (every write is conditional on the subject's last
// sequence). The server fires the ticks, once per cluster, and after
// downtime once rather than once per missed slot. Schedules that share a
// pattern are spread by a stable per-schedule offset in seconds.
//
// Ticks are CloudEvents of type dev.jetloop.tick whose id is derived from
// the schedule subject and the slot (Tick), so a tick produced twice is
// processed once. The Health store (jl_schedules) counts consecutive
// failures and trips the breaker; a suspended schedule has no schedule
// message until it is resumed.
//
// Patterns are read by package pattern, which policies also uses to check
// definitions when they are applied: a pattern the reconciler would not
// install is refused there. A schedule whose stored pattern still does
// not resolve keeps the schedule message it has.
//
// Ticks can also be published by hand: TriggerTick fires one now,
// BackfillTicks one per slot of a range with the ids the server's ticks of
// those slots have (the worker remembers consumed tick ids under
// DedupeSource in jl_dedupe, so a slot runs once); Publish sends them.
//
// The overlap policy, the per-tick timeout, the catch-up window and the
// jitter are applied by the worker, which runs the tick's session; this
// package only defines them (and JitterDelay, the stable delay of a tick).
package schedule
