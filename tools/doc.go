// Package tools owns the tool interface (name, description, JSON schema,
// replay-safe flag, statefulness class, timeout), the registry, argument
// validation against the schema, and the built-in tools: http_get,
// http_request, shell, ask_human, read_blob (and, as they come,
// github_comment, delegate and MCP tools).
//
// It does not decide when a tool runs, record intents or settle results:
// the worker does, and calls a tool only between an intent and its
// settlement.
package tools
