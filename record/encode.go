package record

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
)

// The stored forms of a state and of an entry, written without
// reflection: a step writes both, and on a worker that shares its cores
// with the server, encoding/json's reflection over the state was the
// largest part of a step's own CPU. The output is byte for byte what
// encoding/json writes for the same value (json.Marshal for a state,
// Entry's MarshalJSON as it was, without HTML escaping, for an entry);
// FuzzStateEncoding and FuzzEntryEncoding hold it to that, over values
// of every field (a field added to State or Entry and not here fails
// them). Parts that are rare on a step's path (a delegation, a queue
// place, a tick, a thread, children) are handed to encoding/json, whose
// output for a part is what it writes for it inside the whole; so is a
// value encoding/json refuses (a time past year 9999, a NaN), so that the
// error is its own.

// encodeStateJSON returns what json.Marshal(st) returns.
func encodeStateJSON(st *State) ([]byte, error) {
	b, ok := appendState(make([]byte, 0, 1024), st)
	if !ok {
		// A copy: st itself does not escape, so a caller's state stays
		// on its stack when the fast path writes it.
		c := *st
		return json.Marshal(&c)
	}
	return b, nil
}

// encodeEntryJSON returns the stored form of e (Entry.MarshalJSON).
func encodeEntryJSON(e *Entry) ([]byte, error) {
	b, ok := appendEntry(make([]byte, 0, 256+len(e.Text)+len(e.Result)+len(e.Args)), e)
	if !ok {
		return marshalEntryReflect(*e)
	}
	return b, nil
}

// jw appends JSON; ok turns false at the first value it cannot write as
// encoding/json would without an error, and the caller falls back.
type jw struct {
	b    []byte
	html bool
	ok   bool
}

// key appends ,"name": (name is a plain ASCII key).
func (w *jw) key(name string) {
	w.b = append(w.b, ',', '"')
	w.b = append(w.b, name...)
	w.b = append(w.b, '"', ':')
}

// open starts an object; close ends the one started at start, dropping
// the comma the first key put after its brace.
func (w *jw) open() int {
	w.b = append(w.b, '{')
	return len(w.b)
}

func (w *jw) close(start int) {
	if len(w.b) > start && w.b[start] == ',' {
		copy(w.b[start:], w.b[start+1:])
		w.b = w.b[:len(w.b)-1]
	}
	w.b = append(w.b, '}')
}

func (w *jw) str(name, v string) {
	w.key(name)
	w.b = appendJSONString(w.b, v, w.html)
}

func (w *jw) strOmit(name, v string) {
	if v != "" {
		w.str(name, v)
	}
}

func (w *jw) int(name string, v int64) {
	w.key(name)
	w.b = strconv.AppendInt(w.b, v, 10)
}

func (w *jw) intOmit(name string, v int64) {
	if v != 0 {
		w.int(name, v)
	}
}

func (w *jw) uint(name string, v uint64) {
	w.key(name)
	w.b = strconv.AppendUint(w.b, v, 10)
}

func (w *jw) uintOmit(name string, v uint64) {
	if v != 0 {
		w.uint(name, v)
	}
}

func (w *jw) boolOmit(name string, v bool) {
	if v {
		w.key(name)
		w.b = append(w.b, "true"...)
	}
}

func (w *jw) float(name string, f float64) {
	w.key(name)
	if math.IsInf(f, 0) || math.IsNaN(f) {
		w.ok = false
		return
	}
	abs := math.Abs(f)
	fmt := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		fmt = 'e'
	}
	w.b = strconv.AppendFloat(w.b, f, fmt, -1, 64)
	if fmt == 'e' {
		// e-09 to e-9, as encoding/json does.
		n := len(w.b)
		if n >= 4 && w.b[n-4] == 'e' && w.b[n-3] == '-' && w.b[n-2] == '0' {
			w.b[n-2] = w.b[n-1]
			w.b = w.b[:n-1]
		}
	}
}

func (w *jw) floatOmit(name string, f float64) {
	if f != 0 {
		w.float(name, f)
	}
}

// time appends t as time.Time's MarshalJSON does, refusing what it
// refuses (a year outside 0 to 9999, a zone offset of 24 hours or more).
func (w *jw) time(name string, t time.Time) {
	w.key(name)
	w.b = append(w.b, '"')
	n0 := len(w.b)
	w.b = t.AppendFormat(w.b, time.RFC3339Nano)
	b := w.b
	switch {
	case b[n0+len("9999")] != '-':
		w.ok = false
	case b[len(b)-1] != 'Z':
		c := b[len(b)-len("Z07:00")]
		if '0' <= c && c <= '9' || 10*(b[len(b)-5]-'0')+(b[len(b)-4]-'0') >= 24 {
			w.ok = false
		}
	}
	w.b = append(w.b, '"')
}

// timeZero is a time.Time field with omitzero.
func (w *jw) timeZero(name string, t time.Time) {
	if !t.IsZero() {
		w.time(name, t)
	}
}

// raw appends a json.RawMessage as encoding/json does: compacted,
// refused when it is not JSON. A nil one is null.
func (w *jw) raw(name string, m json.RawMessage) {
	w.key(name)
	if m == nil {
		w.b = append(w.b, "null"...)
		return
	}
	if compactable(m, w.html) {
		w.b = append(w.b, m...)
		return
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, m); err != nil {
		w.ok = false
		return
	}
	if w.html {
		var esc bytes.Buffer
		json.HTMLEscape(&esc, buf.Bytes())
		buf = esc
	}
	w.b = append(w.b, buf.Bytes()...)
}

// compactable reports whether m is valid JSON that compacting (and
// escaping, with html) leaves as it is: no space, no < > &, no U+2028 or
// U+2029.
func compactable(m []byte, html bool) bool {
	for i, c := range m {
		switch c {
		case ' ', '\t', '\n', '\r':
			return false
		case '<', '>', '&':
			if html {
				return false
			}
		case 0xE2:
			if html && i+2 < len(m) && m[i+1] == 0x80 && m[i+2]&^1 == 0xA8 {
				return false
			}
		}
	}
	return json.Valid(m)
}

// marshal hands a part to encoding/json.
func (w *jw) marshal(name string, v any) {
	w.key(name)
	var b []byte
	var err error
	if w.html {
		b, err = json.Marshal(v)
	} else {
		b, err = marshal(v)
	}
	if err != nil {
		w.ok = false
		return
	}
	w.b = append(w.b, b...)
}

func (w *jw) usage(name string, u model.Usage) {
	w.key(name)
	s := w.open()
	w.int("input_tokens", u.InputTokens)
	w.int("output_tokens", u.OutputTokens)
	w.float("cost_usd", u.CostUSD)
	w.close(s)
}

func (w *jw) budgetZero(name string, b policies.Budget) {
	// omitzero: the struct's == (so -0 is zero, as reflect's IsZero says).
	if b == (policies.Budget{}) {
		return
	}
	w.key(name)
	s := w.open()
	w.intOmit("max_turns", int64(b.MaxTurns))
	w.intOmit("max_tokens", b.MaxTokens)
	if b.Deadline != 0 {
		w.str("deadline", time.Duration(b.Deadline).String())
	}
	w.floatOmit("max_cost_usd", b.MaxCostUSD)
	w.intOmit("max_hops", int64(b.MaxHops))
	w.close(s)
}

func (w *jw) limitsZero(name string, l policies.Limits) {
	if l == (policies.Limits{}) {
		return
	}
	w.key(name)
	s := w.open()
	w.floatOmit("session_usd", l.SessionUSD)
	w.floatOmit("agent_usd_per_day", l.AgentUSDPerDay)
	w.floatOmit("key_usd_per_day", l.KeyUSDPerDay)
	w.strOmit("key", l.Key)
	w.close(s)
}

func (w *jw) treeZero(name string, t Tree) {
	if t == (Tree{}) {
		return
	}
	w.key(name)
	s := w.open()
	w.int("sessions", int64(t.Sessions))
	w.int("turns", int64(t.Turns))
	w.usage("usage", t.Usage)
	w.close(s)
}

func (w *jw) intent(name string, p *Intent) {
	w.key(name)
	s := w.open()
	w.str("kind", string(p.Kind))
	w.uint("step", p.Step)
	w.int("turn", int64(p.Turn))
	w.uint("entry", p.Entry)
	w.strOmit("call_id", p.CallID)
	w.strOmit("tool", p.Tool)
	if len(p.Args) > 0 {
		w.raw("args", p.Args)
	}
	w.strOmit("replay", string(p.Replay))
	w.boolOmit("replay_safe", p.ReplaySafe)
	w.intOmit("attempt", int64(p.Attempt))
	w.str("owner", p.Owner)
	w.time("started", p.Started)
	if c := p.Compaction; c != nil {
		w.key("compaction")
		cs := w.open()
		w.uint("head_end", c.HeadEnd)
		w.uint("keep", c.Keep)
		w.int("answers", int64(c.Answers))
		w.close(cs)
	}
	w.close(s)
}

// appendState appends what json.Marshal(st) writes; false if it cannot
// (encoding/json would refuse a value, or may for a part it was handed).
func appendState(b []byte, st *State) ([]byte, bool) {
	w := jw{b: b, html: true, ok: true}
	s := w.open()
	// Origin.
	w.str("agent", st.Agent)
	w.str("session", st.Session)
	w.strOmit("parent", st.Parent)
	w.intOmit("fork_turn", int64(st.ForkTurn))
	w.uintOmit("fork_seq", st.ForkSeq)
	w.time("created", st.Created)
	w.boolOmit("ephemeral", st.Ephemeral)
	if st.Delegation != nil {
		w.marshal("delegation", st.Delegation)
	}
	// Standing.
	w.str("status", string(st.Status))
	w.time("since", st.Since)
	w.strOmit("reason", st.Reason)
	w.strOmit("waiting_for", st.WaitingFor)
	w.strOmit("blocked_call", st.BlockedCall)
	w.strOmit("approval", st.Approval)
	w.strOmit("approved", st.Approved)
	w.timeZero("wait_until", st.WaitUntil)
	w.strOmit("on_timeout", st.OnTimeout)
	w.timeZero("escalated", st.Escalated)
	if st.Queued != nil {
		w.marshal("queued", st.Queued)
	}
	// Program.
	w.uint("definition_version", st.DefinitionVersion)
	w.uint("definition_revision", st.DefinitionRevision)
	w.strOmit("rollout", st.Rollout)
	w.budgetZero("limits", st.Limits)
	w.limitsZero("ceilings", st.Ceilings)
	w.strOmit("spend_key", st.SpendKey)
	// Account.
	w.intOmit("runs", int64(st.Runs))
	w.int("turns", int64(st.Turns))
	w.uint("steps", st.Steps)
	w.usage("usage", st.Usage)
	w.int("run_turns", int64(st.RunTurns))
	w.usage("run_usage", st.RunUsage)
	w.intOmit("run_tool_errors", int64(st.RunToolErrors))
	w.treeZero("delegated", st.Delegated)
	w.treeZero("run_delegated", st.RunDelegated)
	w.intOmit("unknown_usage_calls", int64(st.UnknownUsage))
	w.timeZero("run_started", st.RunStarted)
	w.timeZero("run_ended", st.RunEnded)
	// Cursor.
	w.uint("next_entry", st.NextEntry)
	w.uint("in_seq", st.InSeq)
	w.uint("ctl_seq", st.CtlSeq)
	w.strOmit("last_tick_id", st.LastTickID)
	// Work.
	if len(st.Calls) > 0 {
		w.key("calls")
		w.b = append(w.b, '[')
		for i, c := range st.Calls {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			cs := w.open()
			w.str("id", c.ID)
			w.str("name", c.Name)
			w.uint("entry", c.Entry)
			w.close(cs)
		}
		w.b = append(w.b, ']')
	}
	if st.Pending != nil {
		w.intent("pending", st.Pending)
	}
	if len(st.Steers) > 0 {
		w.key("steers")
		w.b = append(w.b, '[')
		for i, t := range st.Steers {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			ts := w.open()
			w.str("text", t.Text)
			w.uint("seq", t.Seq)
			w.time("time", t.Time)
			w.close(ts)
		}
		w.b = append(w.b, ']')
	}
	if st.Tick != nil {
		w.marshal("tick", st.Tick)
	}
	if st.Thread != nil {
		w.marshal("thread", st.Thread)
	}
	if sl := st.Slot; sl != nil {
		w.key("slot")
		ss := w.open()
		w.strOmit("key", sl.Key)
		w.int("limit", int64(sl.Limit))
		w.close(ss)
	}
	if len(st.Children) > 0 {
		w.marshal("children", st.Children)
	}
	w.strOmit("run_task", st.RunTask)
	w.strOmit("ledger", st.Ledger)
	w.strOmit("trace", st.Trace)
	// Window.
	w.uintOmit("head_end", st.HeadEnd)
	w.uintOmit("summary", st.Summary)
	w.uintOmit("context_from", st.From)
	w.intOmit("summarised_answers", int64(st.Summarised))
	w.intOmit("cal_bytes", st.CalBytes)
	w.intOmit("cal_tokens", st.CalTokens)
	// Fence.
	w.strOmit("owner", st.Owner)
	w.uint("epoch", st.Epoch)
	w.time("updated", st.Updated)
	w.close(s)
	return w.b, w.ok
}

// appendEntry appends e's stored form (see Entry.MarshalJSON); false if
// it cannot.
func appendEntry(b []byte, e *Entry) ([]byte, bool) {
	w := jw{b: b, ok: true}
	s := w.open()
	w.uint("id", e.ID)
	w.str("kind", string(e.Kind))
	w.int("turn", int64(e.Turn))
	w.time("time", e.Time)
	// A kind that always has a field writes it last (Entry.MarshalJSON).
	if e.Kind != KindAssistant {
		w.strOmit("text", e.Text)
	}
	w.strOmit("name", e.Name)
	if len(e.Args) > 0 {
		w.raw("args", e.Args)
	}
	w.strOmit("call_id", e.CallID)
	if e.Kind != KindToolResult {
		w.strOmit("result", e.Result)
		w.boolOmit("is_error", e.IsError)
	}
	w.strOmit("blob", e.Blob)
	if e.Usage != nil {
		w.usage("usage", *e.Usage)
	}
	w.strOmit("model", e.Model)
	if ev := e.Event; ev != nil {
		w.key("event")
		es := w.open()
		w.str("id", ev.ID)
		w.str("source", ev.Source)
		w.str("type", ev.Type)
		w.uint("seq", ev.Seq)
		w.intOmit("count", int64(ev.Count))
		w.close(es)
	}
	w.uintOmit("step", e.Step)
	w.intOmit("attempt", int64(e.Attempt))
	w.intOmit("entries", int64(e.Entries))
	if c := e.Covers; c != nil {
		w.key("covers")
		cs := w.open()
		w.uint("from", c.From)
		w.uint("to", c.To)
		w.close(cs)
	}
	w.strOmit("context", e.Context)
	switch e.Kind {
	case KindToolResult:
		w.str("result", e.Result)
		w.key("is_error")
		w.b = strconv.AppendBool(w.b, e.IsError)
	case KindAssistant:
		w.str("text", e.Text)
	}
	w.close(s)
	return w.b, w.ok
}

const hexDigits = "0123456789abcdef"

// htmlSafe and safe are encoding/json's sets of ASCII bytes a string
// holds as they are, with and without HTML escaping.
var htmlSafe, safe = func() (h, s [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		s[c] = c != '"' && c != '\\'
		h[c] = s[c] && c != '<' && c != '>' && c != '&'
	}
	return h, s
}()

// appendJSONString appends src as encoding/json writes a string.
func appendJSONString(dst []byte, src string, html bool) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(src); {
		if c := src[i]; c < utf8.RuneSelf {
			if htmlSafe[c] || !html && safe[c] {
				i++
				continue
			}
			dst = append(dst, src[start:i]...)
			switch c {
			case '\\', '"':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(src[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, src[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, src[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, src[start:]...)
	return append(dst, '"')
}
