package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/tools"
)

// replyIntent is the intent of posting a run's answer into the Slack
// thread of its event, nil when there is no such thread, no poster or no
// answer.
func (s *session) replyIntent(next record.State, text string) *record.Intent {
	if s.w.cfg.Reply == nil || next.Thread == nil || next.Thread.SlackChannel == "" || text == "" {
		return nil
	}
	args, _ := json.Marshal(tools.SlackArgs{Text: text})
	return &record.Intent{Kind: record.StepReply, Step: next.Steps + 1, Turn: next.Turns, Entry: next.NextEntry,
		CallID: "answer_" + strconv.FormatUint(next.NextEntry, 10), Tool: s.w.cfg.Reply.Spec().Name, Args: args,
		Replay: record.ReplayProbe, Owner: s.w.cfg.ID, Started: time.Now().UTC()}
}

// withReply makes the settlement next of a run's last model step carry
// the intent of posting its answer, when the run came from a chat thread:
// the run stays working until the post is settled.
func (s *session) withReply(next *record.State, answer string) *record.Intent {
	if next.Status != record.StatusDone || len(next.Calls) > 0 {
		return nil
	}
	in := s.replyIntent(*next, answer)
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
func (s *session) replyStep(ctx context.Context, in record.Intent, recovering bool) error {
	p := s.w.cfg.Reply
	if p == nil {
		return s.settleReply(ctx, in, "answer not posted: this worker has no chat poster")
	}
	dir, err := s.workDir()
	if err != nil {
		return err
	}
	if recovering {
		if in.Attempt >= s.w.cfg.MaxRecoveries {
			return s.settleReply(ctx, in, fmt.Sprintf("answer not posted: interrupted %d times%s", in.Attempt+1, mayHaveRun))
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
		case perr != nil:
			s.w.m.recoveries.WithLabelValues(string(record.StepReply), "probe_failed").Inc()
			s.log.Warn("probe of an interrupted answer post failed; trying again later", "call", in.CallID, "err", perr)
			if err := s.writeIntent(ctx, next); err != nil {
				return err
			}
			return fmt.Errorf("worker: probe answer post %s: %w", in.CallID, perr)
		case found:
			s.w.m.recoveries.WithLabelValues(string(record.StepReply), "probe_found").Inc()
			return s.settleReply(ctx, in, "answer "+res.Content)
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
		return s.settleReply(ctx, in, fmt.Sprintf("answer not posted: %v", cerr))
	case res.IsError:
		return s.settleReply(ctx, in, "answer not posted: "+res.Content)
	}
	return s.settleReply(ctx, in, "answer "+res.Content)
}

// settleReply ends the run as done with a system entry saying what became
// of its answer's post.
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
// with entry e writes: the run done.
func settleReply(next *record.State, in record.Intent, e record.Entry) {
	next.Pending = nil
	next.Steps = in.Step
	next.NextEntry = e.ID + 1
	next.SetStatus(record.StatusDone, "", time.Now().UTC())
}

// adoptReply settles reply intent p with the entry its settlement stored
// before its state was written (record.Adopt).
func (s *session) adoptReply(ctx context.Context, p record.Intent, e record.Entry) error {
	next := s.st.Clone()
	settleReply(&next, p, e)
	return s.commit(ctx, []record.Entry{e}, next)
}
