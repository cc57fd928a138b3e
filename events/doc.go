// Package events is jetloop's event vocabulary and its wire format.
//
// It owns four things:
//
//   - The mapping between CloudEvents 1.0 (sdk-go's event.Event) and NATS
//     messages, in binary mode per the CloudEvents NATS protocol binding:
//     ToMsg writes attributes as percent-encoded "ce-" headers and the data
//     as the body, and sets Nats-Msg-Id from SubjectMsgID; FromMsg reads binary
//     mode and also accepts structured-mode JSON, normalising both to the
//     same event. Every message on jl.in.* and jl.ctl.* goes through these
//     two functions.
//   - The event types and extension attributes jetloop defines (TypeTick,
//     ControlType, GitHubType, ExtAgent, ...).
//   - Where an event belongs (ThreadOf): the repository, issue or pull
//     request, installation and commit of a GitHub delivery, or the chat
//     thread an ExtThread names; a run answers there.
//   - The reversible encoding of an agent or session name, such as
//     "octo/repo#12", into one token that is valid in a NATS subject and in
//     a JetStream KV key (EncodeToken, DecodeToken).
//
// It sits between the producers of events (ingest, the cron reconciler,
// control clients) and their consumers (admission, the worker): the former
// call ToMsg before publishing, the latter FromMsg on every delivery, and a
// FromMsg error means the message can never be handled and belongs in the
// dead letter stream.
//
// It does not know stream or subject names: package streams builds every
// subject, calling EncodeToken for the agent and session tokens. It does not
// publish, subscribe, dedupe beyond naming the Nats-Msg-Id, or decide which
// events are admitted, and beyond ThreadOf it does not interpret event data.
package events
