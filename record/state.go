package record

import (
	"bytes"
	"encoding/json"
	"slices"
	"time"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
)

// Status is where a session stands (DESIGN §8).
type Status string

// Statuses of a session.
const (
	// StatusIdle: the session exists and waits for events.
	StatusIdle Status = "idle"
	// StatusWorking: a run is in progress (or was, when its worker died).
	StatusWorking Status = "working"
	// StatusBlocked: waiting for a human (an approval or ask_human).
	StatusBlocked Status = "blocked"
	// StatusPaused: interrupted; resumes on a resume control message.
	StatusPaused Status = "paused"
	// StatusWaiting: the run waits for the sessions it delegated to
	// (State.Children) and holds no compute; each child's answer settles
	// its call, and the run goes on when every one has answered.
	StatusWaiting Status = "waiting"
	// StatusQueued: the session has an event to start a run with (or a
	// run to continue) and waits for a slot of its agent's concurrency
	// limit; WaitingFor says which. The event waits in JL_IN.
	StatusQueued Status = "queued"
	// StatusDone: the last run ended with the model's answer; a new event
	// starts another.
	StatusDone Status = "done"
	// StatusFailed: the last run failed (a model error after its retries);
	// a new event starts another.
	StatusFailed Status = "failed"
	// StatusCancelled: stopped by a cancel; final.
	StatusCancelled Status = "cancelled"
	// StatusBudgetExceeded: the last run ran out of its budget (turns,
	// tokens, cost, deadline or delegation hops) and was ended; a new
	// event starts another run with a fresh budget.
	StatusBudgetExceeded Status = "budget_exceeded"
)

// Statuses lists every status, in the order of the constants.
func Statuses() []Status {
	return []Status{StatusIdle, StatusWorking, StatusBlocked, StatusPaused, StatusWaiting, StatusQueued, StatusDone, StatusFailed, StatusCancelled, StatusBudgetExceeded}
}

// Known reports whether s is one of Statuses.
func (s Status) Known() bool { return slices.Contains(Statuses(), s) }

// Final reports whether a session in status s takes no more runs: events
// that reach it go to the dead letter stream. Only a cancel ends a
// session for good.
func (s Status) Final() bool { return s == StatusCancelled }

// Resting reports whether no run is in progress in status s, and none
// waits to start or continue (a queued session's event is still to run).
func (s Status) Resting() bool { return s != StatusWorking && s != StatusQueued }

// Waiting reports whether the session's run waits, holding nothing: for a
// human, a resume, or the sessions it delegated to.
func (s Status) Waiting() bool { return s == StatusBlocked || s == StatusPaused || s == StatusWaiting }

// Ended reports whether the run of a session in status s is over: it
// ended with an answer, failed, ran out of budget or was cancelled.
func (s Status) Ended() bool {
	return s == StatusDone || s == StatusFailed || s == StatusBudgetExceeded || s == StatusCancelled
}

// Kind is the kind of a transcript entry.
type Kind string

// Kinds of transcript entries (DESIGN §11).
const (
	KindEvent      Kind = "event"
	KindUser       Kind = "user"
	KindAssistant  Kind = "assistant"
	KindToolCall   Kind = "tool_call"
	KindToolResult Kind = "tool_result"
	KindControl    Kind = "control"
	KindSystem     Kind = "system"
	// KindSummary stands, in the context, for the entries it covers: a
	// compaction's summary (the entries stay in the transcript).
	KindSummary Kind = "summary"
)

// Entry is one transcript entry, stored under <agent>.<session>.log.<id>.
// Its JSON form is the contract of `jetloop show --json`: fields may be
// added, never renamed.
type Entry struct {
	// ID is the entry's place in the transcript, from 1.
	ID   uint64    `json:"id"`
	Kind Kind      `json:"kind"`
	Turn int       `json:"turn"`
	Time time.Time `json:"time"`
	// Text is the message of event, user, assistant, control and system
	// entries.
	Text string `json:"text,omitempty"`
	// Name is the tool of tool_call and tool_result entries, the event type
	// of event entries, the verb of control entries.
	Name string `json:"name,omitempty"`
	// Args are a tool call's arguments, a JSON object.
	Args json.RawMessage `json:"args,omitempty"`
	// CallID links a tool_result (and a tool_call) to its call.
	CallID string `json:"call_id,omitempty"`
	// Result is what the model sees of a call; IsError marks a failure.
	Result  string `json:"result,omitempty"`
	IsError bool   `json:"is_error,omitempty"`
	// Blob is the jl_blobs handle of a result too large for the context.
	Blob string `json:"blob,omitempty"`
	// Usage is what the model call of an assistant entry consumed.
	Usage *model.Usage `json:"usage,omitempty"`
	// Model is the model that answered (assistant entries).
	Model string `json:"model,omitempty"`
	// Event identifies the input of event and user entries.
	Event *EventRef `json:"event,omitempty"`
	// Step is the step whose settlement wrote the entry (the entries of a
	// model call's answer, a tool call's result), and Attempt the attempt
	// of that step that made the effect (0 the first; see Intent.Attempt).
	Step    uint64 `json:"step,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	// Entries is set on the first entry of a step's settlement, at the id
	// its intent reserved: how many entries the settlement wrote, this
	// one included. Recovery adopts a stored settlement only whole.
	Entries int `json:"entries,omitempty"`
	// Covers is the span of entries a summary entry stands for.
	Covers *Span `json:"covers,omitempty"`
	// Context is set by readers, never stored: how the entry stands in the
	// next model call's context ("summarised", "masked"; empty: as it is).
	Context string `json:"context,omitempty"`
}

// MarshalJSON writes the fields a kind always has even when empty, so
// machines need not guess what an absent field means: result and
// is_error on every tool_result entry (an empty output, false), text on
// every assistant entry (an answer with only tool calls).
func (e Entry) MarshalJSON() ([]byte, error) { return encodeEntryJSON(&e) }

// marshalEntryReflect is Entry.MarshalJSON by encoding/json's reflection:
// what the stored form is held to, and what writes a value the encoder
// refuses (with encoding/json's error).
func marshalEntryReflect(e Entry) ([]byte, error) {
	type plain Entry
	switch e.Kind {
	case KindToolResult:
		return marshal(struct {
			plain
			Result  string `json:"result"`
			IsError bool   `json:"is_error"`
		}{plain(e), e.Result, e.IsError})
	case KindAssistant:
		return marshal(struct {
			plain
			Text string `json:"text"`
		}{plain(e), e.Text})
	}
	return marshal(plain(e))
}

// marshal is json.Marshal without HTML escaping: transcripts hold shell
// commands and code, which should read as written.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// EventRef names the input an entry records.
type EventRef struct {
	ID     string `json:"id"`
	Source string `json:"source"`
	Type   string `json:"type"`
	// Seq is the input's sequence in JL_IN (or JL_CTL for control).
	Seq uint64 `json:"seq"`
	// Count is, for a debounced burst, how many events it coalesced
	// (the entry holds the latest); 0 for a single event.
	Count int `json:"count,omitempty"`
}

// StepKind is the kind of a step.
type StepKind string

// Kinds of steps.
const (
	StepModel StepKind = "model"
	StepTool  StepKind = "tool"
	// StepReply posts the run's answer into the chat thread its event came
	// from (a Slack thread); its Tool, Args and CallID are the post's, the
	// CallID naming it in the post's marker.
	StepReply StepKind = "reply"
)

// Intent is a step committed before its effect: what is about to happen
// and the transcript id its output will start at. A state that holds an
// intent without its settlement is what recovery looks up (see
// Recovery).
//
// The one uncertain interval: between the write of an intent and the
// write of its settlement, nothing but the effect is known. Everything
// else is a lookup: the settlement's entries are created under the ids
// the intent reserved before the state names them, so recovery asks
// storage which exist (Store.Stored).
type Intent struct {
	Kind StepKind `json:"kind"`
	// Step numbers the session's steps, from 1; an intent's number is
	// never given to another intent.
	Step uint64 `json:"step"`
	Turn int    `json:"turn"`
	// Entry is the transcript id reserved for the step's first output
	// entry; the others follow it.
	Entry uint64 `json:"entry"`
	// CallID, Tool, Args and Replay describe a tool step; Replay is the
	// tool's declaration when the intent was written.
	CallID string          `json:"call_id,omitempty"`
	Tool   string          `json:"tool,omitempty"`
	Args   json.RawMessage `json:"args,omitempty"`
	Replay Replay          `json:"replay,omitempty"`
	// ReplaySafe is the declaration as states written before Replay
	// stored it; read through Declared, never written.
	ReplaySafe bool `json:"replay_safe,omitempty"`
	// Attempt counts recoveries that made the effect again.
	Attempt int       `json:"attempt,omitempty"`
	Owner   string    `json:"owner"`
	Started time.Time `json:"started"`
	// Compaction is set on a model step that summarises part of the
	// context instead of taking the agent's next turn: what it covers, so
	// a recovery makes the same compaction again.
	Compaction *Compaction `json:"compaction,omitempty"`
}

// Declared is the replay declaration the intent stored: Replay, or for
// a state written before it, safe or unsafe by ReplaySafe.
func (p Intent) Declared() Replay {
	switch {
	case p.Replay != "":
		return p.Replay
	case p.ReplaySafe:
		return ReplaySafe
	}
	return ReplayUnsafe
}

// Replay is a tool's replay declaration (DESIGN §8): what recovery may do
// with a call that was interrupted.
type Replay string

// Replay declarations.
const (
	// ReplaySafe: the call may be made again.
	ReplaySafe Replay = "safe"
	// ReplayUnsafe: the call is never made again; an interrupted one gets
	// a synthetic error result.
	ReplayUnsafe Replay = "unsafe"
	// ReplayProbe: the tool can find out whether an interrupted call's
	// effect happened; recovery asks it before making the call again.
	ReplayProbe Replay = "probe"
)

// CallRef is a tool call of the last assistant message still without its
// result.
type CallRef struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Entry is the id of the call's tool_call entry, which holds its args.
	Entry uint64 `json:"entry"`
}

// Steer is a text queued for the next model call's context.
type Steer struct {
	Text string    `json:"text"`
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
}

// State is a session's turn state, stored under <agent>.<session>.state.
// Every write is a compare-and-set on the key's revision, the session's
// fencing token.
//
// Its parts are grouped by what they answer; they are embedded, so the
// stored JSON is one flat object (the field names are the contract) and
// st.Turns reads as well as st.Account.Turns.
type State struct {
	Origin
	Standing
	Program
	Account
	Cursor
	Work
	Window
	Fence
}

// Origin is what a session is and where it came from.
type Origin struct {
	Agent   string `json:"agent"`
	Session string `json:"session"`
	// Parent is the session this one was forked from (same agent), with
	// the last turn copied and the JL_CTL sequence of the fork message.
	Parent   string    `json:"parent,omitempty"`
	ForkTurn int       `json:"fork_turn,omitempty"`
	ForkSeq  uint64    `json:"fork_seq,omitempty"`
	Created  time.Time `json:"created"`
	// Ephemeral marks a session an ephemeral schedule started for one
	// tick.
	Ephemeral bool `json:"ephemeral,omitempty"`
	// Delegation is where a delegated session came from: the session and
	// call that started it, and the chain above. Nil for a session no
	// delegate call started.
	Delegation *Delegation `json:"delegation,omitempty"`
}

// Delegation is the origin of a session a delegate call started, and what
// it owes the call.
type Delegation struct {
	// Parent is the delegating session, "agent/session", and CallID the
	// delegate call this session answers.
	Parent string `json:"parent"`
	CallID string `json:"call_id"`
	// Event is the id of the delegate event, and Seq its JL_IN sequence:
	// the run that event started is the one that answers.
	Event string `json:"event"`
	Seq   uint64 `json:"seq"`
	// Task is the task the parent gave (kept here even when the agent
	// does not read it).
	Task string `json:"task"`
	// Hops is the session's depth below the root (a child of a root is 1)
	// and MaxHops the deepest its tree may go.
	Hops    int `json:"hops"`
	MaxHops int `json:"max_hops"`
	// Path is the chain from the tree's root down to the parent.
	Path []events.Hop `json:"path"`
	// Budget is what the parent let this session spend; DeadlineAt its
	// deadline (the parent's), zero when none.
	Budget     policies.Budget `json:"budget,omitzero"`
	DeadlineAt time.Time       `json:"deadline_at,omitzero"`
	// Run is the session's run that answers (Account.Runs when it
	// started); the carved budget binds it alone.
	Run int `json:"run"`
	// Answered is set once the answer is published to the parent.
	Answered bool `json:"answered,omitempty"`
}

// Child is a session a delegate call of the current run started, whose
// answer the call waits for.
type Child struct {
	CallID  string `json:"call_id"`
	Session string `json:"session"`
	// Cancel is set when the run ended without the child's answer: the
	// reason a cancel is owed to the child (the child leaves the list
	// once the cancel is published).
	Cancel string `json:"cancel,omitempty"`
}

// Standing is where a session stands and what it waits on.
type Standing struct {
	Status Status `json:"status"`
	// Since is when Status last changed.
	Since time.Time `json:"since"`
	// Reason says why a session failed, was cancelled or exceeded its
	// budget.
	Reason string `json:"reason,omitempty"`
	// WaitingFor is what a blocked session waits for: the question of an
	// ask_human call, or the call id of a pending approval; for a waiting
	// one, the sessions it delegated to that have not answered.
	WaitingFor string `json:"waiting_for,omitempty"`
	// BlockedCall is the call a blocked session waits on.
	BlockedCall string `json:"blocked_call,omitempty"`
	// Approval is the approval gate a blocked session waits on (empty when
	// it waits for an answer to ask_human).
	Approval string `json:"approval,omitempty"`
	// Approved is the call an approve let through: its next step runs it
	// without asking the gates again.
	Approved string `json:"approved,omitempty"`
	// WaitUntil is when a blocked session's wait times out (its approval
	// gate's or ask_human's timeout); zero: it waits until answered.
	WaitUntil time.Time `json:"wait_until,omitzero"`
	// OnTimeout is what happens then: deny, cancel or escalate.
	OnTimeout string `json:"on_timeout,omitempty"`
	// Escalated is when the wait timed out and was escalated: it waits
	// on, for whoever picks the escalation up.
	Escalated time.Time `json:"escalated,omitzero"`
	// Queued is what a queued session waits for.
	Queued *Queued `json:"queued,omitempty"`
}

// Slot is a concurrency slot a run holds: one of Limit runs of the agent
// at once, of its pool (Key "") or of one key's.
type Slot struct {
	Key   string `json:"key,omitempty"`
	Limit int    `json:"limit"`
}

// Queued is the slot a queued session waits for and its place in line.
type Queued struct {
	Slot
	// Seq is the JL_IN sequence of the event the session waits to start
	// (or of the one that started the run it waits to continue): sessions
	// get slots in the order of these.
	Seq uint64 `json:"seq"`
	// Run marks a run waiting to continue (resumed, or taken over after
	// its slot lapsed) rather than an event waiting to start one.
	Run bool `json:"run,omitempty"`
	// Was is the status before the session was queued: what it returns
	// to when the event it waits for turns out not to start a run.
	Was Status `json:"was,omitempty"`
}

// Program is the definition a session runs.
type Program struct {
	// DefinitionVersion is the agent's version number (1, 2, 3 …) the
	// session runs.
	DefinitionVersion uint64 `json:"definition_version"`
	// DefinitionRevision is the jl_agents revision that version was read
	// from. A state written before versions were numbered per agent has
	// none; its definition_version is that revision, and DecodeState
	// moves it here (the version number is then unknown, 0, until the
	// session's next run records it).
	DefinitionRevision uint64 `json:"definition_revision"`
	// Rollout is the rollout that put the session on its canary version;
	// empty when the session is not on a canary.
	Rollout string `json:"rollout,omitempty"`
	// Limits are the budget of that definition.
	Limits policies.Budget `json:"limits,omitzero"`
	// Ceilings are its spend limits beyond a run, and SpendKey the limit
	// key of the current (or last) run's event.
	Ceilings policies.Limits `json:"ceilings,omitzero"`
	SpendKey string          `json:"spend_key,omitempty"`
}

// DecodeState reads a stored state. A state written before versions were
// numbered per agent (no definition_revision) named its definition by
// jl_agents revision in definition_version: that moves to
// DefinitionRevision, and DefinitionVersion becomes 0 (unknown).
func DecodeState(b []byte) (State, error) {
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return State{}, err
	}
	if st.DefinitionRevision == 0 && st.DefinitionVersion != 0 {
		var probe struct {
			Revision *uint64 `json:"definition_revision"`
		}
		if !bytes.Contains(b, []byte(`"definition_revision"`)) || json.Unmarshal(b, &probe) == nil && probe.Revision == nil {
			st.DefinitionRevision, st.DefinitionVersion = st.DefinitionVersion, 0
		}
	}
	return st, nil
}

// Account is what a session has consumed, over its life and in its
// current (or last) run.
type Account struct {
	// Runs counts the runs started over the session's life: the current
	// (or last) run is number Runs.
	Runs int `json:"runs,omitempty"`
	// Turns counts model calls made over the session's life (a re-made
	// call counts once); it numbers the turns.
	Turns int `json:"turns"`
	// Steps counts settled steps.
	Steps uint64 `json:"steps"`
	// Usage is the sum over the session's settled model calls.
	Usage model.Usage `json:"usage"`
	// RunTurns and RunUsage are Turns and Usage of the current (or last)
	// run alone: the turn, token and cost budgets apply to them, so a
	// persistent session gets a fresh budget with every run.
	RunTurns int         `json:"run_turns"`
	RunUsage model.Usage `json:"run_usage"`
	// RunToolErrors counts the error results of the current (or last)
	// run's tool calls: a run with any counts as failed for its version's
	// rollout guard.
	RunToolErrors int `json:"run_tool_errors,omitempty"`
	// Delegated is what the sessions this one delegated to consumed, with
	// everything they delegated in turn, over the session's life, and
	// RunDelegated that of the current (or last) run: settled from the
	// children's answers.
	Delegated    Tree `json:"delegated,omitzero"`
	RunDelegated Tree `json:"run_delegated,omitzero"`
	// UnknownUsage counts model calls interrupted before settlement: they
	// may have been billed, their usage is unknown.
	UnknownUsage int `json:"unknown_usage_calls,omitempty"`
	// RunStarted is when the current (or last) run began: the deadline
	// budget counts from it.
	RunStarted time.Time `json:"run_started,omitzero"`
	// RunEnded is when the last run came to rest.
	RunEnded time.Time `json:"run_ended,omitzero"`
}

// Tree is the usage of delegated sessions: their turns and model usage,
// and how many sessions answered.
type Tree struct {
	Sessions int         `json:"sessions"`
	Turns    int         `json:"turns"`
	Usage    model.Usage `json:"usage"`
}

// Add returns the sum of t and u.
func (t Tree) Add(u Tree) Tree {
	return Tree{Sessions: t.Sessions + u.Sessions, Turns: t.Turns + u.Turns, Usage: t.Usage.Add(u.Usage)}
}

// Cursor is how far a session has read and written: its transcript and
// the streams it consumes.
type Cursor struct {
	// NextEntry is the id the next transcript entry gets.
	NextEntry uint64 `json:"next_entry"`
	// InSeq is the JL_IN sequence of the last input recorded; inputs up to
	// it are in the transcript.
	InSeq uint64 `json:"in_seq"`
	// CtlSeq is the JL_CTL sequence of the last control message applied.
	CtlSeq uint64 `json:"ctl_seq"`
	// LastTickID is the last tick consumed: a tick the server fired twice
	// is processed once.
	LastTickID string `json:"last_tick_id,omitempty"`
}

// Work is what the current run has still to do.
type Work struct {
	// Calls are the last assistant message's tool calls without a result,
	// in order.
	Calls []CallRef `json:"calls,omitempty"`
	// Pending is the step whose intent is committed and whose settlement
	// is not.
	Pending *Intent `json:"pending,omitempty"`
	// Steers wait for the next model call.
	Steers []Steer `json:"steers,omitempty"`
	// Tick is the schedule tick that started the current or last run;
	// nil when that run was started by anything else. Its timeout bounds
	// only its own run, until its result is recorded.
	Tick *TickRun `json:"tick,omitempty"`
	// Thread is where the event that started the current or last run
	// belongs (a GitHub issue or pull request, a Slack thread): the
	// default target of the tools that answer there. Nil when it names
	// none.
	Thread *events.Thread `json:"thread,omitempty"`
	// Slot is the concurrency slot the current (or last) run holds while
	// it works; nil when its agent has no concurrency limit.
	Slot *Slot `json:"slot,omitempty"`
	// Children are the sessions the run delegated to whose answers its
	// calls still wait for, and the ones a cancel is still owed to.
	Children []Child `json:"children,omitempty"`
	// RunTask is the digest (events.TaskDigest) of the input that started
	// the current run: the session's task on the delegation paths of the
	// sessions it delegates to, for the cycle rule.
	RunTask string `json:"run_task,omitempty"`
	// Ledger names the run the session's jl_ledger account counts: set
	// when a run delegates or was delegated to, for its steps to report
	// their usage up the tree; empty otherwise.
	Ledger string `json:"ledger,omitempty"`
	// Trace is the W3C traceparent of the current (or last) run's span:
	// a worker that takes the run over, or continues it after an
	// approval, continues its trace. Empty when tracing was off.
	Trace string `json:"trace,omitempty"`
}

// Fence is who wrote the state last, and when.
type Fence struct {
	// Owner is the worker that wrote the state last; Epoch counts the
	// times a worker took the session over.
	Owner   string    `json:"owner,omitempty"`
	Epoch   uint64    `json:"epoch"`
	Updated time.Time `json:"updated"`
}

// TickRun is the schedule tick that started a session's current or last
// run: the worker applies its timeout and records its result in
// jl_schedules when the run rests.
type TickRun struct {
	ID       string `json:"id"`
	Schedule string `json:"schedule"`
	// Slot is the slot that fired.
	Slot time.Time `json:"slot,omitzero"`
	// Deadline is when the tick's timeout ends the run; zero: none.
	Deadline time.Time `json:"deadline,omitzero"`
	// TimedOut marks a run the tick's timeout ended.
	TimedOut bool `json:"timed_out,omitempty"`
	// Result is what was recorded in jl_schedules; empty until then.
	Result string `json:"result,omitempty"`
	// Overlap is the schedule's overlap policy when the tick fired.
	Overlap string `json:"overlap,omitempty"`
	// Superseded marks a run a newer tick cancelled (cancel_previous).
	Superseded bool `json:"superseded,omitempty"`
}

// NewState is the state of a session that has just been created.
func NewState(agent, session string, now time.Time) State {
	return State{
		Origin:   Origin{Agent: agent, Session: session, Created: now},
		Standing: Standing{Status: StatusIdle, Since: now},
		Cursor:   Cursor{NextEntry: 1},
		Fence:    Fence{Updated: now},
	}
}

// SetStatus changes the status and, when it changed, Since; a status
// other than blocked clears what a blocked session waits on (and other
// than waiting, WaitingFor).
func (s *State) SetStatus(st Status, reason string, now time.Time) {
	if s.Status != st {
		s.Since = now
	}
	s.Status = st
	s.Reason = reason
	if st != StatusBlocked {
		s.BlockedCall, s.Approval = "", ""
		s.WaitUntil, s.OnTimeout, s.Escalated = time.Time{}, "", time.Time{}
	}
	if st != StatusBlocked && st != StatusWaiting {
		s.WaitingFor = ""
	}
	if st != StatusQueued {
		s.Queued = nil
	}
}

// Clone returns a copy of s that shares nothing a settlement changes in
// place.
func (s State) Clone() State {
	c := s
	c.Calls = append([]CallRef(nil), s.Calls...)
	c.Steers = append([]Steer(nil), s.Steers...)
	if s.Pending != nil {
		p := *s.Pending
		c.Pending = &p
	}
	if s.Tick != nil {
		t := *s.Tick
		c.Tick = &t
	}
	if s.Slot != nil {
		sl := *s.Slot
		c.Slot = &sl
	}
	if s.Queued != nil {
		q := *s.Queued
		c.Queued = &q
	}
	if s.Pending != nil && s.Pending.Compaction != nil {
		cp := *s.Pending.Compaction
		c.Pending.Compaction = &cp
	}
	c.Children = append([]Child(nil), s.Children...)
	if s.Delegation != nil {
		d := *s.Delegation
		d.Path = append([]events.Hop(nil), s.Delegation.Path...)
		c.Delegation = &d
	}
	return c
}

// TickExpired reports whether the run's tick timeout has passed. A tick
// whose result is recorded has no say over later runs.
func (s State) TickExpired(now time.Time) bool {
	return s.Tick != nil && s.Tick.Result == "" && !s.Tick.Deadline.IsZero() && !now.Before(s.Tick.Deadline)
}
