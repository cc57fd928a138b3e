package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/tools"
)

// What a post to the run's chat thread is, the prefix of its call id: the
// run's answer (its settlement ends the run), a question of ask_human, or
// a call waiting for approval (with Approve and Deny buttons).
const (
	postAnswer   = "answer_"
	postQuestion = "question_"
	postApproval = "approval_"
)

// replyIntent is the intent of posting text (and blocks) of kind into
// the Slack thread of the run's event, nil when there is no such thread,
// no poster or no text.
func (s *session) replyIntent(next record.State, kind, text string, blocks json.RawMessage) *record.Intent {
	if s.w.cfg.Reply == nil || next.Thread == nil || next.Thread.SlackChannel == "" || text == "" {
		return nil
	}
	args, _ := json.Marshal(tools.SlackArgs{Text: text, Blocks: blocks})
	return &record.Intent{Kind: record.StepReply, Step: next.Steps + 1, Turn: next.Turns, Entry: next.NextEntry,
		CallID: kind + strconv.FormatUint(next.NextEntry, 10), Tool: s.w.cfg.Reply.Spec().Name, Args: args,
		Replay: record.ReplayProbe, Owner: s.w.cfg.ID, Started: time.Now().UTC()}
}

// withPost makes the state write next carry the intent of a post of kind
// to the run's chat thread; the post is made next (s.merged).
func (s *session) withPost(next *record.State, kind, text string, blocks json.RawMessage) *record.Intent {
	in := s.replyIntent(*next, kind, text, blocks)
	if in != nil {
		next.Pending = in
	}
	return in
}

// approvalBlocks are the Block Kit blocks of a call waiting for approval:
// what it is, and Approve and Deny buttons whose value names the call.
func approvalBlocks(agent, session string, call record.CallRef, args json.RawMessage, gate string) (string, json.RawMessage) {
	a := string(args)
	if len(a) > 2500 {
		a = a[:2500] + "…"
	}
	text := fmt.Sprintf("Approval needed: *%s* call `%s` (gate %s)", call.Name, call.ID, gate)
	value, _ := json.Marshal(map[string]string{"agent": agent, "session": session, "call": call.ID})
	blocks, _ := json.Marshal([]any{
		map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": text + "\n```" + a + "```"}},
		map[string]any{"type": "actions", "block_id": "jetloop_approval", "elements": []any{
			map[string]any{"type": "button", "action_id": "jetloop_approve", "style": "primary", "value": string(value),
				"text": map[string]any{"type": "plain_text", "text": "Approve"}},
			map[string]any{"type": "button", "action_id": "jetloop_deny", "style": "danger", "value": string(value),
				"text": map[string]any{"type": "plain_text", "text": "Deny"}},
		}},
	})
	return text, blocks
}

// withReply makes the settlement next of a run's last model step carry
// the intent of posting its answer, when the run came from a chat thread:
// the run stays working until the post is settled.
func (s *session) withReply(next *record.State, answer string) *record.Intent {
	if next.Status != record.StatusDone || len(next.Calls) > 0 {
		return nil
	}
	in := s.replyIntent(*next, postAnswer, answer, nil)
	if in == nil {
		return nil
	}
	next.Status, next.Since = s.st.Status, s.st.Since
	next.Pending = in
	return in
}

// replyStep posts the answer of in and settles the run as done with a
// system entry saying where it went (or why it did not). Recovering an
// interrupted post, it asks the poster's probe first: found, the post is
// settled as it is; not found, it is made once.
func (s *session) replyStep(ctx context.Context, in record.Intent, recovering bool) (err error) {
	ctx, span := s.toolSpan(ctx, record.CallRef{ID: in.CallID, Name: in.Tool}, in, recovering)
	span.SetAttributes(attribute.String("jetloop.post", what(in)))
	defer func() { endStep(span, err) }()
	p := s.w.cfg.Reply
	if p == nil {
		return s.settleReply(ctx, in, what(in)+" not posted: this worker has no chat poster")
	}
	dir, err := s.workDir()
	if err != nil {
		return err
	}
	if recovering {
		if in.Attempt >= s.w.cfg.MaxRecoveries {
			return s.settleReply(ctx, in, fmt.Sprintf(what(in)+" not posted: interrupted %d times%s", in.Attempt+1, mayHaveRun))
		}
		pctx, cancel := s.stepContext(ctx)
		res, found, perr := p.Probe(pctx, s.toolCall(in, dir))
		cancel()
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		next := s.st.Clone()
		next.Pending.Attempt++
		next.Pending.Owner = s.w.cfg.ID
		switch {
		case errors.Is(perr, tools.ErrProbeLater):
			// A rate limit holds the lookup back: it costs no attempt.
			s.w.m.recoveries.WithLabelValues(string(record.StepReply), "probe_later").Inc()
			s.log.Warn("probe of an interrupted post waits for a rate limit; trying again later", "call", in.CallID, "err", perr)
			return fmt.Errorf("worker: probe %s post %s: %w", what(in), in.CallID, perr)
		case perr != nil:
			s.w.m.recoveries.WithLabelValues(string(record.StepReply), "probe_failed").Inc()
			s.log.Warn("probe of an interrupted answer post failed; trying again later", "call", in.CallID, "err", perr)
			if err := s.writeIntent(ctx, next); err != nil {
				return err
			}
			return fmt.Errorf("worker: probe answer post %s: %w", in.CallID, perr)
		case found:
			s.w.m.recoveries.WithLabelValues(string(record.StepReply), "probe_found").Inc()
			return s.settleReply(ctx, in, what(in)+" "+res.Content)
		}
		s.w.m.recoveries.WithLabelValues(string(record.StepReply), "probe_not_found").Inc()
		if err := s.writeIntent(ctx, next); err != nil {
			return err
		}
		in = *next.Pending
	}
	s.trace(ctx, TracePoint{Phase: PhaseEffect, Kind: record.StepReply, Step: in.Step, Tool: in.Tool, CallID: in.CallID, Recovery: recovering})
	sctx, cancel := s.stepContext(ctx)
	tctx, tcancel := context.WithTimeout(sctx, time.Minute)
	res, cerr := p.Call(tctx, s.toolCall(in, dir))
	tcancel()
	cancel()
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	s.trace(ctx, TracePoint{Phase: PhaseSettle, Kind: record.StepReply, Step: in.Step, Tool: in.Tool, CallID: in.CallID, Recovery: recovering})
	switch {
	case cerr != nil:
		return s.settleReply(ctx, in, fmt.Sprintf(what(in)+" not posted: %v", cerr))
	case res.IsError:
		return s.settleReply(ctx, in, what(in)+" not posted: "+res.Content)
	}
	return s.settleReply(ctx, in, what(in)+" "+res.Content)
}

// settleReply settles a post with a system entry saying what became of
// it (see settleReply the function).
func (s *session) settleReply(ctx context.Context, in record.Intent, text string) error {
	next := s.st.Clone()
	e := s.entry(&next, record.KindSystem)
	e.Turn = in.Turn
	e.Text = cut(text, record.MaxEntryBytes)
	e.Step, e.Attempt, e.Entries = in.Step, in.Attempt, 1
	settleReply(&next, in, e)
	if err := s.commit(ctx, []record.Entry{e}, next); err != nil {
		return err
	}
	s.log.Info("answer post settled", "step", in.Step, "call", in.CallID, "result", text)
	s.trace(ctx, TracePoint{Phase: PhaseSettled, Kind: record.StepReply, Step: in.Step, CallID: in.CallID})
	return nil
}

// settleReply makes next the state the settlement of reply intent in
// with entry e writes: an answer's ends the run as done; a question's or
// an approval request's leaves the session as it is (blocked, or working
// again when a human answered before the post).
func settleReply(next *record.State, in record.Intent, e record.Entry) {
	next.Pending = nil
	next.Steps = in.Step
	next.NextEntry = e.ID + 1
	if strings.HasPrefix(in.CallID, postAnswer) && next.Status == record.StatusWorking && len(next.Calls) == 0 {
		next.SetStatus(record.StatusDone, "", time.Now().UTC())
	}
}

// adoptReply settles reply intent p with the entry its settlement stored
// before its state was written (record.Adopt).
func (s *session) adoptReply(ctx context.Context, p record.Intent, e record.Entry) error {
	next := s.st.Clone()
	settleReply(&next, p, e)
	return s.commit(ctx, []record.Entry{e}, next)
}

// what names a post in the transcript.
func what(in record.Intent) string {
	switch {
	case strings.HasPrefix(in.CallID, postQuestion):
		return "question"
	case strings.HasPrefix(in.CallID, postApproval):
		return "approval request"
	}
	return "answer"
}
