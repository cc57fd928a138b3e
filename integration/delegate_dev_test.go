package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/internal/openaifake"
	"github.com/jetloop/jetloop/policies"
)

// treeNode is a node of `jetloop status --tree --json`.
type treeNode struct {
	Agent          string     `json:"agent"`
	Session        string     `json:"session"`
	Status         string     `json:"status"`
	DelegatedBy    string     `json:"delegated_by"`
	SubtreeTurns   int        `json:"subtree_turns"`
	SubtreeCostUSD float64    `json:"subtree_cost_usd"`
	Children       []treeNode `json:"children"`
}

// delegatedShow is the delegation part of `jetloop show --json`.
type delegatedShow struct {
	Status     string `json:"status"`
	Reason     string `json:"reason"`
	WaitingFor string `json:"waiting_for"`
	Delegation *struct {
		Parent string `json:"parent"`
		CallID string `json:"call_id"`
		Hops   int    `json:"hops"`
	} `json:"delegation"`
	Children []struct {
		Session  string `json:"session"`
		CallID   string `json:"call_id"`
		Status   string `json:"status"`
		Answered bool   `json:"answered"`
	} `json:"children"`
	Budget struct {
		Run struct {
			CostUSD float64 `json:"cost_usd"`
		} `json:"run"`
		Subtree struct {
			Turns   int     `json:"turns"`
			CostUSD float64 `json:"cost_usd"`
		} `json:"subtree"`
	} `json:"budget"`
	Ledger *struct {
		Parts map[string]struct {
			CostUSD float64 `json:"cost_usd"`
			Turns   int     `json:"turns"`
		} `json:"parts"`
	} `json:"ledger"`
	Transcript []map[string]any `json:"transcript"`
}

func showDelegated(t *testing.T, bin, url, ref string) delegatedShow {
	t.Helper()
	out, err := jetloopCmd(t, bin, "show", "--server", url, "--json", ref)
	if err != nil {
		t.Fatal(err)
	}
	var s delegatedShow
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("show --json: %v\n%s", err, out)
	}
	return s
}

// sendWaitJSON runs `jetloop send --wait --json` and returns its answer.
// A run that ended failed, budget_exceeded or cancelled exits 1 with the
// answer printed all the same.
func sendWaitJSON(t *testing.T, bin, url, agent, session, text string) map[string]any {
	t.Helper()
	out, err := jetloopCmd(t, bin, "send", "--server", url, "--wait", "--timeout", "2m", "--json", agent, session, text)
	var m map[string]any
	if jerr := json.Unmarshal([]byte(out), &m); jerr != nil {
		t.Fatalf("send --json: %v, %v\n%s", err, jerr, out)
	}
	switch m["status"] {
	case "failed", "budget_exceeded", "cancelled":
		if err == nil || !strings.Contains(err.Error(), "exit status 1") {
			t.Fatalf("send --wait of a run that ended %s: %v", m["status"], err)
		}
	default:
		if err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func delegateResultsByCall(tr []map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, e := range tr {
		if e["kind"] == "tool_result" && e["name"] == "delegate" {
			out[e["call_id"].(string)] = e
		}
	}
	return out
}

// TestDevReviewersSeeOnlyTheDiff runs the shipped implementer, reviewers
// and fixer on `jetloop dev` as they come, from the user's request to the
// implementer's answer: the two reviews fan in, the fixer gets the diff
// and both reviews, `status --tree` shows the tree. Then the reviewers'
// model is pointed at an OpenAI-compatible fake that records what they
// are sent: each request holds the diff, their own instructions and
// nothing of the implementer's session (its prompt, its answers, its
// shell command, the task it wrote, the user's request).
func TestDevReviewersSeeOnlyTheDiff(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop")
	}
	bin := buildJetloop(t)
	p, ready := startDev(t, bin)
	url := ready["nats"]

	got := sendWaitJSON(t, bin, url, "implementer", "change-1", "make add() subtract")
	if got["status"] != "done" || !strings.Contains(fmt.Sprint(got["answer"]), "reviewed by two reviewers") {
		t.Fatalf("send --wait: %v\n%s", got, p.Stderr())
	}
	impl := showDelegated(t, bin, url, "implementer/change-1")
	res := delegateResultsByCall(impl.Transcript)
	if len(res) != 3 || !strings.Contains(fmt.Sprint(res["call_1_0"]["result"]), "add(2, 3) is -1") ||
		!strings.Contains(fmt.Sprint(res["call_1_1"]["result"]), "wrong sign") ||
		!strings.Contains(fmt.Sprint(res["call_2_0"]["result"]), "Fixed: add() returns a + b again") {
		t.Fatalf("implementer's delegate results %v", res)
	}
	if len(impl.Children) != 3 || impl.Budget.Subtree.Turns != 8 {
		t.Fatalf("implementer's children %+v, subtree %+v", impl.Children, impl.Budget.Subtree)
	}
	for _, c := range impl.Children {
		if c.Status != "done" || !c.Answered {
			t.Fatalf("child %+v", c)
		}
	}
	fixer := showDelegated(t, bin, url, "fixer/implementer/change-1/call_2_0")
	first := fmt.Sprint(fixer.Transcript[0]["text"])
	for _, want := range []string{"Fix what the reviews found", "[input diff]", "+    return a - b", "[input review_a]", "add(2, 3) is -1", "[input review_b]", "wrong sign"} {
		if !strings.Contains(first, want) {
			t.Fatalf("the fixer's context lacks %q:\n%s", want, first)
		}
	}
	out, err := jetloopCmd(t, bin, "status", "--server", url, "--tree", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var forest []treeNode
	if err := json.Unmarshal([]byte(out), &forest); err != nil {
		t.Fatalf("status --tree --json: %v\n%s", err, out)
	}
	var root *treeNode
	for i := range forest {
		if forest[i].Agent == "implementer" && forest[i].Session == "change-1" {
			root = &forest[i]
		}
	}
	if root == nil || len(root.Children) != 3 || root.Children[0].Agent != "reviewer-a" || root.Children[1].Agent != "reviewer-b" ||
		root.Children[2].Agent != "fixer" || root.Children[0].DelegatedBy != "implementer/change-1" {
		t.Fatalf("tree %s", out)
	}
	table, err := jetloopCmd(t, bin, "status", "--server", url, "--tree")
	if err != nil || !strings.Contains(table, "  └ reviewer-a/implementer/change-1/call_1_0") {
		t.Fatalf("status --tree: %v\n%s", err, table)
	}

	// The reviewers on a model that records their requests.
	fake := openaifake.New(func(n int, req openaifake.Request) openaifake.Reply {
		return openaifake.Reply{Text: fmt.Sprintf("FAKE REVIEW %d: assuming it is wrong, add() subtracts.", n)}
	})
	t.Cleanup(fake.Close)
	for _, f := range []string{"reviewer-a", "reviewer-b"} {
		c, err := policies.LoadFile("../examples/" + f + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		def := c.Definition
		def.Model = policies.Model{Provider: "openai", BaseURL: fake.BaseURL(), Name: "fake-reviewer"}
		putAgent(t, url, def)
	}
	got = sendWaitJSON(t, bin, url, "implementer", "change-2", "make add() subtract")
	if got["status"] != "done" {
		t.Fatalf("send --wait: %v\n%s", got, p.Stderr())
	}
	reqs := fake.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d reviewer requests, want 2", len(reqs))
	}
	for _, r := range reqs {
		var all strings.Builder
		for _, m := range r.Messages {
			if m.Role != "system" && m.Role != "user" {
				t.Fatalf("a reviewer request holds a %s message: %+v", m.Role, r.Messages)
			}
			all.WriteString(m.Text() + "\n")
		}
		text := all.String()
		for _, want := range []string{"Assume it is wrong", "[input diff]", "-    return a + b", "+    return a - b"} {
			if !strings.Contains(text, want) {
				t.Fatalf("a reviewer request lacks %q:\n%s", want, text)
			}
		}
		for _, leak := range []string{"You implement changes", "I will make the change", "Two reviewers get the diff", "printf",
			"Review my change to add()", "make add() subtract", "FAKE REVIEW", "calc.py.orig'"} {
			if strings.Contains(text, leak) {
				t.Fatalf("a reviewer request holds %q of another session:\n%s", leak, text)
			}
		}
		if len(r.Tools) != 0 {
			t.Fatalf("a reviewer was offered tools: %+v", r.Tools)
		}
	}
}

// TestDevDelegationRules runs the host's rules over real processes: a
// chain A → B → A with the same task is refused, as a decision `jetloop
// events` lists, and the refused call's session answers with the reason;
// a child that would spend more than its parent's run has left is stopped
// budget_exceeded, its parent stops at its ceiling, and the parent's
// ledger shows the child's spend; cancelling a root cancels its running
// grandchild, whose shell process dies.
func TestDevDelegationRules(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs jetloop")
	}
	bin := buildJetloop(t)
	p, ready := startDev(t, bin)
	url := ready["nats"]
	request := "\ntriggers:\n  - {name: request, when: event.type == \"dev.jetloop.request\", session: event.subject}\n"

	t.Run("A to B to A is refused", func(t *testing.T) {
		apply(t, bin, url, `name: ping-a
tools: [delegate]
model:
  provider: scripted
  script:
    - {text: To b., tool_calls: [{name: delegate, args: {agent: ping-b, task: ping}}]}
    - {text: a done.}`+request)
		apply(t, bin, url, `name: ping-b
tools: [delegate]
model:
  provider: scripted
  script:
    - {text: Back to a., tool_calls: [{name: delegate, args: {agent: ping-a, task: Ping}}]}
    - {text: b done.}`)
		if got := sendWaitJSON(t, bin, url, "ping-a", "s1", "ping"); got["status"] != "done" || got["answer"] != "a done." {
			t.Fatalf("send --wait: %v\n%s", got, p.Stderr())
		}
		b := showDelegated(t, bin, url, "ping-b/ping-a/s1/call_0_0")
		r := delegateResultsByCall(b.Transcript)["call_0_0"]
		if r == nil || r["is_error"] != true || !strings.Contains(fmt.Sprint(r["result"]), "cycle: ping-a was given this task already") {
			t.Fatalf("ping-b's call result %v", r)
		}
		if b.Delegation == nil || b.Delegation.Parent != "ping-a/s1" || b.Delegation.Hops != 1 {
			t.Fatalf("ping-b's delegation %+v", b.Delegation)
		}
		out, err := jetloopCmd(t, bin, "events", "--server", url, "--json")
		if err != nil {
			t.Fatal(err)
		}
		var recs []map[string]any
		if err := json.Unmarshal([]byte(out), &recs); err != nil {
			t.Fatalf("events --json: %v\n%s", err, out)
		}
		found := false
		for _, rec := range recs {
			if rec["decision"] == "refused" && rec["agent"] == "ping-a" && strings.HasPrefix(fmt.Sprint(rec["reason"]), "cycle:") &&
				rec["rule"] == "ping-a/(delegate)" {
				found = true
			}
		}
		if !found {
			t.Fatalf("no refused decision among the events:\n%s", out)
		}
		// The delegations' decision records count in the ingest's
		// metrics of the process: ping-b is admitted by delegation only.
		resp, err := http.Get(ready["http"] + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		metrics, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, series := range []string{`jetloop_ingest_audit_records_total{agent="ping-b"} `, `jetloop_ingest_decisions_total{agent="ping-b",decision="admitted"} `} {
			if !strings.Contains(string(metrics), series) {
				t.Fatalf("no %s in /metrics", series)
			}
		}
	})

	t.Run("a child over its parent's remaining cost", func(t *testing.T) {
		// 1000 input tokens of claude-sonnet-4-5 cost $0.003.
		apply(t, bin, url, `name: boss
tools: [delegate]
budget: {max_cost_usd: 0.01}
model:
  provider: scripted
  name: claude-sonnet-4-5
  script:
    - {text: Over to the spender., tool_calls: [{name: delegate, args: {agent: spender, task: spend}}], usage: {input_tokens: 1000}}
    - {text: never reached, usage: {input_tokens: 1000}}`+request)
		apply(t, bin, url, `name: spender
tools: [delegate]
model:
  provider: scripted
  name: claude-sonnet-4-5
  script:
    - {text: Spending., tool_calls: [{name: delegate, args: {agent: nobody, task: x}}], usage: {input_tokens: 2000}}
    - {text: More., tool_calls: [{name: delegate, args: {agent: nobody, task: y}}], usage: {input_tokens: 2000}}
    - {text: never reached, usage: {input_tokens: 2000}}`)
		got := sendWaitJSON(t, bin, url, "boss", "b1", "go")
		if got["status"] != "budget_exceeded" || !strings.Contains(fmt.Sprint(got["reason"]), "max_cost_usd of this run and the sessions it delegated to") {
			t.Fatalf("send --wait: %v\n%s", got, p.Stderr())
		}
		child := showDelegated(t, bin, url, "spender/boss/b1/call_0_0")
		if child.Status != "budget_exceeded" || !strings.Contains(child.Reason, "max_cost_usd 0.0070 reached") {
			t.Fatalf("child %s: %s", child.Status, child.Reason)
		}
		boss := showDelegated(t, bin, url, "boss/b1")
		if boss.Ledger == nil || boss.Ledger.Parts["spender/boss/b1/call_0_0"].CostUSD < 0.0119 || boss.Ledger.Parts["boss/b1"].CostUSD < 0.0029 {
			t.Fatalf("boss's ledger %+v", boss.Ledger)
		}
		if boss.Budget.Run.CostUSD > 0.0031 || boss.Budget.Subtree.CostUSD < 0.0149 {
			t.Fatalf("boss's own %+v, subtree %+v", boss.Budget.Run, boss.Budget.Subtree)
		}
	})

	t.Run("cancelling the root stops the grandchild's shell", func(t *testing.T) {
		pidFile := filepath.Join(t.TempDir(), "leaf.pid")
		apply(t, bin, url, `name: root
tools: [delegate]
model: {provider: scripted, script: [{text: Down., tool_calls: [{name: delegate, args: {agent: mid, task: middle}}]}]}`+request)
		apply(t, bin, url, `name: mid
tools: [delegate]
model: {provider: scripted, script: [{text: Further., tool_calls: [{name: delegate, args: {agent: leaf, task: sleep}}]}]}`)
		apply(t, bin, url, fmt.Sprintf(`name: leaf
tools: [shell]
model:
  provider: scripted
  script:
    - {text: Sleeping., tool_calls: [{name: shell, args: {command: "echo $$ > %s; exec sleep 60"}}]}
    - {text: Woke.}`, pidFile))
		if _, err := jetloopCmd(t, bin, "send", "--server", url, "root", "r1", "go"); err != nil {
			t.Fatal(err)
		}
		var pid int
		natstest.WaitFor(t, time.Minute, func() error {
			b, err := os.ReadFile(pidFile)
			if err != nil {
				return err
			}
			pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
			return err
		})
		if !processAlive(pid) {
			t.Fatalf("the leaf's sleep %d is not running", pid)
		}
		natstest.WaitFor(t, time.Minute, func() error {
			if s := showDelegated(t, bin, url, "root/r1"); s.Status != "waiting" || !strings.Contains(s.WaitingFor, "mid/root/r1/call_0_0 (waiting: the answers of leaf/mid/root/r1/call_0_0/call_0_0 (working))") {
				return fmt.Errorf("root %s: %s", s.Status, s.WaitingFor)
			}
			return nil
		})
		if _, err := jetloopCmd(t, bin, "cancel", "--server", url, "root/r1", "enough"); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, bin, url, "leaf/mid/root/r1/call_0_0/call_0_0", "cancelled")
		natstest.WaitFor(t, time.Minute, func() error {
			if processAlive(pid) {
				return fmt.Errorf("the leaf's sleep %d still runs", pid)
			}
			return nil
		})
		waitStatus(t, bin, url, "mid/root/r1/call_0_0", "cancelled")
		root := waitStatus(t, bin, url, "root/r1", "cancelled")
		if r := results(root); len(r) != 1 || !strings.Contains(fmt.Sprint(r[0]["result"]), "not answered: cancelled") {
			t.Fatalf("root's results %v", r)
		}
	})
}
