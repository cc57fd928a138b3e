package record

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/ledger"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
)

// MaxList bounds the sessions List returns.
const MaxList = 100_000

// Summary is one session as `jetloop status --json` lists it: a contract,
// fields may be added, never renamed.
type Summary struct {
	Agent   string    `json:"agent"`
	Session string    `json:"session"`
	Status  Status    `json:"status"`
	Since   time.Time `json:"since"`
	// Turns, Tokens and CostUSD are the session's lifetime totals.
	Turns   int     `json:"turns"`
	Tokens  int64   `json:"tokens"`
	CostUSD float64 `json:"cost_usd"`
	// RunTurns, RunTokens and RunCostUSD are those of the current (or
	// last) run, which the budget limits apply to.
	RunTurns   int     `json:"run_turns"`
	RunTokens  int64   `json:"run_tokens"`
	RunCostUSD float64 `json:"run_cost_usd"`
	// WaitingFor is set for blocked sessions: the question, or the call id
	// of the approval they wait for; and for queued ones: the concurrency
	// slot.
	WaitingFor string `json:"waiting_for,omitempty"`
	// WaitUntil is when a blocked session's wait times out, and
	// Escalated when it timed out and was escalated.
	WaitUntil time.Time `json:"wait_until,omitzero"`
	Escalated time.Time `json:"escalated,omitzero"`
	Reason    string    `json:"reason,omitempty"`
	// DefinitionVersion is the agent's version the session runs;
	// DefinitionRevision the jl_agents revision it was read from, and
	// Rollout the rollout whose canary it is (see State.Program).
	DefinitionVersion  uint64    `json:"definition_version"`
	DefinitionRevision uint64    `json:"definition_revision,omitempty"`
	Rollout            string    `json:"rollout,omitempty"`
	Updated            time.Time `json:"updated"`
	Owner              string    `json:"owner,omitempty"`
	// Parent is the session this one was forked from.
	Parent string `json:"parent,omitempty"`
	// DelegatedBy is the session whose delegate call DelegatedCall started
	// this one ("agent/session"), and Children the sessions this one's
	// delegate calls wait for.
	DelegatedBy   string   `json:"delegated_by,omitempty"`
	DelegatedCall string   `json:"delegated_call,omitempty"`
	Children      []string `json:"children,omitempty"`
	// SubtreeTurns, SubtreeTokens and SubtreeCostUSD are the lifetime
	// totals with those of every session it delegated to, and theirs, as
	// they answered.
	SubtreeTurns   int     `json:"subtree_turns"`
	SubtreeTokens  int64   `json:"subtree_tokens"`
	SubtreeCostUSD float64 `json:"subtree_cost_usd"`
}

func summarise(st State) Summary {
	sum := summary(st)
	if d := st.Delegation; d != nil {
		sum.DelegatedBy, sum.DelegatedCall = d.Parent, d.CallID
	}
	for _, c := range st.Children {
		if c.Cancel == "" {
			sum.Children = append(sum.Children, c.Session)
		}
	}
	sum.SubtreeTurns = st.Turns + st.Delegated.Turns
	sum.SubtreeTokens = st.Usage.Tokens() + st.Delegated.Usage.Tokens()
	sum.SubtreeCostUSD = st.Usage.CostUSD + st.Delegated.Usage.CostUSD
	return sum
}

func summary(st State) Summary {
	return Summary{
		Agent: st.Agent, Session: st.Session, Status: st.Status, Since: st.Since,
		Turns: st.Turns, Tokens: st.Usage.Tokens(), CostUSD: st.Usage.CostUSD,
		RunTurns: st.RunTurns, RunTokens: st.RunUsage.Tokens(), RunCostUSD: st.RunUsage.CostUSD,
		WaitingFor: st.WaitingFor, WaitUntil: st.WaitUntil, Escalated: st.Escalated,
		Reason: st.Reason, DefinitionVersion: st.DefinitionVersion,
		DefinitionRevision: st.DefinitionRevision, Rollout: st.Rollout,
		Updated: st.Updated, Owner: st.Owner, Parent: st.Parent,
	}
}

// Summaries returns the summaries of the sessions refs that have a
// state, read from their states (one read each).
func Summaries(ctx context.Context, js jetstream.JetStream, names streams.Names, refs []streams.SessionRef) ([]Summary, error) {
	s, err := Open(ctx, js, names)
	if err != nil {
		return nil, err
	}
	out := make([]Summary, 0, len(refs))
	for _, ref := range refs {
		st, _, err := s.Load(ctx, ref)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, summarise(st))
	}
	return out, nil
}

// List returns every session's summary, ordered by agent and session. It
// reads the state keys in one pass of the bucket.
func List(ctx context.Context, js jetstream.JetStream, names streams.Names) ([]Summary, error) {
	kv, err := js.KeyValue(ctx, names.BucketSessions())
	if err != nil {
		return nil, fmt.Errorf("record: open bucket %s: %w", names.BucketSessions(), err)
	}
	w, err := kv.Watch(ctx, names.StateKeys(), jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("record: list sessions: %w", err)
	}
	defer w.Stop()
	var out []Summary
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("record: list sessions: watcher closed")
			}
			if e == nil {
				slices.SortFunc(out, func(a, b Summary) int {
					if c := strings.Compare(a.Agent, b.Agent); c != 0 {
						return c
					}
					return strings.Compare(a.Session, b.Session)
				})
				return out, nil
			}
			st, err := DecodeState(e.Value())
			if err != nil {
				return nil, fmt.Errorf("record: decode %s: %w", e.Key(), err)
			}
			if len(out) >= MaxList {
				return nil, fmt.Errorf("record: list sessions: more than %d", MaxList)
			}
			out = append(out, summarise(st))
		}
	}
}

// Usage is what a session consumed over its life.
type Usage struct {
	Turns        int     `json:"turns"`
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	Tokens       int64   `json:"tokens"`
	CostUSD      float64 `json:"cost_usd"`
	// UnknownUsageCalls counts interrupted model calls that may have been
	// billed without their usage being known.
	UnknownUsageCalls int `json:"unknown_usage_calls"`
}

// RunUsage is what the current (or last) run consumed: the turn, token
// and cost limits apply to it, and the deadline counts from Started.
type RunUsage struct {
	Turns        int       `json:"turns"`
	InputTokens  int64     `json:"input_tokens"`
	OutputTokens int64     `json:"output_tokens"`
	Tokens       int64     `json:"tokens"`
	CostUSD      float64   `json:"cost_usd"`
	Started      time.Time `json:"started,omitzero"`
}

// Budget is a session's limits, its lifetime usage and its run's.
type Budget struct {
	Limits policies.Budget `json:"limits"`
	// Usage is the session's lifetime total.
	Usage Usage `json:"usage"`
	// Run is the current (or last) run's usage, beside the limits.
	Run RunUsage `json:"run"`
	// Delegated is what the sessions it delegated to (and theirs)
	// consumed over its life, and RunDelegated in the current (or last)
	// run, as they answered; Subtree is Usage with Delegated.
	Delegated    Tree  `json:"delegated"`
	RunDelegated Tree  `json:"run_delegated"`
	Subtree      Usage `json:"subtree"`
}

// Transcript is one session as `jetloop show --json` prints it: a
// contract, fields may be added, never renamed.
type Transcript struct {
	Agent      string    `json:"agent"`
	Session    string    `json:"session"`
	Status     Status    `json:"status"`
	Since      time.Time `json:"since"`
	Reason     string    `json:"reason,omitempty"`
	WaitingFor string    `json:"waiting_for,omitempty"`
	// DefinitionVersion, DefinitionRevision and Rollout are as in Summary.
	DefinitionVersion  uint64 `json:"definition_version"`
	DefinitionRevision uint64 `json:"definition_revision,omitempty"`
	Rollout            string `json:"rollout,omitempty"`
	// Parent is the session this one was forked from (same agent), and
	// ForkTurn the last turn copied from it.
	Parent   string `json:"parent,omitempty"`
	ForkTurn int    `json:"fork_turn,omitempty"`
	// Delegation is where a delegated session came from: the delegating
	// session and call, the task, its depth and path, the budget its
	// parent carved, and whether it answered.
	Delegation *Delegation `json:"delegation,omitempty"`
	// Children are the sessions it delegated to: those its delegate calls
	// wait for, from its state (the API lists every one, with its status
	// and usage).
	Children []ChildStatus `json:"children,omitempty"`
	// Ledger is the account of its current (or last) delegating run in
	// jl_ledger, live: what it and every session below it consumed so far
	// (set by the API).
	Ledger *ledger.Account `json:"ledger,omitempty"`
	// Steers are texts queued for the next model call.
	Steers []Steer `json:"steers,omitempty"`
	Budget Budget  `json:"budget"`
	// Pending is the step in flight (or interrupted), if any.
	Pending *Intent `json:"pending,omitempty"`
	// InSeq is the JL_IN sequence of the last input the session recorded
	// (a message sent with that sequence or before has been handled), and
	// CtlSeq that of the last control message applied.
	InSeq  uint64 `json:"in_seq"`
	CtlSeq uint64 `json:"ctl_seq"`
	// Owner is the worker that wrote the state last.
	Owner string `json:"owner,omitempty"`
	// Entries is how many entries the transcript has; Transcript may hold
	// a page of them (Page).
	Entries uint64 `json:"entries"`
	// Window is where the live context starts (after a compaction).
	Window     *Window `json:"window,omitempty"`
	Transcript []Entry `json:"transcript"`
}

// ChildStatus is a session another delegated to, as show lists it.
type ChildStatus struct {
	// Session is the child, "agent/session", and CallID the delegate call
	// it answers.
	Session string `json:"session"`
	CallID  string `json:"call_id"`
	// Answered: its answer settled the call.
	Answered bool `json:"answered"`
	// Status, Since, WaitingFor, Reason and the subtree totals are the
	// child's, set by readers that look it up (the API).
	Status         Status    `json:"status,omitempty"`
	Since          time.Time `json:"since,omitzero"`
	WaitingFor     string    `json:"waiting_for,omitempty"`
	Reason         string    `json:"reason,omitempty"`
	SubtreeTurns   int       `json:"subtree_turns"`
	SubtreeTokens  int64     `json:"subtree_tokens"`
	SubtreeCostUSD float64   `json:"subtree_cost_usd"`
}

// awaitedChildren are the children st's delegate calls wait for.
func awaitedChildren(st State) []ChildStatus {
	var out []ChildStatus
	for _, c := range st.Children {
		if c.Cancel == "" {
			out = append(out, ChildStatus{Session: c.Session, CallID: c.CallID})
		}
	}
	return out
}

// Show returns a session's state and whole transcript, consistent with
// each other (a settlement lands whole or not at all).
func Show(ctx context.Context, js jetstream.JetStream, names streams.Names, ref streams.SessionRef) (Transcript, error) {
	s, err := Open(ctx, js, names)
	if err != nil {
		return Transcript{}, err
	}
	st, rev, err := s.Load(ctx, ref)
	if err != nil {
		return Transcript{}, err
	}
	entries, err := s.Entries(ctx, ref, st.NextEntry, rev)
	if err != nil {
		return Transcript{}, err
	}
	return transcriptOf(st, entries), nil
}

// Page returns a session's state and at most limit of its transcript
// entries from id from on, read by key: what it costs does not grow with
// the transcript. Entries summarised by a compaction are marked
// (Entry.Context).
func Page(ctx context.Context, js jetstream.JetStream, names streams.Names, ref streams.SessionRef, from uint64, limit int) (Transcript, error) {
	s, err := Open(ctx, js, names)
	if err != nil {
		return Transcript{}, err
	}
	st, rev, err := s.Load(ctx, ref)
	if err != nil {
		return Transcript{}, err
	}
	from = max(from, 1)
	var entries []Entry
	if from < st.NextEntry && limit > 0 {
		to := min(st.NextEntry-1, from+uint64(limit)-1)
		if entries, err = s.ReadSpans(ctx, ref, []Span{{From: from, To: to}}, rev); err != nil {
			return Transcript{}, err
		}
	}
	return transcriptOf(st, entries), nil
}

// Marks of Entry.Context.
const (
	// ContextSummarised: a summary stands for the entry in the context.
	ContextSummarised = "summarised"
	// ContextMasked: the next model call sees a placeholder for the result.
	ContextMasked = "masked"
)

// transcriptOf is the Transcript of st with entries, the summarised ones
// marked.
func transcriptOf(st State, entries []Entry) Transcript {
	if entries == nil {
		entries = []Entry{}
	}
	var win *Window
	if st.Summary != 0 {
		w := st.Window
		win = &w
		for i, e := range entries {
			if e.ID >= st.HeadEnd && (e.ID < st.From || e.Kind == KindSummary && e.ID != st.Summary) {
				entries[i].Context = ContextSummarised
			}
		}
	}
	return Transcript{
		Entries: st.NextEntry - 1, Window: win,
		Agent: st.Agent, Session: st.Session, Status: st.Status, Since: st.Since,
		Reason: st.Reason, WaitingFor: st.WaitingFor, DefinitionVersion: st.DefinitionVersion,
		DefinitionRevision: st.DefinitionRevision, Rollout: st.Rollout,
		Parent: st.Parent, ForkTurn: st.ForkTurn, Steers: st.Steers,
		Budget: Budget{Limits: st.Limits, Usage: Usage{
			Turns: st.Turns, InputTokens: st.Usage.InputTokens, OutputTokens: st.Usage.OutputTokens,
			Tokens: st.Usage.Tokens(), CostUSD: st.Usage.CostUSD, UnknownUsageCalls: st.UnknownUsage,
		}, Run: RunUsage{
			Turns: st.RunTurns, InputTokens: st.RunUsage.InputTokens, OutputTokens: st.RunUsage.OutputTokens,
			Tokens: st.RunUsage.Tokens(), CostUSD: st.RunUsage.CostUSD, Started: st.RunStarted,
		}, Delegated: st.Delegated, RunDelegated: st.RunDelegated, Subtree: Usage{
			Turns: st.Turns + st.Delegated.Turns, InputTokens: st.Usage.InputTokens + st.Delegated.Usage.InputTokens,
			OutputTokens: st.Usage.OutputTokens + st.Delegated.Usage.OutputTokens,
			Tokens:       st.Usage.Tokens() + st.Delegated.Usage.Tokens(), CostUSD: st.Usage.CostUSD + st.Delegated.Usage.CostUSD,
			UnknownUsageCalls: st.UnknownUsage,
		}},
		Delegation: st.Delegation, Children: awaitedChildren(st),
		Pending: st.Pending,
		InSeq:   st.InSeq, CtlSeq: st.CtlSeq, Owner: st.Owner,
		Transcript: entries,
	}
}

// Update is one change Follow reports: a transcript entry, or a state.
type Update struct {
	Entry *Entry
	State *State
}

// Follow calls fn with the session's transcript entries in order, from the
// first, and with its state whenever it changes, until ctx ends or fn
// returns an error (which Follow returns; ErrStop ends it cleanly). A
// session that does not exist yet is waited for.
func Follow(ctx context.Context, js jetstream.JetStream, names streams.Names, ref streams.SessionRef, fn func(Update) error) error {
	kv, err := js.KeyValue(ctx, names.BucketSessions())
	if err != nil {
		return fmt.Errorf("record: open bucket %s: %w", names.BucketSessions(), err)
	}
	w, err := kv.Watch(ctx, names.SessionKeys(ref), jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("record: follow %s: %w", ref, err)
	}
	defer w.Stop()
	stateKey, logKeys := names.StateKey(ref), ref.Key()+".log."
	var lastEntry uint64
	// Entries seen before the state that names them, by id: a later
	// version of an id replaces the earlier (an entry left over by a
	// crashed writer is replaced before a state names its id).
	pending := map[uint64]Entry{}
	var limit uint64 = 1
	flush := func() error {
		var ids []uint64
		for id := range pending {
			if id < limit {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		for _, id := range ids {
			e := pending[id]
			delete(pending, id)
			lastEntry = id
			if err := fn(Update{Entry: &e}); err != nil {
				return err
			}
		}
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("record: follow %s: watcher closed", ref)
			}
			if e == nil {
				continue
			}
			var err error
			if e.Key() == stateKey {
				st, err := DecodeState(e.Value())
				if err != nil {
					return fmt.Errorf("record: decode %s: %w", e.Key(), err)
				}
				limit = st.NextEntry
				if err = flush(); err == nil {
					err = fn(Update{State: &st})
				}
			} else if strings.HasPrefix(e.Key(), logKeys) {
				// (The session's other keys, its notes and children, are
				// not entries.)
				var en Entry
				if err := json.Unmarshal(e.Value(), &en); err != nil {
					return fmt.Errorf("record: decode %s: %w", e.Key(), err)
				}
				if en.ID > lastEntry {
					pending[en.ID] = en
				}
				err = flush()
			}
			if err == ErrStop {
				return nil
			}
			if err != nil {
				return err
			}
		}
	}
}

// ErrStop, returned by a Follow callback, ends Follow without an error.
var ErrStop = fmt.Errorf("stop following")
