// Package slack receives Slack requests at POST /chat/slack and POST
// /chat/slack/interactions and turns the commands, messages and button
// clicks in them into control messages and user requests.
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
// A message of a mapped channel that is not a command is, with
// Config.Send, a user request to the channel's session, once per message
// (its id is the channel and the message's ts, the same for Slack's
// retries and the app_mention twin of a message event), carrying the
// thread it belongs to (events.ExtThread): the worker posts the run's
// answer, an ask_human question or a call waiting for approval there, and
// a reply in the thread answers the question.
//
// POST /chat/slack/interactions takes the clicks on the Approve and Deny
// buttons of such a post (block_actions, signed like every request) and
// publishes approve or deny of the call the button names, only from the
// channel mapped to that call's session, once per click.
//
// It does not post to Slack (the worker does, with tools.SlackReply) or
// apply control messages (the worker does).
package slack
