// Package slack receives Slack requests at POST /chat/slack and turns the
// commands in them into control messages.
//
// Every request is verified before anything else: Slack's v0 signature
// (X-Slack-Signature: "v0=" + hex HMAC-SHA256 of "v0:<timestamp>:<raw
// body>" with the app's signing secret, compared in constant time), a
// timestamp (X-Slack-Request-Timestamp) within five minutes of the clock,
// and a signature not seen before: each accepted signature is kept in
// jl_dedupe with a per-key TTL covering the window, so a replay inside the
// window is refused by every ingest process that shares the bucket.
//
// Two kinds of request carry commands: Events API callbacks (app_mention
// and message events, JSON) and slash commands (form-encoded). A command
// is the message's text with leading mentions removed:
//
//	stop [reason]            cancel the session
//	pause [reason]           interrupt it at its next step boundary
//	resume [text]            continue a paused or blocked session
//	steer <text>             queue text for the next model call
//	approve <call-id> [note] let a gated tool call run
//	deny <call-id> [reason]  refuse it
//
// Which session a channel controls is explicit configuration (Channels,
// loaded from the file JETLOOP_SLACK_CHANNELS names); a channel that is not
// listed controls nothing. Other text, bot messages and edits are
// acknowledged and ignored. Slack retries a delivery it did not see
// answered in time with the same event id; the event id is the control
// message's id and is remembered in jl_dedupe, so a retry is applied once.
//
// A command that cannot apply to its session as it stands (no such
// session, an approve of a call that is not pending) is answered with the
// reason and not published, when Config.Check is set (jetloop dev and
// jetloop ingest set it to the runtime API's check).
//
// It does not answer in the channel (that needs a bot token and Slack's
// Web API) or apply control messages (the worker does).
package slack
