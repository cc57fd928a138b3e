// Package record owns a session's durable record in jl_sessions: its
// state (State, under <agent>.<session>.state), its transcript (Entry,
// under <agent>.<session>.log.<id>) and the step in flight (Intent), the
// store that loads, creates and settles them (Store), and the readers the
// API, the CLI and the benchmarks use (List, Show, Follow).
//
// Every write of a state is a compare-and-set on the key's revision, the
// session's fencing token. An entry is part of the transcript only when a
// state's NextEntry is past its id: readers ignore the others.
//
// It does not run sessions, hold leases, call models or tools, or apply
// control messages: worker/ does, with this package's store.
package record
