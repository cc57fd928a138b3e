package policies

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jetloop/jetloop/ghapp"
)

// Definition is one agent: its model, prompt, tools, limits, and the
// triggers, schedules and approval gates that govern it. It is what one
// YAML file declares and what jl_agents stores, versioned.
type Definition struct {
	// Name is the agent's name: letters, digits, '-' and '_'.
	Name        string `yaml:"name" json:"name"`
	Description string `yaml:"description,omitempty" json:"description,omitempty"`
	Model       Model  `yaml:"model" json:"model"`
	// System is the system prompt.
	System string `yaml:"system,omitempty" json:"system,omitempty"`
	// Tools names the tools the agent may call.
	Tools []string `yaml:"tools,omitempty" json:"tools,omitempty"`
	// Reads is what the agent receives when a session delegates to it:
	// the names of the inputs it may be given, and "task" for the task
	// text the delegating session wrote. The runtime refuses a delegation
	// that offers anything else, and the child's context holds only what
	// it reads (a reviewer that reads [diff] sees the diff and nothing of
	// the session that wrote it). Unset: the task and any inputs.
	Reads     []string   `yaml:"reads,omitempty" json:"reads,omitempty"`
	Budget    Budget     `yaml:"budget,omitempty" json:"budget,omitzero"`
	Triggers  []Trigger  `yaml:"triggers,omitempty" json:"triggers,omitempty"`
	Schedules []Schedule `yaml:"schedules,omitempty" json:"schedules,omitempty"`
	Approvals []Approval `yaml:"approvals,omitempty" json:"approvals,omitempty"`
	// AskHuman bounds how long a session waits for the answer to an
	// ask_human call.
	AskHuman *Wait `yaml:"ask_human,omitempty" json:"ask_human,omitempty"`
	// MCPServers are the MCP servers whose admitted tools the agent may
	// call, each mounted as "<server>.<tool>".
	MCPServers []MCPServer `yaml:"mcp_servers,omitempty" json:"mcp_servers,omitempty"`
	// Concurrency bounds how many of the agent's runs go on at once.
	Concurrency *Concurrency `yaml:"concurrency,omitempty" json:"concurrency,omitempty"`
	// Requests says what becomes of a user request addressed to one of
	// the agent's sessions (jetloop send, jl.api.send, POST …/messages):
	// "on" admits it to that session when no trigger admits it first;
	// "triggers" leaves it to the triggers alone, so a request no
	// trigger's when admits is refused; "off" refuses every request.
	// Unset is "triggers" when a trigger's when tests event.type ==
	// "dev.jetloop.request", else "on" (Compiled.RequestsByTriggers).
	Requests string `yaml:"requests,omitempty" json:"requests,omitempty"`
	// Limits are spend ceilings beyond one run (Budget is per run).
	Limits *Limits `yaml:"limits,omitempty" json:"limits,omitempty"`
	// Context is what of a session's history each model call receives:
	// masking, compaction and notes. Without it every call receives the
	// whole history since the session began.
	Context *ContextPolicy `yaml:"context,omitempty" json:"context,omitempty"`
	// Retention removes sessions at rest after an age or beyond a count.
	Retention *Retention `yaml:"retention,omitempty" json:"retention,omitempty"`
	// ApplyToRunning makes a new version apply to existing sessions at
	// their next turn; by default a session keeps the version it started
	// with.
	ApplyToRunning bool `yaml:"apply_to_running,omitempty" json:"apply_to_running,omitempty"`
	// Rollout serves the version this file creates to a share of new
	// sessions only, beside the version serving now (see RolloutSpec). It
	// is an instruction to the store, not part of the version's content:
	// the store keeps it as the agent's rollout and clears it here.
	Rollout *RolloutSpec `yaml:"rollout,omitempty" json:"rollout,omitempty"`
	// GitHub says how the GitHub tools reach GitHub (an App or a token,
	// and the API's base URL); unset fields fall back to the worker's
	// JETLOOP_GITHUB_* environment.
	GitHub *ghapp.Settings `yaml:"github,omitempty" json:"github,omitempty"`

	// Version is the agent's own version number (1, 2, 3 …) and Revision
	// the jl_agents revision it was read from; the store sets both, they
	// are not part of the YAML.
	Version  uint64 `yaml:"-" json:"version,omitempty"`
	Revision uint64 `yaml:"-" json:"revision,omitempty"`
}

// Model selects and configures the model provider.
type Model struct {
	// Provider is "scripted", "anthropic" or "openai".
	Provider string `yaml:"provider" json:"provider"`
	// Name is the provider's model name, e.g. claude-sonnet-4-5.
	Name string `yaml:"name,omitempty" json:"name,omitempty"`
	// BaseURL overrides the provider's endpoint (Ollama, vLLM, llama.cpp).
	BaseURL string `yaml:"base_url,omitempty" json:"base_url,omitempty"`
	// APIKeyEnv names the environment variable holding the API key;
	// default ANTHROPIC_API_KEY or OPENAI_API_KEY.
	APIKeyEnv   string   `yaml:"api_key_env,omitempty" json:"api_key_env,omitempty"`
	MaxTokens   int      `yaml:"max_tokens,omitempty" json:"max_tokens,omitempty"`
	Temperature *float64 `yaml:"temperature,omitempty" json:"temperature,omitempty"`
	Timeout     Duration `yaml:"timeout,omitempty" json:"timeout,omitzero"`
	// Price overrides the price table for budgets, limits and metrics.
	Price *Price `yaml:"price,omitempty" json:"price,omitempty"`
	// Script is the scripted provider's responses, one per model call in
	// order, per session.
	Script []ScriptEntry `yaml:"script,omitempty" json:"script,omitempty"`
	// Then answers every call after the script ran out; default: the last
	// entry's text without tool calls.
	Then *ScriptEntry `yaml:"then,omitempty" json:"then,omitempty"`
	// ScriptScope is where the script starts over: "session" (default: one
	// script for the session's whole life) or "run" (every event or tick
	// starts it again, for scheduled agents that do the same steps each
	// time).
	ScriptScope string `yaml:"script_scope,omitempty" json:"script_scope,omitempty"`
}

// ScriptEntry is one scripted model response.
type ScriptEntry struct {
	Text      string           `yaml:"text,omitempty" json:"text,omitempty"`
	ToolCalls []ScriptToolCall `yaml:"tool_calls,omitempty" json:"tool_calls,omitempty"`
	Usage     Usage            `yaml:"usage,omitempty" json:"usage,omitzero"`
	// Delay simulates model latency.
	Delay Duration `yaml:"delay,omitempty" json:"delay,omitzero"`
	// Error makes the call fail: rate_limited, server_error or timeout.
	Error string `yaml:"error,omitempty" json:"error,omitempty"`
}

// ScriptToolCall is one tool call of a scripted response.
type ScriptToolCall struct {
	Name string         `yaml:"name" json:"name"`
	Args map[string]any `yaml:"args,omitempty" json:"args,omitempty"`
}

// Usage is token usage of one model call.
type Usage struct {
	InputTokens  int64 `yaml:"input_tokens,omitempty" json:"input_tokens,omitempty"`
	OutputTokens int64 `yaml:"output_tokens,omitempty" json:"output_tokens,omitempty"`
}

// Budget are the limits the host enforces before every step.
type Budget struct {
	MaxTurns   int      `yaml:"max_turns,omitempty" json:"max_turns,omitempty"`
	MaxTokens  int64    `yaml:"max_tokens,omitempty" json:"max_tokens,omitempty"`
	Deadline   Duration `yaml:"deadline,omitempty" json:"deadline,omitzero"`
	MaxCostUSD float64  `yaml:"max_cost_usd,omitempty" json:"max_cost_usd,omitempty"`
	// MaxHops bounds how deep a run's delegations go: a run may start
	// sessions MaxHops levels below it at most (DefaultMaxHops when 0);
	// the ceiling a root sets holds for its whole tree.
	MaxHops int `yaml:"max_hops,omitempty" json:"max_hops,omitempty"`
}

// Delegation bounds.
const (
	// DefaultMaxHops is the delegation depth a run allows when its
	// budget sets no max_hops.
	DefaultMaxHops = 4
	// MaxHops bounds budget.max_hops.
	MaxHops = 32
	// ReadTask is the name in reads: of the delegating session's task.
	ReadTask = "task"
)

// ReadsTask reports whether the agent receives a delegation's task text.
func (d Definition) ReadsTask() bool { return d.Reads == nil || slices.Contains(d.Reads, ReadTask) }

// ReadsInput reports whether the agent may receive the input called name.
func (d Definition) ReadsInput(name string) bool {
	return d.Reads == nil || name != ReadTask && slices.Contains(d.Reads, name)
}

// Trigger admits events for the agent.
type Trigger struct {
	Name string `yaml:"name" json:"name"`
	// When is a CEL condition over `event`.
	When string `yaml:"when" json:"when"`
	// Session is a CEL string expression over `event` naming the session.
	Session string `yaml:"session,omitempty" json:"session,omitempty"`
	// Prompt is text leading the turn's message, with {{ expr }}
	// interpolations of CEL over `event`.
	Prompt string `yaml:"prompt,omitempty" json:"prompt,omitempty"`
	// Payload is what of the event the model sees: a CEL expression over
	// `event` giving a map or a string, or "full" for the whole data.
	// Default: a compact projection per GitHub event kind, and the data as
	// it is for other events.
	Payload string `yaml:"payload,omitempty" json:"payload,omitempty"`
	// Rate drops what exceeds it; Throttle delays it instead, so every
	// event runs, spaced out.
	Rate     *Rate     `yaml:"rate,omitempty" json:"rate,omitempty"`
	Throttle *Throttle `yaml:"throttle,omitempty" json:"throttle,omitempty"`
	Debounce *Debounce `yaml:"debounce,omitempty" json:"debounce,omitempty"`
	// OnBusy is what an event this trigger admits does when its session's
	// run is still going: "enqueue" (the default: it runs after), "reject"
	// (it does not run; the decision is recorded), "interrupt" (the
	// running run is stopped and the event's starts) or "steer" (it joins
	// the running run before its next model call).
	OnBusy string `yaml:"on_busy,omitempty" json:"on_busy,omitempty"`
}

// What Requests takes.
const (
	RequestsOn       = "on"
	RequestsOff      = "off"
	RequestsTriggers = "triggers"
)

// On-busy policies of a trigger.
const (
	OnBusyEnqueue   = "enqueue"
	OnBusyReject    = "reject"
	OnBusyInterrupt = "interrupt"
	OnBusySteer     = "steer"
)

// Throttle spaces out the events a trigger admits per key: at most
// PerMinute a minute go to their sessions, the rest wait their turn
// (durably, as delayed messages in JL_IN) instead of being dropped.
type Throttle struct {
	PerMinute float64 `yaml:"per_minute" json:"per_minute"`
	// Key is a CEL string expression over `event`; empty: one queue for
	// the trigger.
	Key string `yaml:"key,omitempty" json:"key,omitempty"`
}

// Rate limits admissions per key.
type Rate struct {
	// Key is a CEL string expression over `event`.
	Key       string  `yaml:"key" json:"key"`
	PerMinute float64 `yaml:"per_minute" json:"per_minute"`
	Burst     int     `yaml:"burst,omitempty" json:"burst,omitempty"`
}

// Debounce coalesces a burst of events for one session into one: the
// session gets the latest event of the burst, with the burst's count,
// once the burst has been quiet for Window.
type Debounce struct {
	// Window is the quiet time after the latest event before the burst
	// fires.
	Window Duration `yaml:"window" json:"window"`
	// MaxWait bounds how long after its first event a burst fires, so a
	// source that is never quiet for Window still gets through; zero:
	// no bound.
	MaxWait Duration `yaml:"max_wait,omitempty" json:"max_wait,omitzero"`
	// Key is a CEL string expression over `event`: events of one session
	// with different keys are separate bursts (one per pull request of a
	// repository's session, say). Empty: one burst per session.
	Key string `yaml:"key,omitempty" json:"key,omitempty"`
}

// Limits are spend ceilings in US dollars beyond one run, on the cost the
// model's prices give (Model.Price, else the list price table): over a
// session's life, per agent per UTC day, and per key per UTC day, the day
// counters shared by every worker. A run does not start once one is
// reached, and a run that reaches one ends before its next model call, as
// budget_exceeded with the reason; the decision is recorded.
type Limits struct {
	SessionUSD     float64 `yaml:"session_usd,omitempty" json:"session_usd,omitempty"`
	AgentUSDPerDay float64 `yaml:"agent_usd_per_day,omitempty" json:"agent_usd_per_day,omitempty"`
	// KeyUSDPerDay applies to the runs whose events give the same Key, a
	// CEL string expression over `event` (the repository, the user).
	KeyUSDPerDay float64 `yaml:"key_usd_per_day,omitempty" json:"key_usd_per_day,omitempty"`
	Key          string  `yaml:"key,omitempty" json:"key,omitempty"`
}

// Price is what a model costs, in US dollars per million tokens, for a
// model the price table does not know or at a negotiated price.
type Price struct {
	InputPerMTok  float64 `yaml:"input_per_mtok" json:"input_per_mtok"`
	OutputPerMTok float64 `yaml:"output_per_mtok" json:"output_per_mtok"`
}

// Concurrency bounds the runs of an agent that go on at once, across every
// worker: a run takes a slot before its first step and gives it back when
// it rests or waits for a human. An event whose run finds no slot free
// waits in JL_IN, its session queued, and runs in the order events came.
type Concurrency struct {
	// Limit is how many runs go on at once: of every session of the
	// agent together, or per key.
	Limit int `yaml:"limit" json:"limit"`
	// Key is a CEL string expression over `event` (the event that starts
	// the run): runs with the same key share the limit, such as one per
	// repository. Empty: all the agent's runs share it.
	Key string `yaml:"key,omitempty" json:"key,omitempty"`
}

// Schedule fires ticks for the agent.
type Schedule struct {
	Name string `yaml:"name" json:"name"`
	// Cron is a NATS schedule pattern: a 6-field cron with seconds,
	// @hourly and the like, or @every 5m.
	Cron     string `yaml:"cron" json:"cron"`
	TimeZone string `yaml:"time_zone,omitempty" json:"time_zone,omitempty"`
	// Session is "persistent" (one session every tick continues) or
	// "ephemeral" (a new session per tick).
	Session string `yaml:"session,omitempty" json:"session,omitempty"`
	// Overlap is "skip", "queue_one" or "cancel_previous".
	Overlap     string   `yaml:"overlap,omitempty" json:"overlap,omitempty"`
	Timeout     Duration `yaml:"timeout,omitempty" json:"timeout,omitzero"`
	MaxFailures int      `yaml:"max_failures,omitempty" json:"max_failures,omitempty"`
	Prompt      string   `yaml:"prompt,omitempty" json:"prompt,omitempty"`
	// CatchupWindow bounds how late a tick may run: a slot missed (during
	// downtime) by more than this is skipped rather than run late. Zero:
	// a missed slot runs however late, once.
	CatchupWindow Duration `yaml:"catchup_window,omitempty" json:"catchup_window,omitzero"`
	// Jitter delays each tick by a random amount below it, stable per
	// slot, so schedules of many agents do not fire at the same instant.
	Jitter Duration `yaml:"jitter,omitempty" json:"jitter,omitzero"`
}

// Approval gates tool calls behind a human decision.
type Approval struct {
	Name string `yaml:"name,omitempty" json:"name,omitempty"`
	// When is a CEL condition over `tool` and `session`.
	When string `yaml:"when" json:"when"`
	// Timeout bounds the wait for approve or deny; OnTimeout says what
	// then happens (default deny). Zero: the call waits until answered.
	Timeout   Duration `yaml:"timeout,omitempty" json:"timeout,omitzero"`
	OnTimeout string   `yaml:"on_timeout,omitempty" json:"on_timeout,omitempty"`
}

// What a wait that times out does (Approval.OnTimeout, Wait.OnTimeout).
const (
	// OnTimeoutDeny answers the call with an error result (a denial, or
	// "no answer") and the run goes on.
	OnTimeoutDeny = "deny"
	// OnTimeoutCancel cancels the session.
	OnTimeoutCancel = "cancel"
	// OnTimeoutEscalate records an escalation (a dev.jetloop.escalation
	// event on jl.audit.escalation.<agent>, a system entry, the status's
	// escalated time) for someone else to pick up; the session waits on.
	OnTimeoutEscalate = "escalate"
)

// Wait bounds a wait for a human.
type Wait struct {
	Timeout   Duration `yaml:"timeout" json:"timeout"`
	OnTimeout string   `yaml:"on_timeout,omitempty" json:"on_timeout,omitempty"`
}

// Duration is a time.Duration written as "90s" or "10m" in YAML and JSON.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// IsZero reports whether d is zero.
func (d Duration) IsZero() bool { return d == 0 }

// MarshalText writes d as "1m30s".
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads a Go duration such as "90s" or "10m".
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("duration %q: want a number with a unit such as 90s or 10m", b)
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", b)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes d as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a string duration.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration %s: want a string such as \"90s\"", b)
	}
	return d.UnmarshalText([]byte(s))
}
