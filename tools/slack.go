package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/slack-go/slack"
)

// EnvSlackBotToken is the environment variable of the Slack bot token.
const EnvSlackBotToken = "JETLOOP_SLACK_BOT_TOKEN"

// slackMaxText bounds a posted message in characters, below Slack's
// 40,000.
const slackMaxText = 39000

// slackMetadataType is the event_type of the metadata each post carries.
const slackMetadataType = "jetloop_post"

// SlackConfig configures SlackReply.
type SlackConfig struct {
	// Token is the bot token (xoxb-…). Empty: every call answers that
	// JETLOOP_SLACK_BOT_TOKEN is not set.
	Token string
	// APIURL is the Web API's root (default https://slack.com/api/).
	APIURL string
}

// SlackReply returns slack_reply: it posts its text argument into the
// Slack thread of the run's event (Call.Thread) with chat.postMessage. It
// is what the worker posts a run's answer, a question and an approval
// request with, not a tool for models. Each post carries the call's marker
// in its message metadata, and Probe looks for it in the thread
// (conversations.replies), so a crash between the post and its settlement
// never posts twice.
func SlackReply(cfg SlackConfig) Prober {
	var opts []slack.Option
	if cfg.APIURL != "" {
		opts = append(opts, slack.OptionAPIURL(cfg.APIURL))
	}
	return &slackReply{cfg: cfg, api: slack.New(cfg.Token, opts...)}
}

type slackReply struct {
	cfg SlackConfig
	api *slack.Client
}

// SlackArgs are slack_reply's arguments.
type SlackArgs struct {
	Text string `json:"text"`
	// Blocks are Block Kit blocks (buttons, say); Text is then the
	// notification's fallback.
	Blocks json.RawMessage `json:"blocks,omitempty"`
}

func (s *slackReply) Spec() Spec {
	return Spec{
		Name:        "slack_reply",
		Description: "Post a message into the Slack thread the run's event came from.",
		Schema: json.RawMessage(`{
	"type": "object",
	"properties": {
		"text": {"type": "string", "minLength": 1},
		"blocks": {"type": "array"}
	},
	"required": ["text"],
	"additionalProperties": false
}`),
		State:   Resource,
		Timeout: time.Minute,
	}
}

func (s *slackReply) thread(call Call) (channel, ts string, err error) {
	if s.cfg.Token == "" {
		return "", "", fmt.Errorf("slack_reply: no bot token: set %s", EnvSlackBotToken)
	}
	if call.Thread == nil || call.Thread.SlackChannel == "" {
		return "", "", errors.New("slack_reply: the run's event came from no Slack thread")
	}
	return call.Thread.SlackChannel, call.Thread.SlackTS, nil
}

func (s *slackReply) Call(ctx context.Context, call Call) (Result, error) {
	var a SlackArgs
	if err := decodeArgs("slack_reply", call.Args, &a); err != nil {
		return Result{}, err
	}
	ch, ts, err := s.thread(call)
	if err != nil {
		return Result{IsError: true, Content: err.Error()}, nil
	}
	text := cutChars(a.Text, slackMaxText)
	opts := []slack.MsgOption{
		slack.MsgOptionText(text, false),
		slack.MsgOptionTS(ts),
		slack.MsgOptionMetadata(slack.SlackMetadata{EventType: slackMetadataType, EventPayload: map[string]any{"marker": Marker(call)}}),
	}
	if len(a.Blocks) > 0 {
		var blocks slack.Blocks
		if err := json.Unmarshal(a.Blocks, &blocks); err != nil {
			return Result{IsError: true, Content: fmt.Sprintf("slack_reply: blocks: %v", err)}, nil
		}
		opts = append(opts, slack.MsgOptionBlocks(blocks.BlockSet...))
	}
	rch, rts, err := s.api.PostMessageContext(ctx, ch, opts...)
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, err
		}
		return Result{IsError: true, Content: fmt.Sprintf("slack_reply: chat.postMessage to %s: %v", ch, err)}, nil
	}
	return slackResult(rch, ts, rts), nil
}

func slackResult(ch, thread, ts string) Result {
	return Result{Content: fmt.Sprintf("posted to Slack %s thread %s as message %s", ch, thread, ts)}
}

// Probe looks for the call's marker among the thread's messages.
func (s *slackReply) Probe(ctx context.Context, call Call) (Result, bool, error) {
	ch, ts, err := s.thread(call)
	if err != nil {
		// Nothing could have been posted.
		return Result{}, false, nil
	}
	marker := Marker(call)
	params := &slack.GetConversationRepliesParameters{ChannelID: ch, Timestamp: ts, IncludeAllMetadata: true, Limit: 200}
	for pages := 0; pages < 100; pages++ {
		msgs, more, next, err := s.api.GetConversationRepliesContext(ctx, params)
		if err != nil {
			err = fmt.Errorf("conversations.replies of %s thread %s: %w", ch, ts, err)
			if rl := (*slack.RateLimitedError)(nil); errors.As(err, &rl) {
				err = fmt.Errorf("%w: %w", ErrProbeLater, err)
			}
			return Result{}, false, err
		}
		for _, m := range msgs {
			if m.Metadata.EventType == slackMetadataType && m.Metadata.EventPayload["marker"] == marker {
				return slackResult(ch, ts, m.Timestamp), true, nil
			}
		}
		if !more || next == "" {
			return Result{}, false, nil
		}
		params.Cursor = next
	}
	return Result{}, false, fmt.Errorf("conversations.replies of %s thread %s: more than 100 pages", ch, ts)
}

// cutChars cuts s after max characters, marking the cut with an ellipsis.
func cutChars(s string, max int) string {
	n := 0
	for i := range s {
		if n == max {
			return s[:i] + "…"
		}
		n++
	}
	return s
}
