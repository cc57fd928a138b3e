package window

import (
	"fmt"
	"strings"

	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/record"
)

// Bounds of a compaction.
const (
	// MaxSummaryBytes bounds a stored summary.
	MaxSummaryBytes = 32 << 10
	// maxSummaryTokens bounds the summary the model is asked for.
	maxSummaryTokens = 4096
	// maxRendered bounds one entry, and maxCompactInput everything, in
	// the request that asks for a summary.
	maxRendered     = 4 << 10
	maxCompactInput = 512 << 10
)

// Block is the turn an entry belongs to for keeping and masking: an
// answer, its calls and their results are in the answer's turn; inputs
// (events, requests, steers, approvals, the runtime's notes) in the turn
// they lead to. An input recorded while an answer's calls wait for their
// results (an approval, an event that reached a blocked session) sits
// between a call and its result with a higher block: blocks do not
// decrease along a transcript except there.
func Block(e record.Entry) int {
	switch e.Kind {
	case record.KindAssistant, record.KindToolCall, record.KindToolResult:
		return e.Turn
	}
	return e.Turn + 1
}

// Due reports whether the next call should compact first: its context
// is estimated above compact_at_tokens and the turns between the kept
// head and the kept tail that no summary holds yet make at least a tenth
// of it. The plan says what to summarise.
func Due(in Input, c Context) (record.Compaction, bool) {
	p := in.Def.Context
	if p == nil || p.CompactAtTokens == 0 || c.Tokens <= p.CompactAtTokens {
		return record.Compaction{}, false
	}
	plan, ok := Plan(in)
	if !ok {
		return plan, false
	}
	// A compaction that would take out less than a tenth of the threshold
	// gains less than it costs (a model call each turn, once the kept
	// turns alone pass the threshold): the call goes as it is.
	var fresh int64
	for _, e := range in.Entries {
		if e.ID >= plan.HeadEnd && e.ID < plan.Keep && e.Kind != record.KindSummary {
			fresh += int64(len(e.Text) + len(e.Result) + len(e.Args))
		}
	}
	if Estimate(fresh, c.BytesPerToken) < p.CompactAtTokens/10 {
		return record.Compaction{}, false
	}
	return plan, true
}

// Plan is what a compaction of in would summarise: every entry between
// the head (the first keep_first_turns turns, fixed by the first
// compaction) and the last keep_last_turns turns, the previous summary
// among them. Neither end falls between a call and its result: the head
// takes in the results of its calls, the tail the calls of its results
// (providers refuse a call without its result, and a result without its
// call). A middle longer than one summary request holds is planned in
// parts, oldest first (see bounded). ok is false when that holds no entry a summary does not
// already stand for.
func Plan(in Input) (record.Compaction, bool) {
	p := in.Def.Context
	if p == nil {
		return record.Compaction{}, false
	}
	st := in.State
	headEnd := st.HeadEnd
	if st.Summary == 0 {
		headEnd = 1
		open := map[string]bool{}
		for _, e := range in.Entries {
			if Block(e) > p.KeepFirst() && len(open) == 0 {
				break
			}
			track(open, e)
			headEnd = e.ID + 1
		}
	}
	// The tail starts at the first entry of the kept turns, or before it,
	// at the last entry no call waits across (never at a call: it is its
	// answer's).
	firstKept := in.Turn - p.KeepLast() + 1
	keep, cut := uint64(0), uint64(0)
	open := map[string]bool{}
	for _, e := range in.Entries {
		if e.ID < headEnd || e.Kind == record.KindSummary {
			continue
		}
		if len(open) == 0 && e.Kind != record.KindToolCall {
			cut = e.ID
		}
		if Block(e) >= firstKept {
			keep = cut
			break
		}
		track(open, e)
	}
	keep = bounded(in, headEnd, keep)
	fresh := 0
	answers := st.Summarised
	for _, e := range in.Entries {
		if e.ID < headEnd || e.ID >= keep || e.Kind == record.KindSummary {
			continue
		}
		fresh++
		if e.Kind == record.KindAssistant {
			answers++
		}
	}
	if fresh == 0 || keep == 0 || keep <= headEnd {
		return record.Compaction{}, false
	}
	return record.Compaction{HeadEnd: headEnd, Keep: keep, Answers: answers}, true
}

// compactHeader opens the request that asks for a summary.
const compactHeader = "Summarise the part of the conversation below, which will be taken out of your context.\n\n"

// bounded is keep, or an earlier id where the entries from headEnd on
// stop fitting one summary request (maxCompactInput): a longer middle is
// summarised in parts, oldest first, each compaction taking in the
// summary before it, so that a summary stands only for entries its
// request showed. Like the tail, the cut never parts a call from its
// result. An answer whose calls' results alone pass the bound is taken
// whole (its request cut): there is no cut inside it.
func bounded(in Input, headEnd, keep uint64) uint64 {
	n := len(compactHeader)
	cut := uint64(0)
	open := map[string]bool{}
	for _, e := range in.Entries {
		if e.ID < headEnd || e.ID >= keep && e.Kind != record.KindSummary {
			continue
		}
		if len(open) == 0 && e.Kind != record.KindToolCall && e.Kind != record.KindSummary && e.ID > headEnd {
			cut = e.ID
		}
		track(open, e)
		if !summarised(in, e) {
			continue
		}
		if n += len(render(in, e)) + 1; n > maxCompactInput && cut != 0 {
			return cut
		}
	}
	return keep
}

// summarised reports whether e, between a plan's ends, is shown to the
// summariser: the runtime's notes and what no call sees are not the
// conversation (a summary of the same turns is the same with or without
// them), nor is a summary the latest one stands for.
func summarised(in Input, e record.Entry) bool {
	return !(e.Kind == record.KindSystem || e.Kind == record.KindSummary && e.ID != in.State.Summary ||
		e.Kind == record.KindControl && (e.Name != "steer" && e.Name != "resume" || e.Text == ""))
}

// track keeps open the calls entries so far left without results.
func track(open map[string]bool, e record.Entry) {
	switch e.Kind {
	case record.KindToolCall:
		open[e.CallID] = true
	case record.KindToolResult:
		delete(open, e.CallID)
	}
}

// CompactRequest is the request that asks the agent's own model for the
// summary of plan: the entries it covers (the previous summary first)
// rendered as one text, masked results as placeholders, each entry and
// the whole bounded.
func CompactRequest(in Input, plan record.Compaction) model.Request {
	def := in.Def
	var b strings.Builder
	b.WriteString(compactHeader)
	for _, e := range in.Entries {
		if e.ID < plan.HeadEnd || (e.ID >= plan.Keep && e.Kind != record.KindSummary) || !summarised(in, e) {
			continue
		}
		if b.Len() > maxCompactInput {
			b.WriteString("[… the rest is left out: too long]\n")
			break
		}
		b.WriteString(render(in, e))
		b.WriteByte('\n')
	}
	system := "You compact the history of a long-running agent session so that it fits the agent's context. " +
		"Write a summary the agent will read instead of the turns it replaces. Keep: the task and who asked; " +
		"decisions made and why; facts learned (names, numbers, ids, URLs, versions); what was tried and failed; " +
		"commitments and open questions. Leave out pleasantries and anything the rest of the conversation repeats. " +
		"Write plain text, at most a few hundred words; never call tools."
	if def.System != "" {
		system += "\n\nThe agent's own instructions, for what matters to it:\n" + def.System
	}
	maxTokens := maxSummaryTokens
	if p := def.Context; p != nil && p.CompactAtTokens > 0 {
		maxTokens = int(min(int64(maxSummaryTokens), max(p.CompactAtTokens/8, 256)))
	}
	return model.Request{
		Model:       def.Model.Name,
		System:      system,
		Messages:    []model.Message{{Role: model.RoleUser, Text: b.String()}},
		MaxTokens:   maxTokens,
		Temperature: def.Model.Temperature,
		Compact:     true,
	}
}

// render is one entry as the summariser reads it.
func render(in Input, e record.Entry) string {
	var text string
	switch e.Kind {
	case record.KindSummary:
		return "[earlier summary]\n" + cut(e.Text, maxCompactInput/4)
	case record.KindToolCall:
		text = fmt.Sprintf("[turn %d: call %s %s]", e.Turn, e.Name, cut(string(e.Args), maxRendered))
		return text
	case record.KindToolResult:
		content := e.Result
		if p := in.Def.Context; p != nil && p.MaskAfterTurns > 0 && in.Turn-e.Turn > p.MaskAfterTurns {
			content = placeholder(e, Handle(in.Names, in.Ref, e))
		}
		mark := ""
		if e.IsError {
			mark = " (error)"
		}
		return fmt.Sprintf("[turn %d: result of %s%s]\n%s", e.Turn, e.Name, mark, cut(content, maxRendered))
	case record.KindAssistant:
		text = e.Text
	case record.KindControl:
		text = "[" + e.Name + "] " + e.Text
	default:
		text = e.Text
	}
	return fmt.Sprintf("[turn %d: %s]\n%s", Block(e), e.Kind, cut(text, maxRendered))
}

// SummaryEntry is the entry a compaction's answer becomes.
func SummaryEntry(id uint64, turn int, plan record.Compaction, resp model.Response) record.Entry {
	text := strings.TrimSpace(resp.Text)
	if text == "" {
		text = "(the model returned an empty summary)"
	}
	u := resp.Usage
	return record.Entry{
		ID: id, Kind: record.KindSummary, Turn: turn,
		Text:   cut(text, MaxSummaryBytes),
		Covers: &record.Span{From: plan.HeadEnd, To: plan.Keep - 1},
		Usage:  &u, Model: resp.Model,
	}
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	keep := n
	for keep > 0 && s[keep]&0xC0 == 0x80 {
		keep--
	}
	return s[:keep] + fmt.Sprintf(" […%d bytes more]", len(s)-keep)
}
