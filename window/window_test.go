package window_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/window"
)

// turns builds a transcript of n turns: an event, an answer with a call,
// its result.
func turns(n int) []record.Entry {
	var out []record.Entry
	id := uint64(0)
	add := func(e record.Entry) {
		id++
		e.ID = id
		out = append(out, e)
	}
	for t := 1; t <= n; t++ {
		add(record.Entry{Kind: record.KindEvent, Turn: t - 1, Text: "tick"})
		add(record.Entry{Kind: record.KindAssistant, Turn: t, Text: "checking"})
		add(record.Entry{Kind: record.KindToolCall, Turn: t, Name: "probe", CallID: "c" + string(rune('a'+t)), Args: []byte(`{}`)})
		add(record.Entry{Kind: record.KindToolResult, Turn: t, Name: "probe", CallID: "c" + string(rune('a'+t)), Result: strings.Repeat("r", 1000)})
	}
	return out
}

func input(t testing.TB, p *policies.ContextPolicy, entries []record.Entry) window.Input {
	t.Helper()
	ref, err := streams.NewSessionRef("mon", "s")
	if err != nil {
		t.Fatal(err)
	}
	st := record.NewState("mon", "s", time.Now())
	st.Turns = entries[len(entries)-1].Turn
	st.NextEntry = entries[len(entries)-1].ID + 1
	def := &policies.Definition{Name: "mon", System: "watch", Context: p}
	return window.Input{Names: streams.Default(), Ref: ref, Def: def, State: st, Entries: entries, Turn: st.Turns + 1}
}

func TestMaskAfterTurns(t *testing.T) {
	in := input(t, &policies.ContextPolicy{MaskAfterTurns: 2}, turns(5))
	c := window.Build(in)
	var masked []int
	for _, p := range c.Parts {
		if p.Masked {
			masked = append(masked, p.Turn)
			if !strings.HasPrefix(p.Handle, "mon.s.log.") || !strings.Contains(p.Text, p.Handle) {
				t.Errorf("part %+v", p)
			}
		}
	}
	// The next call is turn 6: results of turns 1-3 are more than 2 turns old.
	if len(masked) != 3 || masked[0] != 1 || masked[2] != 3 || c.Masked != 3 {
		t.Fatalf("masked turns %v", masked)
	}
	if full := window.Build(input(t, nil, turns(5))); full.Tokens <= c.Tokens || full.Masked != 0 {
		t.Fatalf("unmasked %d tokens, masked %d", full.Tokens, c.Tokens)
	}
	// Provider usage calibrates the estimate.
	in.State.CalBytes, in.State.CalTokens = 3000, 1000
	if cc := window.Build(in); !cc.Calibrated || cc.BytesPerToken != 3 || cc.Tokens <= c.Tokens {
		t.Fatalf("calibrated %+v", cc)
	}
	var ks []string
	for _, m := range c.Request.Messages {
		ks = append(ks, string(m.Role))
	}
	if strings.Join(ks, ",") != "user,assistant,tool,user,assistant,tool,user,assistant,tool,user,assistant,tool,user,assistant,tool" {
		t.Fatalf("roles %v", ks)
	}
}

func TestPlan(t *testing.T) {
	one, two := 1, 2
	p := &policies.ContextPolicy{CompactAtTokens: 1000, KeepFirstTurns: &one, KeepLastTurns: &two}
	in := input(t, p, turns(8))
	c := window.Build(in)
	plan, ok := window.Due(in, c)
	if !ok {
		t.Fatalf("not due at %d tokens", c.Tokens)
	}
	// Head: turn 1 (entries 1-4). Kept: turns 8 and 9 (9 is the coming
	// call's, without entries yet): from entry 29.
	if plan.HeadEnd != 5 || plan.Keep != 29 || plan.Answers != 6 {
		t.Fatalf("plan %+v", plan)
	}
	req := window.CompactRequest(in, plan)
	if !req.Compact || len(req.Messages) != 1 || !strings.Contains(req.Messages[0].Text, "[turn 2: event]") || strings.Contains(req.Messages[0].Text, "[turn 8:") {
		t.Fatalf("compact request %q", req.Messages[0].Text)
	}
	// After the compaction: head, summary, tail.
	sum := window.SummaryEntry(33, 8, plan, model.Response{Text: "all fine"})
	st := in.State
	st.HeadEnd, st.Summary, st.From, st.Summarised, st.NextEntry = plan.HeadEnd, 33, plan.Keep, plan.Answers, 34
	var live []record.Entry
	for _, sp := range st.Live() {
		for id := sp.From; id <= sp.To; id++ {
			if id == 33 {
				live = append(live, sum)
			} else {
				live = append(live, in.Entries[id-1])
			}
		}
	}
	in.State, in.Entries = st, live
	after := window.Build(in)
	if after.Tokens >= c.Tokens || after.Request.Earlier != 6 {
		t.Fatalf("after compaction %d tokens (before %d), earlier %d", after.Tokens, c.Tokens, after.Request.Earlier)
	}
	// The head's answer and result, then the summary leading the kept
	// event in one user message.
	if m := after.Request.Messages[3]; m.Role != model.RoleUser || !strings.HasPrefix(m.Text, "[summary of the earlier conversation") || !strings.HasSuffix(m.Text, "all fine\n\ntick") {
		t.Fatalf("fourth message %q", m.Text)
	}
	if _, ok := window.Plan(in); ok {
		t.Fatal("a compaction right after one plans again")
	}
}

// A context whose kept turns alone pass the threshold is not compacted
// for the little a new turn would move out of them: the call goes as it
// is, rather than a compaction before every call.
func TestDueSkipsATinyMiddle(t *testing.T) {
	one, two := 0, 2
	p := &policies.ContextPolicy{CompactAtTokens: 1000, KeepFirstTurns: &one, KeepLastTurns: &two}
	entries := turns(3)
	for i := range entries {
		if entries[i].Kind == record.KindToolResult {
			entries[i].Result = "ok"
		}
	}
	// The last turn's result is large: the kept tail alone passes 1000
	// tokens.
	entries[len(entries)-1].Result = strings.Repeat("r", 8000)
	in := input(t, p, entries)
	c := window.Build(in)
	if _, ok := window.Plan(in); !ok || c.Tokens <= 1000 {
		t.Fatalf("plan or tokens %d", c.Tokens)
	}
	if _, due := window.Due(in, c); due {
		t.Fatal("a compaction of a few bytes is due")
	}
}

// approvedTurns is turns(n) with the calls of the given turns approved:
// the approval's control entry sits between the call and its result,
// in the turn the approval leads to.
func approvedTurns(n int, approved ...int) []record.Entry {
	var out []record.Entry
	for _, e := range turns(n) {
		if e.Kind == record.KindToolResult && slices.Contains(approved, e.Turn) {
			out = append(out, record.Entry{Kind: record.KindControl, Turn: e.Turn, Name: "approve"})
		}
		out = append(out, e)
	}
	for i := range out {
		out[i].ID = uint64(i + 1)
	}
	return out
}

// pairsHold fails t unless every tool call of req's answers is followed
// by its result before the next answer or input, and every result
// follows its call: what providers require of a conversation.
func pairsHold(t *testing.T, req model.Request) {
	t.Helper()
	open := map[string]bool{}
	for i, m := range req.Messages {
		switch m.Role {
		case model.RoleAssistant, model.RoleUser:
			if len(open) > 0 {
				t.Fatalf("message %d (%s) while calls %v wait for their results", i, m.Role, open)
			}
			for _, c := range m.ToolCalls {
				open[c.ID] = true
			}
		case model.RoleTool:
			for _, r := range m.ToolResults {
				if !open[r.CallID] {
					t.Fatalf("message %d: the result of call %s follows no call of it", i, r.CallID)
				}
				delete(open, r.CallID)
			}
		}
	}
}

// compacted is in after a compaction by plan whose summary is entry id.
func compacted(in window.Input, plan record.Compaction, id uint64) window.Input {
	sum := window.SummaryEntry(id, in.State.Turns, plan, model.Response{Text: "earlier"})
	st := in.State
	st.HeadEnd, st.Summary, st.From, st.Summarised, st.NextEntry = plan.HeadEnd, id, plan.Keep, plan.Answers, id+1
	byID := map[uint64]record.Entry{id: sum}
	for _, e := range in.Entries {
		byID[e.ID] = e
	}
	var live []record.Entry
	for _, sp := range st.Live() {
		for i := sp.From; i <= sp.To; i++ {
			live = append(live, byID[i])
		}
	}
	in.State, in.Entries = st, live
	return in
}

// A compaction never parts a call from its result: an approval (or any
// input recorded while calls wait) sits between them in the turn it leads
// to, and neither the head's end nor the tail's start may fall there.
func TestPlanKeepsCallsWithTheirResults(t *testing.T) {
	for _, tt := range []struct {
		name        string
		first, last int
		approved    []int
	}{
		{name: "the head's last turn approved", first: 1, last: 2, approved: []int{1}},
		{name: "the turn before the tail approved", first: 1, last: 2, approved: []int{7}},
		{name: "the last turn approved", first: 0, last: 1, approved: []int{8}},
		{name: "every turn approved", first: 2, last: 3, approved: []int{1, 2, 3, 4, 5, 6, 7, 8}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := &policies.ContextPolicy{CompactAtTokens: 1000, KeepFirstTurns: &tt.first, KeepLastTurns: &tt.last}
			in := input(t, p, approvedTurns(8, tt.approved...))
			pairsHold(t, window.Build(in).Request)
			plan, ok := window.Plan(in)
			if !ok {
				t.Fatal("no plan")
			}
			after := compacted(in, plan, in.State.NextEntry)
			pairsHold(t, window.Build(after).Request)
		})
	}
}

// A middle longer than one summary request holds is summarised in
// parts, oldest first, each compaction taking in the summary before it:
// a summary never stands for entries its request left out, and the
// compactions reach the kept tail.
func TestPlanSummarisesALongMiddleInParts(t *testing.T) {
	first, last := 1, 4
	p := &policies.ContextPolicy{CompactAtTokens: 400_000, KeepFirstTurns: &first, KeepLastTurns: &last}
	all := turns(900) // about 1 MB of middle: twice what one request holds
	byID := map[uint64]record.Entry{}
	for _, e := range all {
		byID[e.ID] = e
	}
	in := input(t, p, all)
	tailStart := uint64(len(all) - 4*4 + 4 + 1) // the last 4 turns' entries, the coming call's among them
	compactions := 0
	for ; compactions < 10; compactions++ {
		plan, ok := window.Plan(in)
		if !ok {
			break
		}
		text := window.CompactRequest(in, plan).Messages[0].Text
		if strings.Contains(text, "left out") {
			t.Fatalf("compaction %d covers %d to %d, but its request (%d bytes) leaves part of them out", compactions+1, plan.HeadEnd, plan.Keep-1, len(text))
		}
		// The last entry it covers is in its request.
		if lastCovered := byID[plan.Keep-1]; lastCovered.Kind == record.KindToolResult && !strings.Contains(text, "[turn "+itoa(lastCovered.Turn)+": result of probe]") {
			t.Fatalf("compaction %d covers entry %d (turn %d), its request does not show it", compactions+1, plan.Keep-1, lastCovered.Turn)
		}
		st := in.State
		sum := window.SummaryEntry(st.NextEntry, st.Turns, plan, model.Response{Text: "part " + itoa(compactions+1)})
		byID[sum.ID] = sum
		st.HeadEnd, st.Summary, st.From, st.Summarised, st.NextEntry = plan.HeadEnd, sum.ID, plan.Keep, plan.Answers, sum.ID+1
		var live []record.Entry
		for _, sp := range st.Live() {
			for id := sp.From; id <= sp.To; id++ {
				live = append(live, byID[id])
			}
		}
		in.State, in.Entries = st, live
	}
	if compactions < 2 || in.State.From != tailStart || in.State.Summarised != 900-4 {
		t.Fatalf("%d compactions; the window %+v (the tail starts at %d)", compactions, in.State.Window, tailStart)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
