// Package policies owns agent definitions: the YAML schema (one agent a
// file), validation with errors naming file, line and field, compilation of
// every CEL expression at load, the checks against this runtime (the
// tools workers run, schedule patterns by the reconciler's own parser,
// fields earlier releases took), and the versioned store in jl_agents.
//
// mcp_servers are validated here (names, url or command, headers_env,
// the admitted tools, replay_safe, timeout); the catalog of what each
// server says of its admitted tools is recorded into the definition at
// apply by tools/mcp (MCPServer.Catalog), and the store refuses a
// definition without it (CheckCatalogs).
//
// The store numbers each agent's versions 1, 2, 3 … (Record: who applied
// it, when, from which file, its content hash), creates none for a
// definition equal to the newest, and keeps rollbacks as new versions
// whose content is an earlier one's. It keeps each agent's rollout (a
// canary version serving a share of new sessions, assigned by a stable
// hash of the session name) and resolves which version a session runs
// (Resolve). A rollout's guard judges the run counts every worker records
// in jl_rollouts (RecordRun) and ends a failing canary by itself. Every
// change is recorded in JL_AUDIT (Event), a lost record later
// (CatchUpAudit).
//
// It also says what of an event's data the rules read (DataPaths, from
// the selections of event.data in their CEL), and decodes a JSON body
// only that far (ParseJSONPaths), checking and skipping the rest.
//
// It evaluates the compiled expressions (Expr) under a cost limit and the
// caller's context, which reaches every comprehension. Beyond CEL's own
// charges, `matches` is charged for the pattern's compiled program (and
// its compilation, for a pattern of the input; regex.go), and `==`, `!=`
// and `in` over lists and maps for the values they compare (equality.go). Two shortcuts
// answer exactly what the whole evaluation would: a condition whose first
// term compares event.type with literals (==, in a list, startsWith) is
// false without an evaluation for a type that term refuses, and an
// expression without a comprehension, which no context could interrupt,
// is evaluated without one.
//
// It does not evaluate admission rules against events (admission/ does)
// and does not run agents (the worker does); both read Definitions from
// here.
package policies
