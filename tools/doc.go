// Package tools owns the tool interface (name, description, JSON schema,
// replay-safe flag, statefulness class, timeout), the registry, argument
// validation against the schema, and the built-in tools: http_get,
// http_request, shell, ask_human, delegate (whose Result carries the
// Delegation for the worker to start), read_blob (which also reads masked
// results back by their transcript key), read_event (a session's own
// input event, whole or by path, from JL_IN), notes_read and notes_write
// (a session's bounded notes in jl_sessions), and the GitHub tools
// (github_comment, github_review, github_check, github_label, with package
// ghapp's clients; repo and number default to the run's Call.Thread). MCP
// servers' tools are tools/mcp's; Registry.Mount runs such a tool, whose
// spec is known only from an agent's definition, under the registry's
// rules.
//
// Names lists the tools workers run; definitions are checked against it
// when they are applied, so a tool a worker gains belongs in Builtins (or
// GitHub). SlackReply is not one of them: it is how the worker posts a
// run's answer, question or approval request into the run's Slack thread.
//
// A worker builds one Registry of every tool it can run (NewRegistry,
// Builtins), hands the model the specs an agent declares (Specs), and
// makes each call through Run, which:
//
//   - validates the arguments against the tool's JSON schema (draft
//     2020-12, compiled once at registration; at most MaxArgsBytes), and
//     answers a bad call with an error Result naming the field, for the
//     model to correct;
//   - bounds the call by the tool's timeout (or the registry's default)
//     and passes the caller's context on, so a session's cancel reaches
//     the tool: shell sends SIGTERM to every process of the command's
//     tree (package proctree), then SIGKILL after a grace period; the
//     HTTP tools abort the request;
//   - turns a panic into an error Result;
//   - stores a result above BlobThreshold (16 KiB) in the jl_blobs object
//     store under a name derived from the agent, session and call id
//     (streams.Names.ResultBlob), leaving the first lines, the handle and
//     the size in Content; read_blob pages through it.
//
// A Result is what the model sees; an error from Run is for the runtime:
// the session's context ended, or the call could not be made. Block asks
// the runtime to park the session until a human answers (ask_human).
//
// It does not decide when a tool runs, record intents or settle results:
// the worker does, and calls a tool only between an intent and its
// settlement. Whether a call may be re-run after a crash is the worker's
// decision, from the replay class (ClassOf: safe, probe or unsafe) stored
// in the intent and the current one. A tool whose effect can be looked up
// implements Prober: it marks what it creates with Marker (the GitHub
// tools: an HTML comment in a body, a check run's external_id; SlackReply:
// message metadata), and after a crash between the call and its
// settlement recovery asks Probe instead of guessing. The GitHub tools
// ask their probe themselves when a write goes unanswered (a timeout, a
// dropped connection, a 5xx): the model hears of the comment GitHub
// stored rather than of a failure it would make again.
//
// Operators: shell commands run with a minimal environment (not the
// worker's, which holds API keys) and never outlive their call: they run
// as process trees (package proctree) whose reaper reaps every orphan and
// kills what is left. The HTTP tools refuse every special-purpose address
// (IANA's IPv4 and IPv6 registries: loopback, private, link-local, shared
// address space, NAT64, 6to4, …) unless BuiltinConfig.HTTPAllowPrivate is
// set. read_blob reads only its session's handles, and read_event only its
// session's events (and, for a fork, those of the sessions it was forked
// from, Call.MayRead), never the delegate event that started a delegated
// session: its data holds the task, which an agent whose reads: leaves it
// out must not see.
package tools
