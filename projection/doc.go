// Package projection owns what of an event a model sees by default: the
// compact projection of a GitHub delivery per event kind (action,
// repository, number, title, author, URL, a body cut to a bound, the refs
// and commits of a push, the outcome of a check …), and the text an input
// event becomes in a session's context.
//
// A trigger's payload expression (policies) replaces the projection;
// payload: full keeps the whole data. The whole event stays in JL_IN
// either way, where the read_event tool reads it.
//
// It does not evaluate CEL (policies does), read streams or build model
// requests (the worker does).
package projection
