// Package window owns what one model call receives: from a session's
// live context (record.State.Live: the head, the latest summary and the
// tail, never the whole transcript of a compacted session) and its
// agent's context policy, the request (system prompt and notes, tools,
// messages) with old tool results masked behind a placeholder and a
// handle, the summary standing where the turns it covers were, and a
// token estimate per part, calibrated on the provider's reported usage
// (Build; BuildRequest is the same without the parts, for a model call).
// A Builder builds one session's successive requests, each what
// BuildRequest builds, by appending the entries new since the call before
// to the request it kept (and masking the results that aged since),
// building the whole request again when more than entries appended
// changed: the definition, the tools, the notes or the window.
// It also plans compactions (what to summarise, what to keep) and builds
// the request that asks for the summary.
//
// It reads and writes nothing: the worker feeds it the entries it read
// and makes the calls; the API feeds it the same to show a session's next
// context (jetloop context).
package window
