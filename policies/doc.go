// Package policies owns agent definitions: the YAML schema (one agent a
// file), validation with errors naming file, line and field, compilation of
// every CEL expression at load, and the versioned store in jl_agents.
//
// It does not evaluate admission rules against events (admission/ does)
// and does not run agents (the worker does); both read Definitions from
// here.
package policies
