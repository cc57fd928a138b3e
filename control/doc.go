// Package control owns the control verbs of a running session (steer,
// interrupt, resume, cancel, approve, deny, fork) and their message format.
//
// A control message is a CloudEvent of type dev.jetloop.control.<verb>
// (events.ControlType) published in binary mode on the session's control
// subject jl.ctl.<agent>.<session> (streams.Names.Ctl), where JetStream
// keeps it in JL_CTL until a worker applies it, so nothing is lost while no
// worker owns the session. Its data is a JSON object with the fields the
// verb uses:
//
//	verb       text                  call_id    turn       as
//	steer      required              -          -          -
//	interrupt  optional (a reason)   -          -          -
//	resume     optional (a message)  -          -          -
//	cancel     optional (a reason)   -          -          -
//	approve    optional (a note)     required   -          -
//	deny       optional (a reason)   required   -          -
//	fork       optional (a message)  -          required   required
//
// Publish validates a Message, renders it and waits for JetStream's
// acknowledgement, returning the message's sequence in JL_CTL: the number
// a worker records in the session's state once it has applied the message,
// so that each message is applied once and in order. Parse is the strict
// reader of every control message from outside (chat bots, `nats pub`,
// HTTP): an unknown verb, a field the verb does not take, a missing
// call_id or turn, or an oversized text is an error naming what is wrong.
//
// It does not apply messages to sessions (the worker does, at its step
// boundaries), authenticate senders (NATS permissions, the HTTP bearer
// token and the chat receivers do) or spell subjects (package streams
// does).
package control
