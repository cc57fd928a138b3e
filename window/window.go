package window

import (
	"fmt"
	"strings"

	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
)

// DefaultBytesPerToken is the estimate's rule before a provider has
// reported usage for the session: about four bytes of English or code a
// token.
const DefaultBytesPerToken = 4.0

// Input is what a context is built from.
type Input struct {
	Names streams.Names
	Ref   streams.SessionRef
	Def   *policies.Definition
	// State is the session's state; Entries its live context in context
	// order (State.Live), as the store read them.
	State   record.State
	Entries []record.Entry
	// Turn is the turn of the call the context is for: State.Turns+1 for
	// a new call, the intent's turn for one made again.
	Turn int
	// Notes are the session's notes (when the policy has them).
	Notes string
	// Tools are the specs of the tools the call offers (EffectiveTools).
	Tools []model.ToolSpec
}

// Part is one part of a context: the system prompt, the notes, the tool
// specs, or one transcript entry, with what it costs.
type Part struct {
	// Kind is "system", "notes", "tools", or the entry's kind.
	Kind   string `json:"kind"`
	Entry  uint64 `json:"entry,omitempty"`
	Turn   int    `json:"turn,omitempty"`
	Name   string `json:"name,omitempty"`
	Bytes  int    `json:"bytes"`
	Tokens int64  `json:"tokens"`
	// Masked marks a tool result the model sees as a placeholder, and
	// Handle is what read_blob reads the whole result with.
	Masked bool   `json:"masked,omitempty"`
	Handle string `json:"handle,omitempty"`
	// Covers is the span of entries a summary stands for.
	Covers *record.Span `json:"covers,omitempty"`
	// Text is what the model receives of the part.
	Text string `json:"text,omitempty"`
}

// Context is what one model call receives, part by part.
type Context struct {
	Request model.Request
	Parts   []Part
	// Bytes is the size of the request by the measure the calibration
	// uses; Tokens its estimate in tokens.
	Bytes  int64
	Tokens int64
	// BytesPerToken is the estimate's rule: calibrated on the provider's
	// last reported usage, else DefaultBytesPerToken.
	BytesPerToken float64
	Calibrated    bool
	// Masked counts masked tool results.
	Masked int
}

// Rate returns the bytes a token of st's session: calibrated on the last
// usage its provider reported, else DefaultBytesPerToken.
func Rate(st record.State) (float64, bool) {
	if st.CalBytes > 0 && st.CalTokens > 0 {
		r := float64(st.CalBytes) / float64(st.CalTokens)
		if r >= 0.5 && r <= 32 {
			return r, true
		}
	}
	return DefaultBytesPerToken, false
}

// Estimate is n bytes in tokens at rate.
func Estimate(n int64, rate float64) int64 {
	if n <= 0 {
		return 0
	}
	return int64(float64(n)/rate) + 1
}

// EffectiveTools are the tools a call of def offers: the declared ones
// (its MCP servers' mounted ones among them), read_blob when masking
// needs it, notes_read and notes_write with notes.
func EffectiveTools(def *policies.Definition) []string {
	out := def.ToolNames()
	has := func(n string) bool {
		for _, t := range out {
			if t == n {
				return true
			}
		}
		return false
	}
	if p := def.Context; p != nil {
		if p.MaskAfterTurns > 0 && !has("read_blob") {
			out = append(out, "read_blob")
		}
		if p.Notes {
			out = append(out, "notes_read", "notes_write")
		}
	}
	return out
}

// partOverhead is what a message costs beside its text: role, ids,
// framing.
const partOverhead = 16

// Build renders the live context as the model's conversation: the system
// prompt (and the notes) first, then inputs and steers as user messages,
// each answer with its tool calls, and the calls' results right after it
// (inputs recorded while calls waited for their results follow the
// results). Tool results of turns more than mask_after_turns before the
// call become placeholders naming their handle; a summary stands where
// the turns it covers were. System entries are the runtime's notes, not
// context; of the control entries only steer and resume texts are.
func Build(in Input) Context { return build(in, true) }

// BuildRequest is Build without Context.Parts: what a model call needs
// (the request, its size and estimate, the masked count), without a part
// per entry, which only an inspection of the context reads.
func BuildRequest(in Input) Context { return build(in, false) }

func build(in Input, parts bool) Context {
	var b builder
	b.start(&in, parts, false)
	for i := range in.Entries {
		b.add(&in, &in.Entries[i])
	}
	return b.finish(&in, false)
}

// builder renders entries one after the other into a request.
type builder struct {
	parts  bool
	policy policies.ContextPolicy
	req    model.Request
	c      Context
	msgs   []model.Message
	// open are the calls of the last answer still without a result.
	// Inputs recorded meanwhile (an event that reached a blocked session,
	// a resume's text) wait in held until every call is answered:
	// providers want an answer's tool calls followed by their results at
	// once.
	open map[string]bool
	held []string
	// track keeps, in unmasked, where each tool result that masking may
	// still turn into a placeholder is (see remask).
	track    bool
	unmasked []shown
	// shared is how many of msgs a request returned holds (Builder): one
	// of them changes only in a copy of msgs.
	shared int
}

// shown is a tool result the request shows whole, and its place: its
// message and its index among the message's results.
type shown struct {
	msg, result int
	e           *record.Entry
}

func (b *builder) start(in *Input, parts, track bool) {
	def := in.Def
	rate, _ := Rate(in.State)
	b.parts, b.track = parts, track
	b.req = model.Request{
		Model:       def.Model.Name,
		System:      def.System,
		MaxTokens:   def.Model.MaxTokens,
		Temperature: def.Model.Temperature,
		Tools:       in.Tools,
		Earlier:     in.State.Summarised,
	}
	if parts {
		b.c.Parts = make([]Part, 0, len(in.Entries)+3)
	}
	if def.System != "" {
		b.part(Part{Kind: "system", Bytes: len(def.System) + partOverhead, Text: def.System}, rate)
	}
	if def.Context != nil {
		b.policy = *def.Context
	}
	if b.policy.Notes {
		text := notesText(in.Notes)
		b.req.System = strings.TrimSpace(b.req.System + "\n\n" + text)
		b.part(Part{Kind: "notes", Bytes: len(text), Text: text}, rate)
	}
	if len(in.Tools) > 0 {
		n := 0
		var names []string
		for _, t := range in.Tools {
			n += len(t.Name) + len(t.Description) + len(t.Schema) + partOverhead
			names = append(names, t.Name)
		}
		b.part(Part{Kind: "tools", Bytes: n, Name: strings.Join(names, ", ")}, rate)
	}
	if len(in.Entries) > 0 {
		b.msgs = make([]model.Message, 0, len(in.Entries)/2+2)
	}
	b.open = map[string]bool{}
}

func (b *builder) part(p Part, rate float64) {
	b.c.Bytes += int64(p.Bytes)
	if b.parts {
		p.Tokens = Estimate(int64(p.Bytes), rate)
		b.c.Parts = append(b.c.Parts, p)
	}
}

func (b *builder) last() *model.Message {
	if len(b.msgs) == 0 {
		return nil
	}
	return &b.msgs[len(b.msgs)-1]
}

// mut makes message i of msgs one that no request returned holds.
func (b *builder) mut(i int) {
	if i < b.shared {
		b.msgs = append(make([]model.Message, 0, cap(b.msgs)), b.msgs...)
		b.shared = 0
	}
}

func (b *builder) user(text string) {
	if l := b.last(); l != nil && l.Role == model.RoleUser {
		b.mut(len(b.msgs) - 1)
		l = b.last()
		l.Text += "\n\n" + text
		return
	}
	b.msgs = append(b.msgs, model.Message{Role: model.RoleUser, Text: text})
}

func (b *builder) release() {
	for _, text := range b.held {
		b.user(text)
	}
	b.held = nil
}

// masks reports whether a tool result of turn is a placeholder in the
// context of a call of turn now.
func (b *builder) masks(now, turn int) bool {
	return b.policy.MaskAfterTurns > 0 && now-turn > b.policy.MaskAfterTurns
}

// add renders entry e (of in.Entries) after those before it.
func (b *builder) add(in *Input, e *record.Entry) {
	if e.Kind == record.KindSummary && e.ID != in.State.Summary {
		// A summary the latest one stands for.
		return
	}
	rate := 0.0
	if b.parts {
		rate, _ = Rate(in.State)
	}
	p := Part{Kind: string(e.Kind), Entry: e.ID, Turn: e.Turn, Name: e.Name}
	switch e.Kind {
	case record.KindEvent, record.KindUser, record.KindControl, record.KindSummary:
		if e.Kind == record.KindControl && !(e.Name == "steer" || e.Name == "resume") || e.Kind == record.KindControl && e.Text == "" {
			// interrupt, cancel, approve and deny are the runtime's
			// business; the model sees their effects.
			return
		}
		text := e.Text
		switch e.Kind {
		case record.KindControl:
			text = "[" + e.Name + "] " + text
		case record.KindSummary:
			text = summaryText(*e)
			p.Covers = e.Covers
		}
		p.Bytes, p.Text = len(text)+partOverhead, text
		b.part(p, rate)
		if len(b.open) > 0 {
			b.held = append(b.held, text)
			return
		}
		b.user(text)
	case record.KindAssistant:
		clear(b.open)
		b.release()
		p.Bytes, p.Text = len(e.Text)+partOverhead, e.Text
		b.part(p, rate)
		b.msgs = append(b.msgs, model.Message{Role: model.RoleAssistant, Text: e.Text})
	case record.KindToolCall:
		if l := b.last(); l != nil && l.Role == model.RoleAssistant {
			b.mut(len(b.msgs) - 1)
			l = b.last()
			l.ToolCalls = append(l.ToolCalls, model.ToolCall{ID: e.CallID, Name: e.Name, Args: e.Args})
			b.open[e.CallID] = true
			p.Bytes = len(e.Name) + len(e.Args) + len(e.CallID) + partOverhead
			if b.parts {
				p.Text = string(e.Args)
			}
			b.part(p, rate)
		}
	case record.KindToolResult:
		content := e.Result
		masked := b.masks(in.Turn, e.Turn)
		if masked {
			p.Masked, p.Handle = true, Handle(in.Names, in.Ref, *e)
			content = placeholder(*e, p.Handle)
			b.c.Masked++
		}
		p.Bytes, p.Text = len(content)+len(e.CallID)+partOverhead, content
		b.part(p, rate)
		r := model.ToolResult{CallID: e.CallID, Content: content, IsError: e.IsError}
		if l := b.last(); l != nil && l.Role == model.RoleTool {
			b.mut(len(b.msgs) - 1)
			l = b.last()
			l.ToolResults = append(l.ToolResults, r)
		} else {
			b.msgs = append(b.msgs, model.Message{Role: model.RoleTool, ToolResults: []model.ToolResult{r}})
		}
		if b.track && !masked && b.policy.MaskAfterTurns > 0 {
			m := len(b.msgs) - 1
			b.unmasked = append(b.unmasked, shown{msg: m, result: len(b.msgs[m].ToolResults) - 1, e: e})
		}
		delete(b.open, e.CallID)
		if len(b.open) == 0 {
			b.release()
		}
	}
}

// remask turns the results older than mask_after_turns at in.Turn into
// their placeholders, where Build would have written them. A message's
// results are copied before one changes: requests returned before share
// them.
func (b *builder) remask(in *Input) {
	keep := b.unmasked[:0]
	for _, u := range b.unmasked {
		if !b.masks(in.Turn, u.e.Turn) {
			keep = append(keep, u)
			continue
		}
		content := placeholder(*u.e, Handle(in.Names, in.Ref, *u.e))
		b.mut(u.msg)
		m := &b.msgs[u.msg]
		m.ToolResults = append([]model.ToolResult(nil), m.ToolResults...)
		b.c.Bytes += int64(len(content) - len(u.e.Result))
		m.ToolResults[u.result].Content = content
		b.c.Masked++
	}
	clear(b.unmasked[len(keep):])
	b.unmasked = keep
}

// finish returns the context built. With keep, the builder goes on after
// it (Builder): the request holds msgs, which change from then on only in
// a copy (shared), and the inputs that wait for calls' results are
// released into a copy of its own.
func (b *builder) finish(in *Input, keep bool) Context {
	c := b.c
	c.BytesPerToken, c.Calibrated = Rate(in.State)
	req := b.req
	switch {
	case keep && len(b.held) > 0:
		msgs, held, shared := b.msgs, b.held, b.shared
		b.msgs = append(make([]model.Message, 0, len(msgs)+len(held)), msgs...)
		b.shared = 0
		b.release()
		req.Messages = b.msgs
		b.msgs, b.held, b.shared = msgs, held, shared
	case keep:
		req.Messages = b.msgs[:len(b.msgs):len(b.msgs)]
		b.shared = len(b.msgs)
	default:
		b.release()
		req.Messages = b.msgs
	}
	c.Request = req
	c.Tokens = Estimate(c.Bytes, c.BytesPerToken)
	return c
}

// Handle is what read_blob reads a tool result back with: its jl_blobs
// handle when it was offloaded, else its transcript key.
func Handle(names streams.Names, ref streams.SessionRef, e record.Entry) string {
	if e.Blob != "" {
		return e.Blob
	}
	return names.LogKey(ref, e.ID)
}

func placeholder(e record.Entry, handle string) string {
	what := "result"
	if e.IsError {
		what = "error result"
	}
	size := len(e.Result)
	return fmt.Sprintf("[masked: the %s of %s (call %s, turn %d, %d bytes) is no longer shown; read_blob {\"handle\": %q} returns it]", what, e.Name, e.CallID, e.Turn, size, handle)
}

// summaryText is a summary as the model reads it. It names no entry ids
// (Part.Covers does): the context of a session whose compaction was made
// again after a crash reads as the one without the crash.
func summaryText(e record.Entry) string {
	return "[summary of the earlier conversation, written when it was compacted; what it stands for is no longer shown]\n" + e.Text
}

func notesText(notes string) string {
	if strings.TrimSpace(notes) == "" {
		notes = "(none yet)"
	}
	return "[your notes for this session: they stay whatever happens to the conversation; notes_write changes them]\n" + notes
}
