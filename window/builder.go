package window

import (
	"bytes"

	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
)

// Builder builds the requests of one session's successive model calls,
// each what BuildRequest returns for its input, without rendering the
// whole live context every call: when a call's input is the last one's
// with entries appended (the same definition, tools, notes and window,
// the entries before unchanged), the new entries are rendered after the
// request kept from the last call, and the tool results that masking
// turns into placeholders since are replaced in it. Anything else (a
// compaction's new window, a changed definition or notes, a context read
// again) builds the whole request again.
//
// A request returned stays as it was when later ones are built: they
// share no message a later build changes. The zero Builder is ready; it
// is not safe for concurrent use.
type Builder struct {
	b    builder
	kept bool
	// What the kept request was built from.
	def   *policies.Definition
	tools []model.ToolSpec
	notes string
	win   record.Window
	turn  int
	// n entries are rendered; first and last are the ids of the first and
	// the last of them.
	n           int
	first, last uint64
	// Full counts the whole builds, Appended the calls that went on from
	// the request before.
	Full, Appended int
}

// Request returns what BuildRequest(in) returns.
func (k *Builder) Request(in Input) Context {
	if !k.continues(&in) {
		k.b = builder{}
		k.b.start(&in, false, true)
		k.kept, k.n = true, 0
		k.def, k.tools, k.notes, k.win = in.Def, in.Tools, in.Notes, in.State.Window
		k.Full++
	} else {
		if in.Turn != k.turn {
			k.b.remask(&in)
		}
		k.b.req.Tools = in.Tools
		k.Appended++
	}
	for i := k.n; i < len(in.Entries); i++ {
		k.b.add(&in, &in.Entries[i])
	}
	k.n, k.turn = len(in.Entries), in.Turn
	if k.n > 0 {
		k.first, k.last = in.Entries[0].ID, in.Entries[k.n-1].ID
	}
	return k.b.finish(&in, true)
}

// Reset drops the kept request: the next call builds the whole one.
func (k *Builder) Reset() { k.kept = false }

// continues reports whether in is the kept request's input with entries
// appended.
func (k *Builder) continues(in *Input) bool {
	if !k.kept || in.Def != k.def || in.Notes != k.notes || !sameTools(in.Tools, k.tools) {
		return false
	}
	w := in.State.Window
	if w.HeadEnd != k.win.HeadEnd || w.Summary != k.win.Summary || w.From != k.win.From || w.Summarised != k.win.Summarised {
		return false
	}
	if in.Turn < k.turn && k.b.policy.MaskAfterTurns > 0 {
		// A result masked already would be shown again.
		return false
	}
	if len(in.Entries) < k.n {
		return false
	}
	return k.n == 0 || in.Entries[0].ID == k.first && in.Entries[k.n-1].ID == k.last
}

func sameTools(a, b []model.ToolSpec) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Description != b[i].Description || !bytes.Equal(a[i].Schema, b[i].Schema) {
			return false
		}
	}
	return true
}
