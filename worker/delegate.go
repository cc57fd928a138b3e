package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/dlq"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools"
)

// A delegate call is a durable step like any tool call, whose effect is
// the start of a child session (DESIGN §8, Composition):
//
//  1. Its intent is written (the tool is replay-safe: the child's event id
//     is the call's reserved id, so making the effect again is one event).
//  2. The effect carves the child's budget out of what the run has left
//     (its jl_ledger account), gathers the inputs, and publishes the
//     delegate event through admission, which refuses it for the hop
//     limit, a cycle or an input the child does not read.
//  3. The settlement records the child in State.Children and no result:
//     the call stays open. When every call of the answer is settled or
//     delegated, the session is waiting, holding nothing.
//  4. The child's worker publishes the child's answer to the parent's
//     subject when the child's run ends; it settles the call under its
//     reserved id, and the run goes on once every child has answered.
//
// A run that ends early (cancelled, out of budget, failed) answers its
// open delegate calls with errors and owes each child a cancel, published
// at the next step boundary (sendCancels), so a cancel cascades down the
// tree.

// Bounds of a delegation's inputs.
const (
	// maxInlineInput is the most of one input carried in the delegate
	// event; a larger one goes to jl_blobs under the child's name and
	// the event carries its first lines and the handle.
	maxInlineInput = tools.DefaultBlobThreshold
	// maxInlineInputs bounds the inputs one delegate event carries in
	// all; the ones after go to jl_blobs like large ones.
	maxInlineInputs = 96 << 10
	// maxInputBytes bounds one input read from a file, a blob or a result.
	maxInputBytes = 16 << 20
	// inputPreview bounds the part of a large input the child's context
	// gets.
	inputPreview = 2 << 10
	// admitAttempts bounds the tries of a delegate event's publish before
	// the step is left for recovery.
	admitAttempts = 3
)

// delegate makes the effect of a delegate call whose intent is written
// and settles it: as waiting for the child it started, or, when the host
// refuses the delegation or it cannot be made, with the reason as its
// error result. An error leaves the intent for recovery, which makes the
// effect again: the child's event id is the call id, so a repeat is one
// event and one child.
func (s *session) delegate(ctx context.Context, call record.CallRef, in record.Intent, d tools.Delegation, recovery bool) error {
	dctx, cancel := s.stepContext(ctx)
	child, refusal, err := s.startChild(dctx, call, in.Step, d, recovery)
	abort := aborted(dctx)
	deadline := dctx.Err() != nil && ctx.Err() == nil && abort == nil
	cancel()
	if err == nil && ctx.Err() == nil && abort == nil && !deadline {
		s.trace(ctx, TracePoint{Phase: PhaseSettle, Kind: record.StepTool, Step: in.Step, Tool: call.Name, CallID: call.ID, Recovery: recovery})
	}
	switch {
	case ctx.Err() != nil:
		return context.Cause(ctx)
	case abort != nil:
		s.log.Info("delegate call aborted", "call", call.ID, "why", abort)
		return abort
	case deadline:
		_, reason := budget(s.st, record.StepTool, time.Now())
		if reason == "" {
			reason = "deadline passed while a delegate call started its session"
		}
		return s.stopBudget(ctx, s.st.Clone(), nil, "deadline", reason)
	case errors.Is(err, errIDConflict):
		// Publishing it again would meet the same answer: the call is
		// answered, and the run goes on.
		s.counter(s.w.m.delegations, "conflict").Inc()
		s.log.Warn("delegate event refused as a conflict: its id was used for another event; the call is answered with an error, not published again", "call", call.ID, "to", d.Agent, "err", err)
		return s.settleResult(ctx, call, in, fmt.Sprintf("delegate to %s: not started: %v", d.Agent, err), true, "")
	case err != nil:
		s.log.Warn("delegate call could not publish its session's start; recovery makes it again", "call", call.ID, "to", d.Agent, "err", err)
		return fmt.Errorf("worker: delegate call %s: %w", call.ID, err)
	case refusal != "":
		s.counter(s.w.m.delegations, "refused").Inc()
		s.log.Info("delegation refused", "call", call.ID, "to", d.Agent, "why", refusal)
		return s.settleResult(ctx, call, in, refusal, true, "")
	}
	s.counter(s.w.m.delegations, "started").Inc()
	return s.settleDelegated(ctx, call, in.Step, child)
}

// startChild publishes the delegate event of call, the step's, through
// admission. On recovery, an event stored for the step is published as
// it is: the delegation was made, or may have been, and is not judged
// again (budget, tree size, inputs). Otherwise the event is made anew
// (makeDelegation) and stored create-only before its first publish; when
// another attempt stored the step's event first (a stale worker racing
// its successor), that one is published, never this one. It returns the
// child session ("agent/session"), or the reason the delegation is
// refused.
func (s *session) startChild(ctx context.Context, call record.CallRef, step uint64, d tools.Delegation, recovery bool) (child, refusal string, err error) {
	if s.w.cfg.Admit == nil {
		return "", "delegate: this worker cannot start sessions (no admission pipeline is configured)", nil
	}
	var stored []byte
	if recovery {
		if stored, err = s.w.store.Delegation(ctx, s.r.ref, step); err != nil {
			return "", "", err
		}
	}
	if stored == nil {
		made, refusal, err := s.makeDelegation(ctx, call, d)
		if err != nil || refusal != "" {
			return "", refusal, err
		}
		if stored, err = s.w.store.ReserveDelegation(ctx, s.r.ref, step, made); errors.Is(err, record.ErrTooLarge) {
			// Never stored, so never published: made again, it would be
			// as large.
			return "", fmt.Sprintf("delegate to %s: %v", d.Agent, err), nil
		} else if err != nil {
			return "", "", err
		}
	} else {
		s.log.Info("delegate call recovered: publishing the delegate event stored before its first publish", "call", call.ID, "step", step)
	}
	return s.publishDelegation(ctx, call, step, stored)
}

// makeDelegation carves the child's budget, gathers its inputs and
// encodes the delegate event of call, or says why the delegation is
// refused.
func (s *session) makeDelegation(ctx context.Context, call record.CallRef, d tools.Delegation) (encoded []byte, refusal string, err error) {
	name := events.ChildSession(s.r.ref.Agent, s.r.ref.Session, call.ID)
	cref, err := streams.NewSessionRef(d.Agent, name)
	if err != nil {
		return nil, fmt.Sprintf("delegate: agent %q: %v", d.Agent, err), nil
	}
	run := s.runID()
	ceil := ledgerCeiling(s.st.Limits)
	acct, err := s.w.ledger.OpenAccount(ctx, s.r.ref, run, ceil, s.ownPart(s.st))
	if err != nil {
		return nil, "", err
	}
	now := time.Now().UTC()
	b, why := carve(s.st.Limits, acct.Total(), d.Budget, s.deadlineAt(), now)
	if why != "" {
		return nil, "delegate to " + d.Agent + ": " + why, nil
	}
	if n := len(acct.Parts); n >= maxTreeParts {
		return nil, fmt.Sprintf("delegate to %s: this run's tree counts %d sessions already, the most one tree may have", d.Agent, n), nil
	}
	inputs, why, err := s.inputs(ctx, cref, d.Inputs)
	if err != nil || why != "" {
		return nil, why, err
	}
	hops, maxHops := 1, s.maxHops()
	var path []events.Hop
	if dl := s.st.Delegation; dl != nil && s.delegatedRun() {
		hops = dl.Hops + 1
		path = slices.Clone(dl.Path)
	}
	// The run's task: the task its parent gave, or the input that started
	// it (RunTask, the cycle rule's view of both).
	path = append(path, events.Hop{Session: s.r.ref.String(), Task: s.st.RunTask, Run: run})
	data, err := json.Marshal(events.Delegation{
		Parent: s.r.ref.String(), CallID: call.ID, Task: d.Task, Inputs: inputs, Budget: b,
		Hops: hops, MaxHops: maxHops, Path: path,
	})
	if err != nil {
		return nil, "", fmt.Errorf("encode delegation: %w", err)
	}
	e := event.New()
	e.SetID(call.ID)
	e.SetSource(events.DelegationSource(s.r.ref.Agent, s.r.ref.Session))
	e.SetType(events.TypeDelegate)
	e.SetSubject(cref.Session)
	e.SetTime(now)
	e.SetExtension(events.ExtAgent, cref.Agent)
	e.SetExtension(events.ExtSession, cref.Session)
	e.SetExtension(events.ExtParent, s.r.ref.String())
	e.SetExtension(events.ExtHops, int32(hops))
	if err := e.SetData(event.ApplicationJSON, data); err != nil {
		return nil, "", fmt.Errorf("delegate event: %w", err)
	}
	out, err := json.Marshal(e)
	if err != nil {
		return nil, "", fmt.Errorf("encode delegate event %s: %w", call.ID, err)
	}
	return out, "", nil
}

// errIDConflict is a delegate event the pipeline refused because its id
// was used before for another event: the call is answered with the
// reason, never published again.
var errIDConflict = errors.New("the delegate event's id was used for another event")

// publishDelegation publishes stored, the encoded delegate event of call
// of step, through admission, after recording the child among this
// session's keys.
func (s *session) publishDelegation(ctx context.Context, call record.CallRef, step uint64, stored []byte) (child, refusal string, err error) {
	var e event.Event
	if err := json.Unmarshal(stored, &e); err != nil {
		return "", fmt.Sprintf("delegate: the delegate event stored for step %d does not decode: %v", step, err), nil
	}
	agent, _ := e.Extensions()[events.ExtAgent].(string)
	session, _ := e.Extensions()[events.ExtSession].(string)
	cref, rerr := streams.NewSessionRef(agent, session)
	if e.ID() != call.ID || e.Type() != events.TypeDelegate || rerr != nil {
		return "", fmt.Sprintf("delegate: the delegate event stored for step %d is %s %q to %q, not this call's", step, e.Type(), e.ID(), agent+"/"+session), nil
	}
	// The child is recorded among this session's keys before it can
	// exist, so a reader of this session finds every child it has.
	if err := s.w.store.NoteChild(ctx, s.r.ref, cref, call.ID); err != nil {
		return "", "", err
	}
	var res Admission
	for attempt := 1; ; attempt++ {
		res, err = s.w.cfg.Admit(ctx, e)
		if err == nil || attempt >= admitAttempts || ctx.Err() != nil {
			break
		}
		if serr := sleep(ctx, time.Duration(attempt)*500*time.Millisecond); serr != nil {
			break
		}
	}
	if err != nil {
		return "", "", err
	}
	if res.Conflict != "" {
		return "", "", fmt.Errorf("%w: %s", errIDConflict, res.Conflict)
	}
	if len(res.Refused) > 0 {
		return "", "delegate to " + cref.Agent + " refused: " + strings.Join(res.Refused, "; "), nil
	}
	if !slices.Contains(res.Admitted, cref.String()) {
		return "", fmt.Sprintf("delegate to %s: admission did not start the session %s", cref.Agent, cref), nil
	}
	s.log.Info("delegated", "call", call.ID, "child", cref.String(), "hops", e.Extensions()[events.ExtHops], "duplicate", res.Duplicate)
	return cref.String(), "", nil
}

// maxTreeParts bounds the sessions one run's tree may count, below the
// ledger's own bound so the refusal is an answer, not an error.
const maxTreeParts = 1000

// inputs resolves a delegation's inputs: texts as they are, files of the
// work folder, blobs and results of this session read whole, each kept in
// the event when small and put in jl_blobs under the child's name when
// not. A reason is returned for an input that cannot be given.
func (s *session) inputs(ctx context.Context, child streams.SessionRef, given map[string]tools.Input) ([]events.Input, string, error) {
	names := make([]string, 0, len(given))
	for n := range given {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]events.Input, 0, len(names))
	inline := 0
	for _, n := range names {
		in := given[n]
		var data []byte
		switch {
		case in.Text != nil:
			data = []byte(*in.Text)
		case in.File != "":
			dir, err := s.workDir()
			if err != nil {
				return nil, "", err
			}
			var why string
			if data, why = readInputFile(dir, in.File); why != "" {
				return nil, fmt.Sprintf("delegate: input %s: %s", n, why), nil
			}
		case in.Blob != "":
			owner, err := s.w.names.ParseSessionKey(in.Blob)
			if err != nil || owner.Key() != s.r.ref.Key() {
				return nil, fmt.Sprintf("delegate: input %s: %q is not a blob of this session", n, in.Blob), nil
			}
			var why string
			if data, why, err = s.readBlob(ctx, in.Blob); err != nil || why != "" {
				return nil, prefixed("delegate: input "+n+": ", why), err
			}
		case in.Result != "":
			e, ok := s.result(in.Result)
			if !ok {
				return nil, fmt.Sprintf("delegate: input %s: no result of a call %q in this session", n, in.Result), nil
			}
			data = []byte(e.Result)
			if e.Blob != "" {
				var why string
				var err error
				if data, why, err = s.readBlob(ctx, e.Blob); err != nil || why != "" {
					return nil, prefixed("delegate: input "+n+": ", why), err
				}
			}
		}
		item := events.Input{Name: n, Text: string(data), Size: int64(len(data))}
		if len(data) <= maxInlineInput && inline+len(data) <= maxInlineInputs {
			inline += len(data)
		} else {
			handle, err := s.w.names.InputBlob(child, n)
			if err != nil {
				return nil, "", err
			}
			// A delegation made again (after a crash) keeps the input
			// the child may have read already.
			if _, err := s.w.blobs.GetInfo(ctx, handle); errors.Is(err, jetstream.ErrObjectNotFound) {
				if _, err := s.w.blobs.PutBytes(ctx, handle, data); err != nil {
					return nil, "", fmt.Errorf("store input %s for %s: %w", n, child, err)
				}
			} else if err != nil {
				return nil, "", fmt.Errorf("store input %s for %s: %w", n, child, err)
			}
			item.Text, item.Blob = headOf(string(data), inputPreview), handle
		}
		out = append(out, item)
	}
	return out, "", nil
}

func prefixed(prefix, why string) string {
	if why == "" {
		return ""
	}
	return prefix + why
}

// readInputFile reads a file of the work folder dir, refusing paths that
// leave it (through "..", an absolute path or a symbolic link), what is
// not a regular file, and files over maxInputBytes.
func readInputFile(dir, path string) ([]byte, string) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, "the work folder cannot be opened: " + err.Error()
	}
	defer root.Close()
	f, err := root.Open(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Sprintf("no file %q in the work folder", path)
	case err != nil:
		return nil, fmt.Sprintf("file %q: %v (a path inside the work folder)", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Sprintf("file %q: %v", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Sprintf("%q is not a regular file", path)
	}
	if fi.Size() > maxInputBytes {
		return nil, fmt.Sprintf("file %q is %d bytes, more than the %d an input may have", path, fi.Size(), maxInputBytes)
	}
	data := make([]byte, fi.Size())
	n, err := f.ReadAt(data, 0)
	if err != nil && n != len(data) {
		return nil, fmt.Sprintf("read %q: %v", path, err)
	}
	return data[:n], ""
}

// readBlob reads a jl_blobs object whole, up to maxInputBytes.
func (s *session) readBlob(ctx context.Context, handle string) ([]byte, string, error) {
	info, err := s.w.blobs.GetInfo(ctx, handle)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Sprintf("no blob %q", handle), nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("blob %q: %w", handle, err)
	}
	if info.Size > maxInputBytes {
		return nil, fmt.Sprintf("blob %q is %d bytes, more than the %d an input may have", handle, info.Size, maxInputBytes), nil
	}
	data, err := s.w.blobs.GetBytes(ctx, handle)
	if err != nil {
		return nil, "", fmt.Errorf("read blob %q: %w", handle, err)
	}
	return data, "", nil
}

// result finds the result entry of call id in the transcript.
func (s *session) result(id string) (record.Entry, bool) {
	for i := len(s.live) - 1; i >= 0; i-- {
		if e := s.live[i]; e.Kind == record.KindToolResult && e.CallID == id {
			return e, true
		}
	}
	return record.Entry{}, false
}

// headOf is the start of text, at most n bytes, cut at a line end where
// one is near.
func headOf(text string, n int) string {
	if len(text) <= n {
		return text
	}
	keep := n
	for keep > 0 && !utf8Start(text[keep]) {
		keep--
	}
	head := text[:keep]
	if i := strings.LastIndexByte(head, '\n'); i > n/2 {
		head = head[:i+1]
	}
	return head
}

// settleDelegated settles a delegate call whose child started: the call
// stays open (its result is the child's answer), the child is recorded,
// and when no call is left to make the session waits.
func (s *session) settleDelegated(ctx context.Context, call record.CallRef, step uint64, child string) error {
	next := s.st.Clone()
	e := s.entry(&next, record.KindSystem)
	e.Name, e.CallID = call.Name, call.ID
	e.Text = fmt.Sprintf("call %s delegated to %s; its answer will be the call's result", call.ID, child)
	next.Calls = next.Calls[1:]
	next.Pending = nil
	next.Steps = step
	if !slices.ContainsFunc(next.Children, func(c record.Child) bool { return c.CallID == call.ID }) {
		next.Children = append(next.Children, record.Child{CallID: call.ID, Session: child})
	}
	next.Ledger = s.runID()
	if len(next.Calls) == 0 {
		waitForChildren(&next)
		if err := s.armDeadline(ctx, &next); err != nil {
			return err
		}
	}
	if err := s.commit(ctx, []record.Entry{e}, next); err != nil {
		return err
	}
	s.countStep(string(record.StepTool), "delegated")
	s.trace(ctx, TracePoint{Phase: PhaseSettled, Kind: record.StepTool, Step: step, Tool: call.Name, CallID: call.ID})
	return nil
}

// awaited counts the children whose answers the run waits for.
func awaited(st record.State) int {
	n := 0
	for _, c := range st.Children {
		if c.Cancel == "" {
			n++
		}
	}
	return n
}

// waitForChildren makes next wait for its children's answers.
func waitForChildren(next *record.State) {
	next.SetStatus(record.StatusWaiting, "", time.Now().UTC())
	next.WaitingFor = waitingText(*next)
}

// waitingText says which children a waiting session waits for.
func waitingText(st record.State) string {
	var parts []string
	for _, c := range st.Children {
		if c.Cancel == "" {
			parts = append(parts, c.Session+" (call "+c.CallID+")")
		}
	}
	return cut("the answers of "+strings.Join(parts, ", "), 4096)
}

// wait parks a run whose calls are settled but whose delegated sessions
// have not all answered.
func (s *session) wait(ctx context.Context) error {
	next := s.st.Clone()
	waitForChildren(&next)
	if err := s.armDeadline(ctx, &next); err != nil {
		return err
	}
	s.log.Info("run waits for its delegated sessions", "children", awaited(next))
	return s.commit(ctx, nil, next)
}

// childAnswered settles the delegate call a child's answer is for, under
// the call's reserved id; with every child answered and no call left, the
// run goes on. An answer nothing waits for (a repeat, or one for a run
// that ended) is dead-lettered with why.
func (s *session) childAnswered(ctx context.Context, in *input, ev event.Event, next record.State) error {
	var res events.DelegationResult
	err := json.Unmarshal(ev.Data(), &res)
	i := -1
	if err == nil {
		i = slices.IndexFunc(next.Children, func(c record.Child) bool {
			return c.CallID == res.CallID && c.Session == res.Child && c.Cancel == ""
		})
	}
	if i < 0 && err == nil && s.lateAnswer(res, ev) {
		return s.lateAnswered(ctx, in, ev, res, next)
	}
	if i < 0 {
		why := fmt.Sprintf("answer of %s to call %s, which this session does not wait for", res.Child, res.CallID)
		if err != nil {
			why = "answer that does not parse: " + err.Error()
		}
		if err := s.w.deadLetter(ctx, in.subject, in.header, in.data, in.seq, dlq.NotApplicable, why); err != nil {
			return err
		}
		return s.commit(ctx, nil, next)
	}
	e := s.entry(&next, record.KindToolResult)
	e.Name, e.CallID, e.IsError = "delegate", res.CallID, res.IsError
	e.Result = cut(res.Text, record.MaxEntryBytes)
	e.Event = &record.EventRef{ID: ev.ID(), Source: ev.Source(), Type: ev.Type(), Seq: in.seq}
	next.Children = slices.Delete(next.Children, i, i+1)
	tree := record.Tree{Sessions: res.Sessions, Turns: res.Usage.Turns,
		Usage: model.Usage{InputTokens: res.Usage.InputTokens, OutputTokens: res.Usage.OutputTokens, CostUSD: res.Usage.CostUSD}}
	next.Delegated = next.Delegated.Add(tree)
	next.RunDelegated = next.RunDelegated.Add(tree)
	next.Steps++
	if res.IsError {
		next.RunToolErrors++
	}
	if next.Status == record.StatusWaiting {
		if awaited(next) == 0 && len(next.Calls) == 0 {
			next.SetStatus(record.StatusWorking, "", time.Now().UTC())
		} else {
			next.WaitingFor = waitingText(next)
		}
	}
	s.counter(s.w.m.delegations, "answered").Inc()
	s.log.Info("delegated session answered", "call", res.CallID, "child", res.Child, "status", res.Status, "waiting", awaited(next))
	return s.commit(ctx, []record.Entry{e}, next)
}

// lateAnswer reports whether ev, an answer this session no longer waits
// for, is the first answer of the child one of its delegate calls
// started: the run that made the call ended before it (and closed the
// call), and the child answers with what it consumed. An answer taken
// before, as the call's result or late, is not: its usage is counted.
func (s *session) lateAnswer(res events.DelegationResult, ev event.Event) bool {
	agent, session, ok := strings.Cut(res.Child, "/")
	if !ok || session != events.ChildSession(s.r.ref.Agent, s.r.ref.Session, res.CallID) ||
		ev.Source() != events.ResultSource(agent, session) {
		return false
	}
	closed := false
	for _, e := range s.live {
		switch {
		case e.Event != nil && e.Event.Type == events.TypeDelegateResult && e.Event.ID == ev.ID() && e.Event.Source == ev.Source():
			// Counted already: as a late answer (a system entry), or as
			// the call's result (published again past JL_IN's duplicate
			// window, it is the same answer).
			return false
		case e.Kind == record.KindToolResult && e.CallID == res.CallID:
			closed = true
		}
	}
	return closed
}

// lateAnswered records the answer of a child whose call was closed when
// its parent's run ended: a system entry says how it ended, and what it
// consumed joins the session's tree usage (its ledger account had it as
// it happened).
func (s *session) lateAnswered(ctx context.Context, in *input, ev event.Event, res events.DelegationResult, next record.State) error {
	e := s.entry(&next, record.KindSystem)
	e.Name, e.CallID = "delegate", res.CallID
	e.Text = cut(fmt.Sprintf("late answer of %s to call %s, closed when its run ended: %s (%d turns, %d tokens, $%.4f)",
		res.Child, res.CallID, res.Status, res.Usage.Turns, res.Usage.InputTokens+res.Usage.OutputTokens, res.Usage.CostUSD), 4096)
	e.Event = &record.EventRef{ID: ev.ID(), Source: ev.Source(), Type: ev.Type(), Seq: in.seq}
	next.Delegated = next.Delegated.Add(record.Tree{Sessions: res.Sessions, Turns: res.Usage.Turns,
		Usage: model.Usage{InputTokens: res.Usage.InputTokens, OutputTokens: res.Usage.OutputTokens, CostUSD: res.Usage.CostUSD}})
	s.counter(s.w.m.delegations, "answered_late").Inc()
	s.log.Info("delegated session answered after its call was closed", "call", res.CallID, "child", res.Child, "status", res.Status)
	return s.commit(ctx, []record.Entry{e}, next)
}

// owesCancels reports whether st owes a child a cancel.
func owesCancels(st record.State) bool {
	return slices.ContainsFunc(st.Children, func(c record.Child) bool { return c.Cancel != "" })
}

// sendCancels publishes the cancels a run that ended owes its children,
// then drops them from the state. Each cancel's id names the parent and
// the call, so publishing it again (after a crash) is one message.
func (s *session) sendCancels(ctx context.Context) error {
	next := s.st.Clone()
	keep := next.Children[:0:0]
	for _, c := range next.Children {
		if c.Cancel == "" {
			keep = append(keep, c)
			continue
		}
		agent, session, _ := strings.Cut(c.Session, "/")
		ref, err := streams.NewSessionRef(agent, session)
		if err != nil {
			s.log.Warn("cannot cancel a delegated session with a bad name", "child", c.Session, "err", err)
			continue
		}
		h := sha256.Sum256([]byte(s.r.ref.String() + "\x00" + c.CallID))
		m := control.Message{Verb: control.Cancel, Text: cut(c.Cancel, 1024), ID: "cascade-" + hex.EncodeToString(h[:16]),
			Source: events.DelegationSource(s.r.ref.Agent, s.r.ref.Session)}
		if _, err := control.Publish(ctx, s.w.js, s.w.names, ref, m); err != nil {
			return fmt.Errorf("worker: cancel delegated session %s: %w", ref, err)
		}
		s.counter(s.w.m.delegations, "cancelled").Inc()
		s.log.Info("delegated session cancelled with its parent's run", "child", ref.String(), "call", c.CallID, "why", c.Cancel)
	}
	next.Children = keep
	return s.commit(ctx, nil, next)
}

// closeChildren answers next's open delegate calls with error results and
// marks a cancel owed to each child (the in-flight delegate call's child
// too, which may have started), for a run that ends with why.
func (s *session) closeChildren(next *record.State, why string) []record.Entry {
	var out []record.Entry
	for i, c := range next.Children {
		if c.Cancel != "" {
			continue
		}
		e := s.entry(next, record.KindToolResult)
		e.Name, e.CallID, e.IsError = "delegate", c.CallID, true
		e.Result = fmt.Sprintf("not answered: %s; the delegated session %s is cancelled", why, c.Session)
		out = append(out, e)
		next.Children[i].Cancel = why
	}
	return out
}

// inflightChild is the child a delegate call whose intent is written may
// have started: it is owed a cancel when the run ends with the call open.
func (s *session) inflightChild(p *record.Intent) (record.Child, bool) {
	if p == nil || p.Kind != record.StepTool || p.Tool != "delegate" {
		return record.Child{}, false
	}
	var d struct {
		Agent string `json:"agent"`
	}
	if json.Unmarshal(p.Args, &d) != nil || policies.CheckName(d.Agent) != nil {
		return record.Child{}, false
	}
	return record.Child{CallID: p.CallID, Session: d.Agent + "/" + events.ChildSession(s.r.ref.Agent, s.r.ref.Session, p.CallID)}, true
}

// A waiting run holds nothing, so nothing of it would notice its deadline
// pass while its children take too long: when it starts waiting with a
// deadline, it also writes a delayed (@at) message on its timer subject
// (jl.timer.<agent>.<session>.delegation), which the server fires onto the
// session's input subject at the deadline. If the run still waits for
// that run's children then, it ends as budget_exceeded and cancels them;
// otherwise the message is stale and ignored. One timer at a time: a new
// wait replaces it.

// TypeDelegationDeadline is the event a waiting run's deadline timer
// fires.
const TypeDelegationDeadline = "dev.jetloop.delegation.deadline"

// delegationTimer is the name of a session's delegation deadline timer.
const delegationTimer = "delegation"

// delegationDeadline is the data of a TypeDelegationDeadline event.
type delegationDeadline struct {
	Run string    `json:"run"`
	At  time.Time `json:"at"`
}

// armDeadline writes the deadline timer of the run next is about to wait
// in, when the run has a deadline. It is written before the state, so a
// crash between them leaves a timer on a run that does not wait, which
// is ignored.
func (s *session) armDeadline(ctx context.Context, next *record.State) error {
	at := runDeadline(*next)
	if at.IsZero() {
		return nil
	}
	if r := at.Truncate(time.Second); r.Before(at) {
		at = r.Add(time.Second) // @at takes whole seconds: never sooner
	}
	subject, err := s.w.names.Timer(s.r.ref, delegationTimer)
	if err != nil {
		return fmt.Errorf("worker: delegation timer of %s: %w", s.r.ref, err)
	}
	run := strconv.Itoa(next.Runs)
	data, _ := json.Marshal(delegationDeadline{Run: run, At: at})
	e := event.New()
	e.SetID("deadline-" + run)
	e.SetSource("/jetloop/worker")
	e.SetType(TypeDelegationDeadline)
	e.SetSubject(s.r.ref.Session)
	e.SetTime(at)
	e.SetExtension(events.ExtAgent, s.r.ref.Agent)
	e.SetExtension(events.ExtSession, s.r.ref.Session)
	if err := e.SetData(event.ApplicationJSON, json.RawMessage(data)); err != nil {
		return fmt.Errorf("worker: delegation timer of %s: %w", s.r.ref, err)
	}
	m, err := events.ToMsg(subject, e)
	if err != nil {
		return fmt.Errorf("worker: delegation timer of %s: %w", s.r.ref, err)
	}
	m.Header.Set("Nats-Schedule", "@at "+at.UTC().Format(time.RFC3339))
	m.Header.Set("Nats-Schedule-Target", s.w.names.In(s.r.ref))
	m.Header.Set("Nats-Rollup", "sub")
	m.Header.Set(nats.MsgIdHdr, "deadline-"+s.r.ref.Key()+"-"+run+"-"+at.Format(time.RFC3339))
	if err := s.w.inRoom(ctx, s.r.ref, writerDeadlineTimer, true, len(m.Data)); err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.w.js.PublishMsg(pctx, m, jetstream.WithExpectStream(s.w.names.StreamIn())); err != nil {
		return fmt.Errorf("worker: arm the delegation timer of %s on %s: %w", s.r.ref, subject, err)
	}
	return nil
}

// deadlinePassed applies a fired delegation timer: a run that still
// waits for its children at its deadline ends as budget_exceeded (its
// children are cancelled); a stale timer is consumed with next.
func (s *session) deadlinePassed(ctx context.Context, in *input, ev event.Event, next record.State) error {
	var d delegationDeadline
	err := json.Unmarshal(ev.Data(), &d)
	now := time.Now()
	at := runDeadline(s.st)
	if err != nil || s.st.Status != record.StatusWaiting || d.Run != strconv.Itoa(s.st.Runs) || at.IsZero() || now.Before(at) {
		s.log.Debug("delegation deadline timer ignored: the run does not wait past its deadline", "seq", in.seq, "status", s.st.Status)
		return s.commit(ctx, nil, next)
	}
	if err := s.ensure(ctx); err != nil {
		return err
	}
	reason := fmt.Sprintf("deadline passed (%s) while the run waited for %s", at.UTC().Format(time.RFC3339), strings.TrimPrefix(s.st.WaitingFor, "the answers of "))
	return s.stopBudget(ctx, next, nil, "deadline", reason)
}
