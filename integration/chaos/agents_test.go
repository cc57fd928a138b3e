package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/ghapp"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
)

// The agents of the run.
const (
	agentReviewer = "reviewer" // GitHub pull request events, a session per PR
	agentRequests = "requests" // user requests, the session the path names
	agentTicker   = "ticker"   // schedule ticks only
	agentLead     = "lead"     // user requests, each delegated to two helpers at once
	agentHelper   = "helper"   // delegations only, a session per delegate call
	agentBurst    = "burst"    // user requests in bursts, debounced into one event per burst
	agentLimited  = "limited"  // user requests, at most limitedRuns runs at once
)

// limitedRuns is the limited agent's concurrency limit.
const limitedRuns = 2

// intervalsOf is the file where the limited agent's tool calls note when
// they began and ended, beside the ledger.
func intervalsOf(ledger string) string { return ledger + ".intervals" }

// timedCommand is ledgerCommand noting, in the intervals file, when the
// call began and ended (nanoseconds of the machine's clock, which every
// process shares): the checker counts the calls that overlapped.
func timedCommand(ledger string) string {
	iv := intervalsOf(ledger)
	return fmt.Sprintf(`echo "begin $JETLOOP_SESSION $JETLOOP_CALL_ID $(date +%%s%%N)" >> '%[1]s' && echo "$JETLOOP_AGENT $JETLOOP_SESSION $JETLOOP_CALL_ID" >> '%[2]s' && sleep 0.3 && echo "end $JETLOOP_SESSION $JETLOOP_CALL_ID $(date +%%s%%N)" >> '%[1]s'`, iv, ledger)
}

// timedScript is script calling timedCommand.
func timedScript(ledger string) policies.Model {
	m := script(ledger)
	for i := range m.Script {
		for j := range m.Script[i].ToolCalls {
			m.Script[i].ToolCalls[j].Args = map[string]any{"command": timedCommand(ledger)}
		}
	}
	return m
}

// repo is the repository of every pull request of the workload.
const repo = "chaos/repo"

// scriptPairs is how many (tool call, answer) pairs each session's script
// holds: a session takes about one pair per event; past the script it
// answers text only.
const scriptPairs = 40

// ledgerCommand is the shell command every tool call of the scripts runs:
// it appends one line naming the call to the ledger shared by every worker,
// then lingers, so that faults land between the effect and its settlement.
// A line that appears twice is a replay-unsafe call that ran twice.
func ledgerCommand(ledger string) string {
	return fmt.Sprintf(`echo "$JETLOOP_AGENT $JETLOOP_SESSION $JETLOOP_CALL_ID" >> '%s' && sleep 0.3`, ledger)
}

// script is a scripted model that, for each event of a session, calls the
// shell tool once and then answers, with delays that keep steps in flight
// long enough for faults to land inside them.
func script(ledger string) policies.Model {
	m := policies.Model{Provider: "scripted", Name: "chaos"}
	for i := range scriptPairs {
		m.Script = append(m.Script,
			policies.ScriptEntry{
				Text:      fmt.Sprintf("Recording step %d.", i),
				ToolCalls: []policies.ScriptToolCall{{Name: "shell", Args: map[string]any{"command": ledgerCommand(ledger)}}},
				Usage:     policies.Usage{InputTokens: 100, OutputTokens: 10},
				Delay:     policies.Duration(150 * time.Millisecond),
			},
			policies.ScriptEntry{
				Text:  fmt.Sprintf("Step %d recorded.", i),
				Usage: policies.Usage{InputTokens: 120, OutputTokens: 5},
				Delay: policies.Duration(100 * time.Millisecond),
			})
	}
	m.Then = &policies.ScriptEntry{Text: "Nothing more to record.", Delay: policies.Duration(50 * time.Millisecond)}
	return m
}

// reviewerScript is script with, beside each ledger call, a comment on
// the pull request (github_comment, against the run's fake GitHub): a
// fault between its POST and its settlement must not post it twice.
func reviewerScript(ledger string) policies.Model {
	m := script(ledger)
	for i := range m.Script {
		if len(m.Script[i].ToolCalls) > 0 {
			m.Script[i].ToolCalls = append(m.Script[i].ToolCalls, policies.ScriptToolCall{
				Name: "github_comment", Args: map[string]any{"body": fmt.Sprintf("Reviewed, step %d.", i/2)}})
		}
	}
	return m
}

// leadScript answers each event with two delegate calls to the helper in
// one answer (fan-out), then, once both answered (fan-in), with text.
func leadScript() policies.Model {
	m := policies.Model{Provider: "scripted", Name: "chaos"}
	for i := range scriptPairs {
		task := func(half string) map[string]any {
			return map[string]any{"agent": agentHelper, "task": fmt.Sprintf("record step %d, %s", i, half),
				"inputs": map[string]any{"note": fmt.Sprintf("step %d", i)}}
		}
		m.Script = append(m.Script,
			policies.ScriptEntry{
				Text:      fmt.Sprintf("Delegating step %d.", i),
				ToolCalls: []policies.ScriptToolCall{{Name: "delegate", Args: task("first half")}, {Name: "delegate", Args: task("second half")}},
				Usage:     policies.Usage{InputTokens: 100, OutputTokens: 10},
				Delay:     policies.Duration(100 * time.Millisecond),
			},
			policies.ScriptEntry{
				Text:  fmt.Sprintf("Step %d delegated and answered.", i),
				Usage: policies.Usage{InputTokens: 120, OutputTokens: 5},
				Delay: policies.Duration(100 * time.Millisecond),
			})
	}
	m.Then = &policies.ScriptEntry{Text: "Nothing more to delegate.", Delay: policies.Duration(50 * time.Millisecond)}
	return m
}

// definitions are the run's agents; without schedules, the ticker stops
// ticking (the cron reconcilers remove its schedule messages). gh is how
// the reviewer reaches GitHub.
func definitions(ledger string, schedules bool, gh *ghapp.Settings) []policies.Definition {
	budget := policies.Budget{MaxTurns: 100_000, Deadline: policies.Duration(5 * time.Minute)}
	defs := []policies.Definition{
		{
			Name: agentReviewer, Model: reviewerScript(ledger), Tools: []string{"shell", "github_comment"}, Budget: budget, GitHub: gh,
			Triggers: []policies.Trigger{{
				Name:    "pr",
				When:    `event.type in ["com.github.pull_request.opened", "com.github.pull_request.synchronize"]`,
				Session: `event.data.repository.full_name + "#" + string(event.data.pull_request.number)`,
			}},
		},
		{
			Name: agentRequests, Model: script(ledger), Tools: []string{"shell"}, Budget: budget,
			Triggers: []policies.Trigger{{Name: "request", When: `event.type == "dev.jetloop.request"`, Session: `event.subject`}},
		},
		{Name: agentTicker, Model: script(ledger), Tools: []string{"shell"}, Budget: budget},
		{
			Name: agentLead, Model: leadScript(), Tools: []string{"delegate"}, Budget: budget,
			Triggers: []policies.Trigger{{Name: "request", When: `event.type == "dev.jetloop.request"`, Session: `event.subject`}},
		},
		{Name: agentHelper, Model: script(ledger), Tools: []string{"shell"}, Budget: budget, Reads: []string{"task", "note"}},
		{
			Name: agentBurst, Model: script(ledger), Tools: []string{"shell"}, Budget: budget,
			Triggers: []policies.Trigger{{Name: "request", When: `event.type == "dev.jetloop.request"`, Session: `event.subject`,
				Debounce: &policies.Debounce{Window: policies.Duration(2 * time.Second), MaxWait: policies.Duration(6 * time.Second)}}},
		},
		{
			Name: agentLimited, Model: timedScript(ledger), Tools: []string{"shell"}, Budget: budget,
			Concurrency: &policies.Concurrency{Limit: limitedRuns},
		},
	}
	if schedules {
		defs[2].Schedules = []policies.Schedule{
			{Name: "fast", Cron: "@every 2s", Session: "ephemeral", Overlap: "skip", Timeout: policies.Duration(30 * time.Second), MaxFailures: 1000},
			{Name: "steady", Cron: "@every 3s", Session: "persistent", Overlap: "queue_one", Timeout: policies.Duration(30 * time.Second), MaxFailures: 1000},
		}
	}
	return defs
}

// storeAgents validates and stores the run's agents in jl_agents.
func storeAgents(ctx context.Context, js jetstream.JetStream, names streams.Names, ledger string, schedules bool, gh *ghapp.Settings) error {
	store, err := policies.NewStore(ctx, js, names)
	if err != nil {
		return err
	}
	for _, d := range definitions(ledger, schedules, gh) {
		if _, err := policies.Compile(d); err != nil {
			return fmt.Errorf("agent %s: %w", d.Name, err)
		}
		if _, err := store.Put(ctx, d, policies.WithSource("chaos")); err != nil {
			return fmt.Errorf("store agent %s: %w", d.Name, err)
		}
	}
	return nil
}
