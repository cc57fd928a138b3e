// Package worker runs agent sessions: the loop of each session with its
// turn state committed to JetStream KV through record/'s store, so that a
// kill -9 anywhere loses nothing committed and recovery is a lookup, not
// a guess.
//
// A Worker consumes jl.in.<agent>.> through one durable pull consumer per
// agent (shared by every worker), leases a session in jl_leases before it
// runs it, and fences every write of the session's state by the state
// key's revision. Each model call and each tool call is a step: an intent
// written by compare-and-set, the effect, and a settlement: the
// transcript entries created under the ids the intent reserved, then the
// next state compare-and-set (record.Store.Settle). Where it does not
// widen the uncertain interval of a replay-unsafe effect, a settlement
// carries the next step's intent (see merge.go). A session whose state
// holds an intent without its settlement is recovered by DESIGN §8's
// table (record.Recovery): a settlement stored whole is adopted.
// Before it consumes anything, and before it recovers an interrupted tool
// call, a worker with Config.Trees kills what the tool processes of dead
// workers on the machine left running (package proctree), so a call is
// not settled as interrupted while it still runs.
// Budgets are checked before every step; every status change is a KV write
// plus a jl.status.<agent>.<session> message and a JL_AUDIT record.
//
// A worker restarted with the identity it had takes back at once the
// sessions whose leases its dead incarnation holds (incarnation.go): each
// process run has an incarnation id, written into its leases and its start
// record, and answers on its liveness subject while it lives.
//
// Control messages (steer, interrupt, resume, cancel, approve, deny, fork)
// are consumed from JL_CTL through a second durable pull consumer per
// agent, and heard at once by the owner of a running session through a
// subscription to its control subject. They are read from the stream after
// the state's CtlSeq and applied at step boundaries, each in the same state
// write that records its sequence, so each is applied once, in order; a
// cancel aborts the model call or tool in flight first. Before a tool call
// runs, the definition's approval gates are evaluated: a matching call
// blocks the session until an approve or a deny. A message the session
// cannot take as it stands is noted in the transcript and dead-lettered
// (package dlq, reason not_applicable); a control message never creates a
// session: one for a session without state and without an event to start
// it is dead-lettered as no_session, and a new session skips (and
// dead-letters) the control messages published before its first event.
//
// A run resolves its definition version when it starts (VersionedDefinitions:
// the version the session recorded, the canary or stable one of a rollout
// for a new session) and keeps it to its end, even when another worker takes
// it over; when it ends, its outcome is counted for the rollout's guard and
// in runs_total by agent and version.
//
// A run of an agent with a concurrency limit holds a slot in jl_slots
// (slot.go) from its first step until it rests, blocks or pauses; an
// event whose run finds none free stays unconsumed in JL_IN, its session
// queued, and sessions get slots in the order of their events
// (concurrency.go).
//
// A run whose event came from a chat thread (record.State.Thread, from
// events.ThreadOf) answers there through Config.Reply (tools.SlackReply):
// its final answer, an ask_human question and a call waiting for approval
// (with Approve and Deny buttons) are each posted as a step of their own
// (record.StepReply: intent, post, settlement) with a probe, so a crash
// never posts twice; a request from that thread while the session waits
// on its question is the answer. Tool calls get the thread, the agent's
// github: settings and the intent's time in tools.Call.
//
// A delegate call starts a child session through admission
// (Config.Admit): its delegate event is made once and stored before it
// is first published (record.Store.ReserveDelegation), and a retry, a
// recovery or a racing stale worker publishes the stored event verbatim,
// without carving a budget or checking the tree again. It leaves its
// call open: the session is waiting, holding
// nothing, until the child's worker publishes the child's answer when its
// run ends, which settles the call (delegate.go: the parent's side;
// delegated.go: the child's). Every run of a delegation tree reports its
// usage to its own and its ancestors' accounts in jl_ledger and checks
// them before each step, and a run that ends early cancels its children
// (tree.go), whose late answers still add what they consumed to its
// tree's usage.
//
// The files follow a step's phases: session.go (claim, the loop, the
// settlement of a step), input.go (an event starts or joins a run),
// step_model.go and step_tool.go (a model call, a tool call),
// step_reply.go (a post to the run's chat thread), step_compact.go (a
// compaction), context.go (what a call receives), retention.go (removing
// sessions at rest), merge.go
// (the next step's intent in a settlement's write), recover.go (an intent
// without its settlement), budget.go (the limits checked before a step),
// end.go (a run ended early: its open calls answered), outcome.go (a
// run's outcome, counted).
//
// The tools of a definition's mcp_servers ("server.tool") are called
// through a tools/mcp Pool the worker owns: one connection per session and
// server, closed when the session's runner ends (it rests, or runs
// elsewhere); a catalog change the pool finds is written to JL_AUDIT
// (jl.audit.mcp_catalog.<agent>).
//
// A model call receives the live window (package window): the head, the
// latest summary and the tail after it, read by key when a session is
// claimed (record.State.Live), never the whole transcript; an input event
// enters it as its trigger's payload or its default projection (package
// projection). When the call's input would pass the context policy's
// compact_at_tokens, a compaction step comes first (step_compact.go): a
// model step whose intent reserves the summary's id and names what it
// covers, so recovery makes it again or adopts the stored summary. The
// retention of an agent's sessions at rest (retention.go) runs in every
// worker serving it, one pass per interval by a lease. A living session
// that rests removes its consumed events in JL_IN past its horizon
// (Config.EventHorizon, horizon.go), never one it has not consumed.
//
// The durable record itself (State, Entry, Intent, the store) and its
// readers (List, Show, Follow) are record/'s.
//
// It does not admit events (admission/ and ingest/ do), parse agent
// definitions (policies/), talk to model providers (model/), implement
// tools (tools/) or define the control message format (control/); it
// declares the small interfaces it needs from them.
package worker
