package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/internal/openaifake"
)

// prAgent reviews one pull request per session on the OpenAI provider:
// every event it reads whole with read_event (about 12 KB a time), so the
// context is what the policy makes of it.
const prAgent = `name: pr-context
model: {provider: openai, name: gpt-4o-mini, base_url: %q}
system: You review pull requests, one session per pull request, across its pushes.
tools: [read_event]
context: {mask_after_turns: 2, compact_at_tokens: 8000, keep_first_turns: 1, keep_last_turns: 4, notes: true}
triggers:
  - name: pr
    when: event.type.startsWith("com.github.pull_request.") || event.type == "com.github.issue_comment.created"
    session: >-
      event.data.repository.full_name + "#" +
      string(has(event.data.pull_request) ? event.data.pull_request.number : event.data.issue.number)
    prompt: "{{ event.type }} on {{ event.data.repository.full_name }}"
`

var seqRE = regexp.MustCompile(`read_event \{"seq": (\d+)\}`)

// reviewer answers like a model that reads each event whole, then says
// what it found; a compaction request it answers with a summary.
func reviewer(_ int, req openaifake.Request) openaifake.Reply {
	if strings.HasPrefix(req.System(), "You compact the history") {
		return openaifake.Reply{Text: "Summary: pull request #2 was opened and pushed to many times; each push was read and reviewed; a commenter asked for a README fix."}
	}
	last := req.Last()
	if last.Role == "tool" {
		return openaifake.Reply{Text: "Reviewed: looks fine."}
	}
	if m := seqRE.FindStringSubmatch(last.Text()); m != nil {
		seq, _ := strconv.Atoi(m[1])
		return openaifake.Reply{Text: "Reading the event.", ToolCalls: []openaifake.Call{{Name: "read_event", Args: map[string]any{"seq": seq}}}}
	}
	return openaifake.Reply{Text: "Nothing to read."}
}

// TestDevPullRequestSessionStaysBounded is the context acceptance on
// `jetloop dev`: a persistent pull request session fed the real
// pull_request fixtures (opened, synchronize ×20, then review comments)
// sends requests that stay bounded, and `jetloop context` shows the
// compact projection, masked old results and one summary; `jetloop show`
// marks what the context no longer holds and pages by key.
func TestDevPullRequestSessionStaysBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop")
	}
	fake := openaifake.New(reviewer)
	defer fake.Close()
	t.Setenv("OPENAI_API_KEY", "test-key")
	bin := buildJetloop(t)
	p, ready := startDev(t, bin)
	url := ready["nats"]
	apply(t, bin, url, fmt.Sprintf(prAgent, fake.BaseURL()))

	load := func(rel string) map[string]any {
		raw, err := os.ReadFile("../projection/testdata/github/" + rel)
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	deliver := func(event, id string, v map[string]any) {
		body, _ := json.Marshal(v)
		status, out := postWebhook(t, ready["http"], event, id, body, ingest.Sign([]byte(ingestSecret), body))
		if status != http.StatusAccepted {
			t.Fatalf("%s %s: %d %v", event, id, status, out)
		}
	}
	deliver("pull_request", "pr-opened", load("pull_request/opened.payload.json"))
	sync := load("pull_request/synchronize.payload.json")
	for i := 1; i <= 20; i++ {
		sync["before"], sync["after"] = sync["after"], fmt.Sprintf("%040x", i)
		deliver("pull_request", fmt.Sprintf("pr-sync-%d", i), sync)
	}
	// The review comments: the fixture's comment is on issue 1; on pull
	// request 2, GitHub sends it with the issue's pull_request field.
	comment := load("issue_comment/created.payload.json")
	issue := comment["issue"].(map[string]any)
	issue["number"] = 2
	issue["pull_request"] = map[string]any{"url": "https://api.github.com/repos/Codertocat/Hello-World/pulls/2"}
	for i := 1; i <= 3; i++ {
		comment["comment"].(map[string]any)["body"] = fmt.Sprintf("Review comment %d: please fix the README wording.", i)
		deliver("issue_comment", fmt.Sprintf("pr-comment-%d", i), comment)
	}

	const ref = "pr-context/Codertocat/Hello-World#2"
	s := awaitShow(t, p, bin, url, ref, 3*time.Minute, func(s showJSON) error {
		if n := len(entriesOf(s, "event")); s.Status != "done" || n != 24 {
			return fmt.Errorf("status %s with %d events", s.Status, n)
		}
		return nil
	})

	// Bounded: every request's input, as the provider counted it, stays
	// under compact_at_tokens plus one event's worth (its projection and
	// the 12 KB it reads), while the transcript holds all of it.
	reqs := fake.Requests()
	var compactions int
	var maxTokens int64
	for _, r := range reqs {
		if strings.HasPrefix(r.System(), "You compact the history") {
			compactions++
			continue
		}
		maxTokens = max(maxTokens, r.PromptTokens)
	}
	var resultBytes int
	for _, e := range results(s) {
		resultBytes += len(fmt.Sprint(e["result"]))
	}
	if compactions == 0 || maxTokens > 8000+6000 || resultBytes < 200_000 {
		t.Fatalf("%d requests, %d compactions, largest input %d tokens; results hold %d bytes", len(reqs), compactions, maxTokens, resultBytes)
	}
	t.Logf("%d requests, %d compactions, largest input %d tokens; the transcript's tool results hold %d bytes", len(reqs), compactions, maxTokens, resultBytes)

	// What the next call receives.
	out, err := jetloopCmd(t, bin, "context", "--server", url, "--json", ref)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Tokens int64 `json:"tokens"`
		Window *struct {
			Summary uint64 `json:"summary"`
		} `json:"window"`
		Calibrated bool `json:"calibrated"`
		Parts      []struct {
			Kind   string `json:"kind"`
			Entry  uint64 `json:"entry"`
			Masked bool   `json:"masked"`
			Handle string `json:"handle"`
			Tokens int64  `json:"tokens"`
			Text   string `json:"text"`
		} `json:"parts"`
	}
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		t.Fatalf("context --json: %v\n%s", err, out)
	}
	var summaries, masked, projected int
	for _, part := range c.Parts {
		switch {
		case part.Kind == "summary":
			summaries++
		case part.Masked:
			masked++
			if !strings.Contains(part.Text, part.Handle) {
				t.Errorf("masked part %d does not name its handle: %q", part.Entry, part.Text)
			}
		case part.Kind == "event":
			if strings.Contains(part.Text, "_links") || !strings.Contains(part.Text, `"event":"pull_request"`) && !strings.Contains(part.Text, `"event":"issue_comment"`) {
				t.Errorf("event part %d is not a projection: %.300s", part.Entry, part.Text)
			}
			projected++
		}
	}
	if summaries != 1 || masked == 0 || projected == 0 || c.Window == nil || !c.Calibrated || c.Tokens > 8000+6000 {
		t.Fatalf("context: %d summaries, %d masked, %d projected events, window %+v, calibrated %v, %d tokens\n%s", summaries, masked, projected, c.Window, c.Calibrated, c.Tokens, out)
	}
	human, err := jetloopCmd(t, bin, "context", "--server", url, ref)
	if err != nil || !strings.Contains(human, "[masked]") || !strings.Contains(human, "summary of ") || !strings.Contains(human, "calibrated") {
		t.Fatalf("context: %v\n%s", err, human)
	}

	// show marks what the context no longer holds, and pages.
	marks := map[string]int{}
	for _, e := range s.Transcript {
		if m, ok := e["context"].(string); ok {
			marks[m]++
		}
	}
	if marks["summarised"] == 0 || marks["masked"] == 0 {
		t.Fatalf("show marks %v", marks)
	}
	out, err = jetloopCmd(t, bin, "show", "--server", url, "--json", "--from", "5", "--limit", "3", ref)
	if err != nil {
		t.Fatal(err)
	}
	var page showJSON
	if err := json.Unmarshal([]byte(out), &page); err != nil {
		t.Fatal(err)
	}
	var ids []float64
	for _, e := range page.Transcript {
		ids = append(ids, e["id"].(float64))
	}
	if fmt.Sprint(ids) != "[5 6 7]" {
		t.Fatalf("show --from 5 --limit 3: entries %v", ids)
	}
}
