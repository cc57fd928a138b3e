// Package ledger owns the usage counters that every worker shares, in the
// jl_ledger bucket: one Account per session run that delegates or was
// delegated to, holding the run's ceiling (its turn, token and cost
// limits) and the usage of every session of the tree below it.
//
// Each session of a delegation tree reports its own run's usage, as a
// cumulative total with the step it was taken at, to its own account and
// to the account of every ancestor on its path (Report), each a
// compare-and-set of one key. A report is idempotent and order-free: a
// part is replaced only by one taken at a later step, so a report repeated
// after a crash, or overtaken by a later one, changes nothing. An
// account's Total is therefore what its run and everything it delegated
// have consumed, as it happens, whichever workers run the sessions; a
// session checks its ancestors' accounts before every step, so the whole
// tree stops when any ceiling above it is reached.
//
// An account belongs to one run of its session (Account.Run): reports for
// a run that has ended and been replaced are refused, so a late child of
// an earlier run never charges the next one.
//
// It does not decide what a run may spend (the worker carves a child's
// budget from its parent's and applies the limits) and does not read
// session state (package record owns it).
package ledger
