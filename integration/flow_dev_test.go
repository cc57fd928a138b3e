package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
)

// startDev runs `jetloop dev` with one worker and the webhook secret, and
// returns its ready line's addresses.
func startDev(t *testing.T, bin string, extra ...string) (*proc, map[string]string) {
	t.Helper()
	t.Setenv("JETLOOP_GITHUB_SECRET", ingestSecret)
	t.Setenv("JETLOOP_WORK_DIR", t.TempDir())
	p := startProc(t, bin, append(devArgs(t.TempDir()), extra...)...)
	ready := p.waitReady(time.Minute)
	t.Cleanup(func() {
		if err := p.stop(syscall.SIGTERM, 30*time.Second); err != nil {
			t.Errorf("dev did not stop: %v\n%s", err, p.Stderr())
		}
	})
	return p, ready
}

// awaitShow polls `jetloop show --json` until ok accepts the session.
func awaitShow(t *testing.T, p *proc, bin, url, ref string, timeout time.Duration, ok func(showJSON) error) showJSON {
	t.Helper()
	var s showJSON
	err := natstest.Poll(t.Context(), timeout, func() error {
		var err error
		if s, err = show(t, bin, url, ref); err != nil {
			return err
		}
		return ok(s)
	})
	if err != nil {
		t.Fatalf("%s: %v\nlast: %+v\ndev stderr:\n%s", ref, err, s, p.Stderr())
	}
	return s
}

func entriesOf(s showJSON, kind string) []map[string]any {
	var out []map[string]any
	for _, e := range s.Transcript {
		if e["kind"] == kind {
			out = append(out, e)
		}
	}
	return out
}

// TestDevMentionResponderAnswersABurstOnce runs the shipped
// mention-responder from webhook to answer on `jetloop dev`: five
// comments mentioning @jetloop on one issue, 300 ms apart, are each
// answered 202 as debounced, and the session gets one turn, holding the
// fifth comment and the count, which the scripted model answers.
func TestDevMentionResponderAnswersABurstOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop")
	}
	bin := buildJetloop(t)
	p, ready := startDev(t, bin)
	raw, err := os.ReadFile("../ingest/testdata/github/issue_comment/created.payload.json")
	if err != nil {
		t.Fatal(err)
	}
	var payload map[string]any
	if err := json.Unmarshal(raw, &payload); err != nil {
		t.Fatal(err)
	}
	const session = "Codertocat/Hello-World#1"
	for i := 1; i <= 5; i++ {
		payload["comment"].(map[string]any)["body"] = fmt.Sprintf("@jetloop comment %d of the burst", i)
		body, _ := json.Marshal(payload)
		status, out := postWebhook(t, ready["http"], "issue_comment", fmt.Sprintf("burst-%d", i), body, ingest.Sign([]byte(ingestSecret), body))
		admitted, _ := out["admitted"].([]any)
		if status != http.StatusAccepted || len(admitted) != 1 || !strings.Contains(fmt.Sprint(admitted[0]), "debounced:true") ||
			!strings.Contains(fmt.Sprint(admitted[0]), session) {
			t.Fatalf("comment %d: %d %v", i, status, out)
		}
		time.Sleep(300 * time.Millisecond) // the burst's pace
	}
	s := awaitShow(t, p, bin, ready["nats"], "mention-responder/"+session, time.Minute, func(s showJSON) error {
		if s.Status != "done" {
			return fmt.Errorf("status %s", s.Status)
		}
		return nil
	})
	evs := entriesOf(s, "event")
	if len(evs) != 1 {
		t.Fatalf("%d event entries, want the burst as one: %v", len(evs), s.Transcript)
	}
	text := fmt.Sprint(evs[0]["text"])
	ref, _ := evs[0]["event"].(map[string]any)
	if !strings.Contains(text, "comment 5 of the burst") || strings.Contains(text, "comment 4") || !strings.Contains(text, "burst of 5 events") || ref["count"] != 5.0 || ref["id"] != "burst-5" {
		t.Fatalf("the burst's event entry: %v", evs[0])
	}
	// The run answers as the shipped script says, to its last entry.
	ex, err := policies.LoadFile("../examples/mention-responder.yaml")
	if err != nil {
		t.Fatal(err)
	}
	script := ex.Definition.Model.Script
	answers := entriesOf(s, "assistant")
	if len(answers) != len(script) || answers[len(answers)-1]["text"] != script[len(script)-1].Text {
		t.Fatalf("answers %v, want the script's %d", answers, len(script))
	}
}
