package tools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/internal/slackfake"
	"github.com/jetloop/jetloop/tools"
)

func TestSlackReplyAndProbe(t *testing.T) {
	fake := slackfake.New(t, "xoxb-ok")
	p := tools.SlackReply(tools.SlackConfig{Token: "xoxb-ok", APIURL: fake.URL()})
	if tools.ClassOf(p) != tools.ClassProbe {
		t.Fatal("slack_reply has no probe")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	call := tools.Call{ID: "answer_7", Agent: "demo", Session: "talk", Args: json.RawMessage(`{"text": "Done."}`),
		Thread: &events.Thread{SlackChannel: "C1", SlackTS: "1.000100"}}
	if _, found, err := p.Probe(ctx, call); err != nil || found {
		t.Fatalf("probe before the post: %v %v", found, err)
	}
	res, err := p.Call(ctx, call)
	msgs := fake.Messages("C1", "1.000100")
	if err != nil || res.IsError || len(msgs) != 1 || msgs[0].Text != "Done." || !strings.HasSuffix(res.Content, msgs[0].TS) {
		t.Fatalf("call: %+v %v, messages %+v", res, err, msgs)
	}
	got, found, err := p.Probe(ctx, call)
	if err != nil || !found || got.Content != res.Content {
		t.Fatalf("probe after the post: %+v %v %v, want %q", got, found, err, res.Content)
	}
	other := call
	other.ID = "answer_8"
	if _, found, _ := p.Probe(ctx, other); found {
		t.Fatal("another call's probe found this post")
	}

	bad := tools.SlackReply(tools.SlackConfig{Token: "xoxb-wrong", APIURL: fake.URL()})
	if res, err := bad.Call(ctx, call); err != nil || !res.IsError || !strings.Contains(res.Content, "invalid_auth") {
		t.Fatalf("wrong token: %+v %v", res, err)
	}
	none := tools.SlackReply(tools.SlackConfig{APIURL: fake.URL()})
	if res, _ := none.Call(ctx, call); !res.IsError || !strings.Contains(res.Content, tools.EnvSlackBotToken) {
		t.Fatalf("no token: %+v", res)
	}
	call.Thread = nil
	if res, _ := p.Call(ctx, call); !res.IsError || !strings.Contains(res.Content, "no Slack thread") {
		t.Fatalf("no thread: %+v", res)
	}
}

// Slack's limit is in characters: a long answer of multi-byte characters
// within it is posted whole, and one beyond it is cut at a character,
// never inside one.
func TestSlackReplyCutsAtACharacter(t *testing.T) {
	fake := slackfake.New(t, "xoxb-ok")
	p := tools.SlackReply(tools.SlackConfig{Token: "xoxb-ok", APIURL: fake.URL()})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, text := range []string{"a" + strings.Repeat("€", 15000), "a" + strings.Repeat("€", 45000)} {
		args, _ := json.Marshal(tools.SlackArgs{Text: text})
		call := tools.Call{ID: fmt.Sprintf("answer_%d", i), Agent: "demo", Session: "talk", Args: args,
			Thread: &events.Thread{SlackChannel: "C1", SlackTS: "1.000100"}}
		if res, err := p.Call(ctx, call); err != nil || res.IsError {
			t.Fatalf("call: %+v %v", res, err)
		}
		msgs := fake.Messages("C1", "1.000100")
		got := msgs[len(msgs)-1].Text
		if !utf8.ValidString(got) {
			t.Fatalf("text %d: posted invalid UTF-8", i)
		}
		if n := utf8.RuneCountInString(got); i == 0 && got != text || i == 1 && (n > 40000 || !strings.HasPrefix(text, strings.TrimSuffix(got, "…"))) {
			t.Fatalf("text %d: posted %d characters of %d", i, n, utf8.RuneCountInString(text))
		}
	}
}
