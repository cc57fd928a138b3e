package model

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jetloop/jetloop/policies"
)

// ProviderScripted is the provider name of the scripted model.
const ProviderScripted = "scripted"

// Script error values an entry may name in its error field.
const (
	ScriptErrRateLimited = "rate_limited"
	ScriptErrServer      = "server_error"
	ScriptErrTimeout     = "timeout"
)

// Scripted is a deterministic model: one script entry answers one model
// call, in order, per session. It keeps no state: the position in the
// script is the number of assistant messages already in the request's
// transcript (plus Request.Earlier, the answers a compaction summarised;
// with script_scope run, Request.RunTurn), so a session continues where it
// was after a crash, and a call made again (recovery of an unsettled model
// step) gets the same answer. A compaction request (Request.Compact) is
// answered with a deterministic digest of what it carries and consumes no
// script entry.
// It is safe for concurrent use.
//
// An entry with an error fails the call with the matching *Error. A failed
// call adds nothing to the transcript, so every call made at that position
// fails the same way: the entry simulates a model that keeps failing, and
// NewScripted rejects entries after it as unreachable.
//
// The usage an entry declares is priced as spec.Name's list price when the
// name is in the price table, so a rehearsal with a real model's name
// exercises cost budgets.
//
// When the script runs out, calls are answered by spec.Then if set, else
// by the last entry's text and usage without tool calls, so an agent that
// loops past its script comes to an end.
type Scripted struct {
	name    string
	price   Price
	priced  bool
	metrics *Metrics
	entries []scriptAnswer
	then    scriptAnswer
	// perRun restarts the script at every run (script_scope: run).
	perRun bool
}

// scriptAnswer is one validated entry, ready to answer.
type scriptAnswer struct {
	text      string
	toolCalls []scriptCall
	usage     Usage
	delay     time.Duration
	err       error // one of the sentinel kinds, or nil
}

type scriptCall struct {
	name string
	args json.RawMessage
}

var _ Model = (*Scripted)(nil)

// NewScripted validates spec's script and returns the model. Errors name
// the entry index and the field at fault.
func NewScripted(spec policies.Model) (*Scripted, error) {
	if len(spec.Script) == 0 && spec.Then == nil {
		return nil, errors.New("scripted model: script is empty and then is unset: give at least one entry")
	}
	s := &Scripted{name: spec.Name}
	switch spec.ScriptScope {
	case "", "session":
	case "run":
		s.perRun = true
	default:
		return nil, fmt.Errorf("scripted model: script_scope %q: want session or run", spec.ScriptScope)
	}
	if s.name == "" {
		s.name = ProviderScripted
	}
	s.price, s.priced = LookupPrice(spec.Name)
	for i, e := range spec.Script {
		if i > 0 && s.entries[i-1].err != nil {
			return nil, fmt.Errorf("scripted model: script[%d]: unreachable: script[%d] has error %q, which fails every call at its position (a failed call adds nothing to the transcript)", i, i-1, spec.Script[i-1].Error)
		}
		a, err := compileEntry(e)
		if err != nil {
			return nil, fmt.Errorf("scripted model: script[%d].%w", i, err)
		}
		s.entries = append(s.entries, a)
	}
	switch {
	case spec.Then != nil:
		if n := len(s.entries); n > 0 && s.entries[n-1].err != nil {
			return nil, fmt.Errorf("scripted model: then: unreachable: script[%d] has error %q, which fails every call at its position", n-1, spec.Script[n-1].Error)
		}
		a, err := compileEntry(*spec.Then)
		if err != nil {
			return nil, fmt.Errorf("scripted model: then.%w", err)
		}
		s.then = a
	default:
		last := s.entries[len(s.entries)-1]
		s.then = scriptAnswer{text: last.text, usage: last.usage, delay: last.delay, err: last.err}
	}
	return s, nil
}

// compileEntry checks one entry; its errors start with the field name so
// the caller can prefix the entry's place.
func compileEntry(e policies.ScriptEntry) (scriptAnswer, error) {
	a := scriptAnswer{
		text:  e.Text,
		usage: Usage{InputTokens: e.Usage.InputTokens, OutputTokens: e.Usage.OutputTokens},
		delay: e.Delay.D(),
	}
	if e.Usage.InputTokens < 0 {
		return a, fmt.Errorf("usage.input_tokens: %d is negative", e.Usage.InputTokens)
	}
	if e.Usage.OutputTokens < 0 {
		return a, fmt.Errorf("usage.output_tokens: %d is negative", e.Usage.OutputTokens)
	}
	if a.delay < 0 {
		return a, fmt.Errorf("delay: %s is negative", a.delay)
	}
	switch e.Error {
	case "":
	case ScriptErrRateLimited:
		a.err = ErrRateLimited
	case ScriptErrServer:
		a.err = ErrServer
	case ScriptErrTimeout:
		a.err = ErrTimeout
	default:
		return a, fmt.Errorf("error: %q is not one of %s, %s, %s", e.Error, ScriptErrRateLimited, ScriptErrServer, ScriptErrTimeout)
	}
	if a.err != nil && (e.Text != "" || len(e.ToolCalls) > 0) {
		return a, fmt.Errorf("error: %q fails the call, so text and tool_calls would never be seen: give either an error or an answer", e.Error)
	}
	for j, c := range e.ToolCalls {
		if c.Name == "" {
			return a, fmt.Errorf("tool_calls[%d].name: empty", j)
		}
		args := json.RawMessage("{}")
		if c.Args != nil {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false) // keep "a >> b" as written
			if err := enc.Encode(c.Args); err != nil {
				return a, fmt.Errorf("tool_calls[%d].args: %w", j, err)
			}
			args = bytes.TrimRight(buf.Bytes(), "\n")
		}
		a.toolCalls = append(a.toolCalls, scriptCall{name: c.Name, args: args})
	}
	return a, nil
}

// Len is the number of script entries, not counting then.
func (s *Scripted) Len() int { return len(s.entries) }

// Complete answers the call at the position the transcript has reached. It
// waits the entry's delay, returning ctx's error at once if ctx ends first.
func (s *Scripted) Complete(ctx context.Context, req Request) (resp Response, err error) {
	start := time.Now()
	defer func() { s.metrics.observeCall(ctx, ProviderScripted, s.name, start, resp, err) }()
	if err := ctx.Err(); err != nil {
		return Response{}, err
	}
	if req.Compact {
		return s.summary(req), nil
	}
	pos := Position(req.Messages) + max(req.Earlier, 0)
	// Call ids are numbered by the session's answers, not by the script's
	// position: a script that starts over at every run would give every
	// run's calls the ids of the first run's, which a compacted context
	// no longer shows.
	answers := pos
	if s.perRun {
		pos = RunPosition(req.Messages)
		if req.RunTurn > 0 {
			pos = req.RunTurn - 1
		}
	}
	a := s.then
	if pos < len(s.entries) {
		a = s.entries[pos]
	}
	if a.delay > 0 {
		t := time.NewTimer(a.delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return Response{}, ctx.Err()
		case <-t.C:
		}
	}
	if a.err != nil {
		return Response{}, &Error{
			Provider: ProviderScripted,
			Message:  fmt.Sprintf("script position %d", pos),
			Kind:     a.err,
		}
	}
	resp = Response{
		Text:       a.text,
		Usage:      a.usage,
		StopReason: "end_turn",
		Model:      s.name,
	}
	if s.priced {
		resp.Usage.CostUSD = s.price.Cost(resp.Usage)
	}
	if len(a.toolCalls) > 0 {
		resp.StopReason = "tool_use"
		resp.ToolCalls = make([]ToolCall, len(a.toolCalls))
		for i, c := range a.toolCalls {
			resp.ToolCalls[i] = ToolCall{
				ID:   fmt.Sprintf("call_%d_%d", answers, i),
				Name: c.name,
				Args: append(json.RawMessage(nil), c.args...),
			}
		}
	}
	return resp, nil
}

// summary answers a compaction request without consuming the script: a
// deterministic digest of what it was asked to summarise (how many
// messages, their size, the first line of each), so a compaction made
// again after a crash writes the same summary.
func (s *Scripted) summary(req Request) Response {
	var b strings.Builder
	var n, size int
	for _, m := range req.Messages {
		n++
		size += len(m.Text)
	}
	fmt.Fprintf(&b, "Summary (scripted) of %d messages, %d bytes:", n, size)
	for _, m := range req.Messages {
		for _, line := range strings.Split(m.Text, "\n") {
			if line = strings.TrimSpace(line); strings.HasPrefix(line, "[") && len(line) > 1 {
				if len(line) > 120 {
					line = line[:120]
				}
				b.WriteString("\n- " + line)
				if b.Len() > 4<<10 {
					break
				}
			}
		}
	}
	text := b.String()
	u := Usage{InputTokens: int64(size / 4), OutputTokens: int64(len(text) / 4)}
	if s.priced {
		u.CostUSD = s.price.Cost(u)
	}
	return Response{Text: text, Usage: u, StopReason: "end_turn", Model: s.name}
}

// RunPosition is the number of assistant messages since the last user
// message: the index of the script entry that answers the next call of a
// script that starts over at every run.
func RunPosition(msgs []Message) int {
	n := 0
	for _, m := range msgs {
		switch m.Role {
		case RoleUser:
			n = 0
		case RoleAssistant:
			n++
		}
	}
	return n
}

// Position is the number of assistant messages in a transcript: the index
// of the script entry that answers the next call.
func Position(msgs []Message) int {
	n := 0
	for _, m := range msgs {
		if m.Role == RoleAssistant {
			n++
		}
	}
	return n
}
