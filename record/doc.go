// Package record owns a session's durable record in jl_sessions: its
// state (State, under <agent>.<session>.state), its transcript (Entry,
// under <agent>.<session>.log.<id>), the step in flight (Intent) and the
// sessions it delegated to (under <agent>.<session>.child.<child key>,
// NoteChild), the delegate event of each delegate call, stored
// create-only before its first publish so every publish of the call is
// that event (under <agent>.<session>.delegation.<step>,
// ReserveDelegation; recovery reads it back with Delegation), the store that loads, creates and settles them (Store), and
// the readers the API, the CLI and the benchmarks use (List, Show,
// Follow, Children: a session's children by its own keys, without a
// listing). Window says
// where a session's live context lives (the head, the latest summary,
// the tail after it); ReadSpans reads those entries by key in batched
// direct gets, so rebuilding a context costs what it holds, not what the
// transcript holds.
//
// Every write of a state is a compare-and-set on the key's revision, the
// session's fencing token. A settlement creates its entries create-only
// under the ids its intent reserved, then writes the state (Settle): no
// multi-key transaction, one round trip for the entries and one for the
// state. An entry is part of the transcript only when a state's NextEntry
// is past its id: readers ignore the others, and the next writer of such
// an id replaces it, by a write the server stores only while the state is
// still at the writer's revision (so a fenced writer can never change an
// entry a successor's state names). Recovery reads the state, looks up the ids its
// pending intent reserved (Stored) and acts by DESIGN §8's table
// (Recovery). Atomic batches are used only where a multi-key write has no
// reserved-id form: the entries a fork copies (WriteEntries).
//
// A step writes a state and its entries: they are encoded by hand
// (encodeStateJSON, Entry.MarshalJSON), byte for byte what encoding/json
// writes for them, and the answers of the writes are read by hand when
// they are the plain answer of a write that landed (parseAck); fuzz
// targets hold both to encoding/json.
//
// It does not run sessions, hold leases, call models or tools, or apply
// control messages: worker/ does, with this package's store.
package record
