// Package mcp mounts the tools of MCP servers, through the official Go
// SDK (github.com/modelcontextprotocol/go-sdk), as tools.Tool values named
// "<server>.<tool>": two servers that both offer list_issues are two
// tools, github.list_issues and linear.list_issues.
//
// Admission, at apply: Pool.Admit connects to every server a definition
// declares (Streamable HTTP, or a stdio command), lists its tools and
// records, for each tool the definition admits by name, its description
// and input schema, bounded in size, in the definition itself
// (policies.MCPServer.Catalog), so they are part of the version stored in
// jl_agents. The model is shown the recorded catalog and nothing else.
//
// Connections, at run time: Pool holds one connection per (session,
// server) in the worker that owns the session. A session's first call of a
// server's tool opens it; CloseSession closes it when the session rests
// (a stdio server runs as a process tree, package proctree, stopped whole,
// also what left its process group: stdin closed, then SIGTERM, then
// SIGKILL; it dies with the worker too). Before each call the connection is checked
// (an HTTP server is pinged, a stdio server's process asked after), so a
// server restarted between two calls costs a reconnect, not a failed call.
// Connects back off exponentially with full jitter, and the connects one
// process opens to one server are rate-bounded, so the successors of a
// worker that held many sessions spread their reconnects out. The SDK
// resumes an interrupted Streamable HTTP stream with Last-Event-ID where
// the server keeps an event store.
//
// The poisoning guard: on every connect, and on tools/list_changed, the
// server's tools are compared with the recorded catalog. A tool whose
// description or schema differs, or that is gone, is withheld (its calls
// answer an error and do not reach the server) and the change is reported
// once per connection (Options.OnChange; the worker writes it to
// JL_AUDIT), until a definition recording the new catalog is applied. A
// server declared on_change: follow has the change reported the same way,
// but a tool it still offers is not withheld: its calls reach the server,
// while the model keeps being shown the recorded catalog (what the
// definition admitted), so no text of the server's reaches the model
// unreviewed.
//
// Calls: a cancel of the call's context stops the wait at once and the SDK
// sends notifications/cancelled for the request. A call the server cannot
// have taken (the connection could not be opened, the server no longer
// knows the session) is sent again on a new connection; one whose
// connection broke while the server had it is sent again only when the
// definition declares the tool replay_safe, and is otherwise answered
// "may or may not have run".
//
// It does not record intents or settle results (the worker does, as for
// every tool), and does not offload large results (tools.Registry.Mount
// wraps these tools with the registry's rules: argument validation,
// timeout, results over the threshold to jl_blobs).
package mcp
