package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/internal/slackfake"
)

const slackSecret = "slack-s3cret"

// postSlack posts a signed Events API message event to /chat/slack.
func postSlack(t *testing.T, base, eventID, ts, threadTS, text string) map[string]any {
	t.Helper()
	return postSlackAt(t, base, "C0TALK", eventID, ts, threadTS, text)
}

// TestDevSlackConversation is a Slack conversation with `jetloop dev`: a
// message in a mapped channel that is not a command becomes a request to
// the channel's session, and the run's answer is posted into the
// message's thread, with the bot token, once: kill -9 of dev after Slack
// stored the post and before the worker heard back, then a restart, posts
// nothing more (recovery finds the post by its metadata) and the
// transcript names the real message. A reply in the thread continues the
// session and is answered in the same thread; Slack's retry of an event
// and the app_mention twin of a message send nothing more.
func TestDevSlackConversation(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop")
	}
	bin := buildJetloop(t)
	data := t.TempDir()
	channels := filepath.Join(t.TempDir(), "channels.yaml")
	if err := os.WriteFile(channels, []byte("channels:\n  C0TALK: demo/talk\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fake := slackfake.New(t, "xoxb-test")
	t.Setenv("JETLOOP_SLACK_SIGNING_SECRET", slackSecret)
	t.Setenv("JETLOOP_SLACK_CHANNELS", channels)
	t.Setenv("JETLOOP_SLACK_BOT_TOKEN", "xoxb-test")
	t.Setenv("JETLOOP_SLACK_API_URL", fake.URL())
	t.Setenv("JETLOOP_LEASE_TTL", "2s")
	t.Setenv("JETLOOP_ACK_WAIT", "2s")
	t.Setenv("JETLOOP_WORK_DIR", t.TempDir())
	posted, release := make(chan slackfake.Message, 1), make(chan struct{})
	first := true
	fake.OnPost(func(m slackfake.Message) {
		if !first {
			return
		}
		first = false
		posted <- m
		<-release
	})

	p := startProc(t, bin, devArgs(data)...)
	base := p.waitReady(time.Minute)["http"]
	const root = "1700000000.000100"
	if out := postSlack(t, base, "Ev1", root, "", "hello there"); out["ok"] != true || out["session"] != "talk" {
		t.Fatalf("message: %v", out)
	}
	var m slackfake.Message
	select {
	case m = <-posted:
	case <-time.After(time.Minute):
		t.Fatalf("no answer posted within a minute\n%s", p.Stderr())
	}
	_ = p.cmd.Process.Kill()
	_ = p.wait(time.Minute)
	close(release)
	if m.ThreadTS != root || !strings.Contains(m.Text, "ledger") {
		t.Fatalf("posted %+v, want the demo's answer in thread %s", m, root)
	}

	p = startProc(t, bin, devArgs(data)...)
	ready := p.waitReady(time.Minute)
	url, base := ready["nats"], ready["http"]
	var s showJSON
	natstest.WaitFor(t, time.Minute, func() error {
		var err error
		if s, err = show(t, bin, url, "demo/talk"); err != nil {
			return err
		}
		if s.Status != "done" {
			return fmt.Errorf("status %s", s.Status)
		}
		return nil
	})
	if got := fake.Messages("C0TALK", root); len(got) != 1 {
		t.Fatalf("%d posts in the thread after the kill, want 1: %+v", len(got), got)
	}
	last := s.Transcript[len(s.Transcript)-1]
	if last["kind"] != "system" || !strings.Contains(fmt.Sprint(last["text"]), "as message "+m.TS) {
		t.Fatalf("last entry %v, want the post of message %s", last, m.TS)
	}

	// Slack's retry of the event and the app_mention twin of the message
	// send nothing more.
	if out := postSlack(t, base, "Ev1", root, "", "hello there"); out["duplicate"] != true {
		t.Fatalf("retry: %v", out)
	}
	if out := postSlack(t, base, "Ev1-mention", root, "", "<@U0BOT> hello there"); out["duplicate"] != true {
		t.Fatalf("app_mention twin: %v", out)
	}
	// A reply in the thread continues the session, answered in the thread.
	if out := postSlack(t, base, "Ev2", "1700000001.000200", root, "and again"); out["ok"] != true {
		t.Fatalf("thread reply: %v", out)
	}
	natstest.WaitFor(t, time.Minute, func() error {
		if n := len(fake.Messages("C0TALK", root)); n != 2 {
			return fmt.Errorf("%d posts in the thread", n)
		}
		return nil
	})
	s, err := show(t, bin, url, "demo/talk")
	if err != nil {
		t.Fatal(err)
	}
	users := 0
	for _, e := range s.Transcript {
		if e["kind"] == "user" {
			users++
		}
	}
	if users != 2 {
		t.Fatalf("%d user entries, want 2 (the message and the reply)", users)
	}
}
