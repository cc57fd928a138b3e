package integration

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetloop/jetloop/ingest/slack"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/internal/slackfake"
	"github.com/jetloop/jetloop/policies"
)

// postSlackAt is postSlack for another channel.
func postSlackAt(t *testing.T, base, channel, eventID, ts, threadTS, text string) map[string]any {
	t.Helper()
	ev := map[string]any{"type": "message", "user": "U1", "text": text, "channel": channel, "ts": ts}
	if threadTS != "" {
		ev["thread_ts"] = threadTS
	}
	body, _ := json.Marshal(map[string]any{"type": "event_callback", "team_id": "T1", "event_id": eventID, "event": ev})
	return signedSlack(t, base+"/chat/slack", "application/json", body)
}

// slackSigner holds the seconds it signed each body at.
type slackSigner struct {
	sync.Mutex
	at map[string]bool
}

// slackSigned is the signer of every test's Slack requests.
var slackSigned slackSigner

// maxSlackBackdate bounds, in seconds, how long before now signedSlack
// signs a request: well inside the five minutes the receiver accepts
// (slack.DefaultWindow), so a test that posts one body more often than
// this fails, saying so, instead of sending a stale signature.
const maxSlackBackdate = 60

// second returns the second to sign body at, now less ago: Slack
// signs every delivery, a retry too, when it is sent, and the receiver
// refuses a signature it has seen, so a body signed already at that
// second is signed at the latest earlier second it was not, one at a
// time back, at most maxSlackBackdate seconds before now.
func (s *slackSigner) second(now int64, body []byte, ago ...int64) (int64, error) {
	sec := now
	for _, a := range ago {
		sec -= a
	}
	start := sec
	key := func(sec int64) string { return fmt.Sprintf("%d %x", sec, sha256.Sum256(body)) }
	s.Lock()
	defer s.Unlock()
	if s.at == nil {
		s.at = make(map[string]bool)
	}
	for s.at[key(sec)] {
		if sec--; now-sec > maxSlackBackdate {
			return 0, fmt.Errorf("body %.40q signed at every second from %d back to %d already: more than %d s before %d", body, start, sec+1, maxSlackBackdate, now)
		}
	}
	s.at[key(sec)] = true
	return sec, nil
}

// signedSlack posts body signed as Slack does, at its own second (or ago
// seconds before it; see slackSigner.second), and wants a 200 with a JSON body.
func signedSlack(t *testing.T, url, contentType string, body []byte, ago ...int64) map[string]any {
	t.Helper()
	sec, err := slackSigned.second(time.Now().Unix(), body, ago...)
	if err != nil {
		t.Fatalf("sign a request to %s: %v", url, err)
	}
	now := strconv.FormatInt(sec, 10)
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", contentType)
	req.Header.Set(slack.HeaderTimestamp, now)
	req.Header.Set(slack.HeaderSignature, slack.Sign([]byte(slackSecret), now, body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: status %d, %v %v", url, resp.StatusCode, out, err)
	}
	return out
}

// click posts the interaction of a click on the button actionID of msg,
// as Slack sends it: a signed form whose payload is block_actions JSON.
func click(t *testing.T, base, channel string, msg slackfake.Message, actionID, actionTS string, ago ...int64) map[string]any {
	t.Helper()
	var blocks []struct {
		Elements []struct {
			ActionID string `json:"action_id"`
			Value    string `json:"value"`
		} `json:"elements"`
	}
	if err := json.Unmarshal(msg.Blocks, &blocks); err != nil {
		t.Fatalf("blocks of %+v: %v", msg, err)
	}
	value := ""
	for _, b := range blocks {
		for _, e := range b.Elements {
			if e.ActionID == actionID {
				value = e.Value
			}
		}
	}
	if value == "" {
		t.Fatalf("no button %s in %s", actionID, msg.Blocks)
	}
	payload, _ := json.Marshal(map[string]any{
		"type": "block_actions", "team": map[string]any{"id": "T1"}, "user": map[string]any{"id": "U2"},
		"channel": map[string]any{"id": channel}, "trigger_id": "tr-" + actionTS,
		"container": map[string]any{"type": "message", "message_ts": msg.TS, "channel_id": channel},
		"actions":   []any{map[string]any{"type": "button", "action_id": actionID, "block_id": "jetloop_approval", "value": value, "action_ts": actionTS}},
	})
	return signedSlack(t, base+"/chat/slack/interactions", "application/x-www-form-urlencoded", []byte("payload="+url.QueryEscape(string(payload))), ago...)
}

// waitPosts waits until the thread holds n posts and returns them.
func waitPosts(t *testing.T, fake *slackfake.Server, channel, thread string, n int, p *proc) []slackfake.Message {
	t.Helper()
	var got []slackfake.Message
	if err := natstest.Poll(t.Context(), time.Minute, func() error {
		if got = fake.Messages(channel, thread); len(got) < n {
			return fmt.Errorf("%d posts in %s/%s, want %d", len(got), channel, thread, n)
		}
		return nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, p.Stderr())
	}
	return got
}

// TestDevSlackApprovalAndQuestion: a Slack request to an agent whose tool
// call is gated blocks; the call is posted into the thread with Approve
// and Deny buttons; a click on Approve (POST /chat/slack/interactions,
// signed) approves it, and it runs once, however often Slack retries the
// click; the answer follows in the thread. An ask_human question is posted
// into the thread, and the thread's next reply is its answer.
func TestDevSlackApprovalAndQuestion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop")
	}
	bin := buildJetloop(t)
	channels := filepath.Join(t.TempDir(), "channels.yaml")
	if err := os.WriteFile(channels, []byte("channels:\n  C0GATE: gated/g1\n  C0ASK: asker/a1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fake := slackfake.New(t, "xoxb-test")
	work := t.TempDir()
	t.Setenv("JETLOOP_SLACK_SIGNING_SECRET", slackSecret)
	t.Setenv("JETLOOP_SLACK_CHANNELS", channels)
	t.Setenv("JETLOOP_SLACK_BOT_TOKEN", "xoxb-test")
	t.Setenv("JETLOOP_SLACK_API_URL", fake.URL())
	t.Setenv("JETLOOP_WORK_DIR", work)
	p := startProc(t, bin, devArgs(t.TempDir())...)
	ready := p.waitReady(time.Minute)
	url, base := ready["nats"], ready["http"]
	putAgent(t, url, policies.Definition{
		Name: "gated", Tools: []string{"shell"},
		Approvals: []policies.Approval{{Name: "shell", When: `tool.name == "shell"`}},
		Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{
			{Text: "Writing it down.", ToolCalls: []policies.ScriptToolCall{{Name: "shell", Args: map[string]any{"command": "echo ran >> ledger.txt"}}}},
			{Text: "Written."},
		}},
	})
	putAgent(t, url, policies.Definition{
		Name: "asker", Tools: []string{"ask_human"},
		Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{
			{Text: "Let me ask.", ToolCalls: []policies.ScriptToolCall{{Name: "ask_human", Args: map[string]any{"question": "Which colour?"}}}},
			{Text: "Noted your colour."},
		}},
	})

	const root = "1700000100.000100"
	postSlackAt(t, base, "C0GATE", "Ev10", root, "", "please write it down")
	posts := waitPosts(t, fake, "C0GATE", root, 1, p)
	if !strings.Contains(posts[0].Text, "Approval needed") || !strings.Contains(string(posts[0].Blocks), slack.ActionApprove) {
		t.Fatalf("approval post %+v", posts[0])
	}
	if out := click(t, base, "C0GATE", posts[0], slack.ActionApprove, "1700000101.000001"); out["ok"] != true || out["verb"] != "approve" {
		t.Fatalf("approve click: %v", out)
	}
	// Slack retries a click it did not see answered: applied once.
	if out := click(t, base, "C0GATE", posts[0], slack.ActionApprove, "1700000101.000001", 1); out["ok"] != true {
		t.Fatalf("retried click: %v", out)
	}
	posts = waitPosts(t, fake, "C0GATE", root, 2, p)
	if posts[1].Text != "Written." {
		t.Fatalf("answer post %+v", posts[1])
	}
	b, _ := os.ReadFile(filepath.Join(work, "gated", "g1", "ledger.txt"))
	if strings.Count(string(b), "ran") != 1 {
		t.Fatalf("the approved call ran %d times (ledger %q)", strings.Count(string(b), "ran"), b)
	}
	// A click from a channel not mapped to the session answers nothing.
	if out := click(t, base, "C0ASK", posts[0], slack.ActionDeny, "1700000102.000001"); out["ok"] != false {
		t.Fatalf("click from another channel: %v", out)
	}

	const aroot = "1700000200.000100"
	postSlackAt(t, base, "C0ASK", "Ev20", aroot, "", "pick a colour")
	posts = waitPosts(t, fake, "C0ASK", aroot, 1, p)
	if posts[0].Text != "Which colour?" {
		t.Fatalf("question post %+v", posts[0])
	}
	postSlackAt(t, base, "C0ASK", "Ev21", "1700000201.000100", aroot, "blue")
	posts = waitPosts(t, fake, "C0ASK", aroot, 2, p)
	if posts[1].Text != "Noted your colour." {
		t.Fatalf("answer post %+v", posts[1])
	}
	s, err := show(t, bin, url, "asker/a1")
	if err != nil {
		t.Fatal(err)
	}
	res := toolResults(s.Transcript, "ask_human")
	if len(res) != 1 || res[0]["result"] != "blue" || s.Status != "done" {
		t.Fatalf("ask_human results %v, status %s", res, s.Status)
	}
}
