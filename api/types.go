package api

import (
	"time"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/dlq"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/schedule"
)

// Endpoint names: the last token of each endpoint's subject,
// jl.api.<endpoint>.
const (
	EndpointAgents    = "agents"
	EndpointApply     = "apply"
	EndpointSend      = "send"
	EndpointStatus    = "status"
	EndpointShow      = "show"
	EndpointSchedules = "schedules"
	EndpointEvents    = "events"
	EndpointDLQ       = "dlq"
	// Every control.Verb is an endpoint too: steer, interrupt, resume,
	// cancel, approve, deny and fork.
)

// Endpoints returns every endpoint name.
func Endpoints() []string {
	out := []string{EndpointAgents, EndpointApply, EndpointSend, EndpointStatus, EndpointShow, EndpointContext}
	for _, v := range control.Verbs() {
		out = append(out, string(v))
	}
	out = append(out, EndpointSchedules, EndpointEvents, EndpointDLQ)
	return append(out, EndpointHistory, EndpointDefinition, EndpointDiff, EndpointRollback, EndpointRollout)
}

// AgentsRequest lists the stored agent definitions.
type AgentsRequest struct{}

// AgentsResponse holds the newest version of every agent.
type AgentsResponse struct {
	Agents []policies.Record `json:"agents"`
}

// File is one agent definition file: its name (for error positions) and
// its YAML.
type File struct {
	Name    string `json:"name"`
	Content string `json:"content"`
}

// ApplyRequest stores definitions: all of them if every one is valid,
// none otherwise (the *Error lists the problems).
type ApplyRequest struct {
	Files []File `json:"files"`
	// By names who applies, for the history (the CLI sends user@host).
	By string `json:"by,omitempty"`
}

// Applied is one stored definition.
type Applied struct {
	Agent   string `json:"agent"`
	Version uint64 `json:"version"`
	// Unchanged: nothing was written: the definition equals the newest
	// stored version (which was kept) and its rollout the one in force.
	Unchanged bool   `json:"unchanged,omitempty"`
	Source    string `json:"source,omitempty"`
	// Created is set when a new version was stored (not when only the
	// rollout changed).
	Created bool   `json:"created,omitempty"`
	Hash    string `json:"hash,omitempty"`
	// Rollout is the agent's rollout in force after the apply.
	Rollout *policies.Rollout `json:"rollout,omitempty"`
	// Summary says what the apply did in one line.
	Summary string `json:"summary,omitempty"`
}

// ApplyResponse lists what was stored, in the order of the files.
type ApplyResponse struct {
	Applied []Applied `json:"applied"`
	// Warnings are what was stored but may not work: a model's API key
	// variable that is not set in the process that applied it.
	Warnings []string `json:"warnings,omitempty"`
}

// SendRequest sends a user message to a session.
type SendRequest struct {
	Agent   string `json:"agent"`
	Session string `json:"session"`
	Text    string `json:"text"`
	// ID is the idempotency key: a message sent twice with one id runs
	// once. Empty: a new id.
	ID string `json:"id,omitempty"`
}

// SendResponse is where the message was stored.
type SendResponse struct {
	Agent   string `json:"agent"`
	Session string `json:"session"`
	// Seq is the message's sequence in JL_IN; the session's state records
	// it as in_seq once handled. 0 for a message that waits, debounced or
	// throttled, to reach the session.
	Seq uint64 `json:"seq"`
	// ID is the message's event id (the idempotency key).
	ID string `json:"id"`
	// Duplicate: a message with this id was sent before; it is not
	// stored again.
	Duplicate bool `json:"duplicate,omitempty"`
	// Debounced and Throttled say how it waits; At is when a throttled
	// message reaches the session.
	Debounced bool      `json:"debounced,omitempty"`
	Throttled bool      `json:"throttled,omitempty"`
	At        time.Time `json:"at,omitzero"`
}

// StatusRequest lists sessions, optionally of one agent or one status.
type StatusRequest struct {
	Agent  string `json:"agent,omitempty"`
	Status string `json:"status,omitempty"`
	// Since: only sessions whose status changed at or after it.
	Since time.Time `json:"since,omitzero"`
	// Limit bounds the page: default 1000, at most 10000.
	Limit int `json:"limit,omitempty"`
	// Cursor continues a listing: the Next of the previous page.
	Cursor uint64 `json:"cursor,omitempty"`
}

// StatusResponse is one page of sessions, read from the status index, in
// the order their status last changed (oldest first). Next is the Cursor
// of the next page; 0 when this is the last. Truncated marks a page cut
// short to fit one response (Next continues it).
type StatusResponse struct {
	Sessions  []record.Summary `json:"sessions"`
	Next      uint64           `json:"next,omitempty"`
	Truncated bool             `json:"truncated,omitempty"`
}

// ShowRequest reads a session's state and transcript from entry From
// (default 1).
type ShowRequest struct {
	Agent   string `json:"agent"`
	Session string `json:"session"`
	From    uint64 `json:"from,omitempty"`
	// Limit bounds the entries read (default DefaultShowLimit, at most
	// MaxShowLimit): a page costs what it holds, whatever the transcript's
	// length.
	Limit int `json:"limit,omitempty"`
}

// ShowResponse is `jetloop show --json`'s object. When the transcript
// would not fit one response, it holds the entries that do, Truncated is
// set and Next is the From of the next request.
type ShowResponse struct {
	record.Transcript
	Truncated bool   `json:"truncated,omitempty"`
	Next      uint64 `json:"next,omitempty"`
}

// ControlRequest is the request of every control endpoint (the verb is
// the endpoint): the fields that verb takes, as in the control message
// (see package control).
type ControlRequest struct {
	Agent   string `json:"agent"`
	Session string `json:"session"`
	Text    string `json:"text,omitempty"`
	CallID  string `json:"call_id,omitempty"`
	// Turn is required for fork and refused for the other verbs.
	Turn *int   `json:"turn,omitempty"`
	As   string `json:"as,omitempty"`
	// ID is the idempotency key: a message sent twice with one id and
	// source is stored once. Empty: a new id.
	ID string `json:"id,omitempty"`
	// Source names the sender; default /jetloop/api.
	Source string `json:"source,omitempty"`
}

// ControlResponse is where the control message was stored.
type ControlResponse struct {
	Agent   string       `json:"agent"`
	Session string       `json:"session"`
	Verb    control.Verb `json:"verb"`
	// Seq is the message's sequence in JL_CTL; the session's state
	// records it as ctl_seq once applied.
	Seq uint64 `json:"seq"`
	ID  string `json:"id"`
	// Duplicate marks the answer to a request with an id already used
	// for the same request: nothing new was published, Seq is the first's.
	Duplicate bool `json:"duplicate,omitempty"`
}

// Schedule actions.
const (
	ScheduleResume  = "resume"
	ScheduleSuspend = "suspend"
	// ScheduleTrigger fires a schedule now, once.
	ScheduleTrigger = "trigger"
	// ScheduleBackfill fires a schedule once for every slot in [From, To).
	ScheduleBackfill = "backfill"
)

// SchedulesRequest lists schedules (no Action), resumes or suspends one,
// or fires one by hand (trigger, backfill).
type SchedulesRequest struct {
	// Action is "" (list), "resume" (close a tripped breaker), "suspend",
	// "trigger" or "backfill".
	Action   string `json:"action,omitempty"`
	Agent    string `json:"agent,omitempty"`
	Schedule string `json:"schedule,omitempty"`
	// From and To bound a backfill: every slot at or after From and
	// before To, at most schedule.MaxBackfill; To no later than now.
	From time.Time `json:"from,omitzero"`
	To   time.Time `json:"to,omitzero"`
	// ID is a trigger's idempotency key: a trigger sent twice with one id
	// fires once. Empty: a new id.
	ID string `json:"id,omitempty"`
}

// SchedulesResponse holds the schedules' health: every schedule for a
// list, the one changed for an action; and the ticks a trigger or a
// backfill published, oldest first.
type SchedulesResponse struct {
	Schedules []schedule.Health `json:"schedules"`
	// NextFires are when the listed schedules fire next, by
	// "agent/schedule" (one suspended or not installed fires never and
	// is not there).
	NextFires map[string]time.Time `json:"next_fires,omitempty"`
	Ticks     []schedule.Fired     `json:"ticks,omitempty"`
}

// EventsRequest reads recent admission decisions.
type EventsRequest struct {
	Agent string `json:"agent,omitempty"`
	// Since: decisions after this time. Zero: the last hour.
	Since time.Time `json:"since,omitzero"`
	// Limit: at most this many, the newest. Default 50, at most 10000.
	Limit int `json:"limit,omitempty"`
}

// EventsResponse holds the decisions, oldest first, and the changes of
// agents' definitions (versions applied or restored, rollouts started,
// changed or ended) over the same period, oldest first, at most Limit.
type EventsResponse struct {
	Records   []admission.Record `json:"records"`
	Changes   []policies.Event   `json:"changes"`
	Truncated bool               `json:"truncated,omitempty"`
	// Skipped counts the JL_AUDIT messages read that held a line of no
	// decision record (admission.ParseRecords: not JSON, null, {}),
	// skipped; SkippedError names the first, by sequence and line.
	Skipped      int    `json:"skipped,omitempty"`
	SkippedError string `json:"skipped_error,omitempty"`
}

// Dead letter actions.
const (
	DLQShow    = "show"
	DLQRedrive = "redrive"
)

// MaxRedrive bounds the letters one redrive request puts back.
const MaxRedrive = 1000

// DLQRequest lists dead letters (no Action), shows one, or redrives some.
type DLQRequest struct {
	// Action is "" (list), "show" or "redrive".
	Action string `json:"action,omitempty"`
	// Seqs are the letters (JL_DLQ sequences) to show (one) or redrive.
	Seqs []uint64 `json:"seqs,omitempty"`
	// Reason, Since and Agent select letters to list, or to redrive when
	// no Seqs are given (a redrive by filter needs at least one of them;
	// it skips the letters that cannot be redriven and goes on, listing
	// them in NotRedriven).
	// With Seqs, they, From and Limit are refused (400), never ignored.
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since,omitzero"`
	Agent  string    `json:"agent,omitempty"`
	// From pages a listing: the Next of the previous page.
	From uint64 `json:"from,omitempty"`
	// Limit bounds a listing (default 50, at most 1000) and a redrive by
	// filter (default and at most 1000).
	Limit int `json:"limit,omitempty"`
}

// DLQResponse holds the letters listed or shown, and what a redrive did.
type DLQResponse struct {
	Letters []dlq.Letter `json:"letters"`
	// Next is the From of the next page of a listing; 0: the last page.
	Next     uint64         `json:"next,omitempty"`
	Redriven []dlq.Redriven `json:"redriven,omitempty"`
	// NotRedriven are the letters a redrive by filter selected and left
	// where they are, as they name nowhere to go back to
	// (dlq.ErrCannotRedrive: a bad_subject letter's subject names no
	// session), each with why. A letter named by sequence is refused
	// instead (409).
	NotRedriven []NotRedriven `json:"not_redriven,omitempty"`
}

// NotRedriven is a letter a redrive by filter did not put back.
type NotRedriven struct {
	// Letter is the letter's JL_DLQ sequence.
	Letter uint64 `json:"letter"`
	// Why says why it cannot be redriven.
	Why string `json:"why"`
}
