package policies_test

import (
	"encoding"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/policies"
)

// fieldEffects names, for every field a definition takes, the tests that
// show what it does through the runtime (package directory/test name):
// a field the runtime does not act on is refused at apply, not listed
// here. A field added to Definition without an entry fails
// TestEveryFieldHasAnEffect; so does an entry whose test is gone.
var fieldEffects = map[string][]string{
	"name":        {"integration/TestDevRunsExampleAndSurvivesKill"},
	"description": {"cli/TestAgentsAndEventsThroughTheAPI"},
	"system":      {"worker/TestContextPolicyBoundsRequests"},
	"tools":       {"cli/TestApplyChecksAgainstTheRuntime", "integration/TestDevRunsExampleAndSurvivesKill"},
	"reads":       {"integration/TestDevReviewersSeeOnlyTheDiff"},

	"model.provider":              {"model/TestNew"},
	"model.name":                  {"model/TestAnthropicRequestAndResponse", "model/TestScriptedPricesKnownModelNames"},
	"model.base_url":              {"model/TestOpenAILocalServer"},
	"model.api_key_env":           {"model/TestKeyEnvAgreesWithNew", "cli/TestApplyChecksAgainstTheRuntime", "worker/TestMissingModelKeyFailsTheRun"},
	"model.max_tokens":            {"model/TestAnthropicRequestAndResponse", "model/TestOpenAIOfficialUsesMaxCompletionTokens"},
	"model.temperature":           {"model/TestAnthropicRequestAndResponse", "model/TestOpenAIRequestAndResponse"},
	"model.timeout":               {"model/TestHTTPProviderTimeout"},
	"model.price.input_per_mtok":  {"model/TestDefinitionPrice", "worker/TestSessionSpendCeilingStopsTheNextRun"},
	"model.price.output_per_mtok": {"model/TestDefinitionPrice"},
	"model.script_scope":          {"model/TestScriptScopeRunStartsOverAtEveryRun"},

	"model.script.text":                {"model/TestScriptedAnswers"},
	"model.script.tool_calls.name":     {"model/TestScriptedAnswers", "worker/TestRunToDone"},
	"model.script.tool_calls.args":     {"model/TestScriptedToolCallArgsAreCopies", "integration/TestDevRunsExampleAndSurvivesKill"},
	"model.script.usage.input_tokens":  {"worker/TestBudgetIsPerRun"},
	"model.script.usage.output_tokens": {"worker/TestBudgetIsPerRun"},
	"model.script.delay":               {"model/TestScriptedDelayHonoursContext"},
	"model.script.error":               {"model/TestScriptedErrors"},
	// then is one more script entry, answered by the same code once the
	// script ran out.
	"model.then.text":                {"model/TestScriptedAnswers"},
	"model.then.tool_calls.name":     {"model/TestScriptedAnswers"},
	"model.then.tool_calls.args":     {"model/TestScriptedAnswers"},
	"model.then.usage.input_tokens":  {"model/TestScriptedAnswers"},
	"model.then.usage.output_tokens": {"model/TestScriptedAnswers"},
	"model.then.delay":               {"model/TestScriptedAnswers"},
	"model.then.error":               {"model/TestNewScriptedValidation"},

	"budget.max_turns":    {"worker/TestLoopingAgentStopsAtTurnCeiling", "worker/TestBudgetIsPerRun"},
	"budget.max_tokens":   {"worker/TestBudgetIsPerRun"},
	"budget.deadline":     {"worker/TestDeadlineStopsRun"},
	"budget.max_cost_usd": {"worker/TestRunCostBudget", "worker/TestDelegateBudgetIsCarved"},
	"budget.max_hops":     {"worker/TestDelegateRefusals"},

	"triggers.name":                {"admission/TestRecordsAndDeadLetters"},
	"triggers.when":                {"admission/TestDecide", "ingest/TestRequestsAreDecidedByTheAgent"},
	"triggers.session":             {"admission/TestDecide", "policies/TestSessionOfAFieldOfTheEvent"},
	"triggers.prompt":              {"worker/TestTriggerPromptLeadsTheTurn", "policies/TestPromptInterpolation"},
	"triggers.payload":             {"worker/TestTriggerPayload"},
	"triggers.rate.key":            {"admission/TestRateLimitSharedAcrossProcesses"},
	"triggers.rate.per_minute":     {"admission/TestRateLimitSharedAcrossProcesses", "ingest/TestRequestsAreDecidedByTheAgent"},
	"triggers.rate.burst":          {"admission/TestRateTakeOncePerEvent"},
	"triggers.throttle.per_minute": {"admission/TestThrottleQueuesInsteadOfDropping", "integration/TestDevFlowControl"},
	"triggers.throttle.key":        {"admission/TestThrottleQueuesInsteadOfDropping"},
	"triggers.debounce.window":     {"admission/TestDebounceFiresOnceWithLatestData", "integration/TestDevMentionResponderAnswersABurstOnce"},
	"triggers.debounce.max_wait":   {"admission/TestDebounceMaxWaitFiresANeverQuietBurst"},
	"triggers.debounce.key":        {"admission/TestDebounceKeySeparatesBursts"},
	"triggers.on_busy": {"worker/TestOnBusyInterruptStopsTheRunningRun", "worker/TestOnBusySteerJoinsTheRunningRun",
		"worker/TestOnBusyRejectRecordsAndDoesNotRun", "integration/TestDevFlowControl"},

	"schedules.name":           {"schedule/TestReconcileIsIdempotentAndFollowsDefinitions"},
	"schedules.cron":           {"schedule/TestEverySecondFiresOncePerSlot", "schedule/TestBadPatternKeepsTheRunningSchedule"},
	"schedules.time_zone":      {"schedule/TestScheduleMessageCarriesItsTimeZone"},
	"schedules.session":        {"worker/TestPersistentScheduleContinuesOneSession", "worker/TestEphemeralScheduleRunsASessionPerTick"},
	"schedules.overlap":        {"worker/TestOverlapSkipDoesNotPileUp", "worker/TestCancelPreviousEndsTheRunningRun"},
	"schedules.timeout":        {"worker/TestTickTimeoutFailsTheRunNotTheSession"},
	"schedules.max_failures":   {"worker/TestBreakerTripsOnFailingTicksAndResumes"},
	"schedules.prompt":         {"worker/TestPersistentScheduleContinuesOneSession"},
	"schedules.catchup_window": {"integration/TestScheduleCatchupWindow"},
	"schedules.jitter":         {"worker/TestJitterDelaysTicks"},

	"approvals.name":       {"integration/TestDevApprovalGateAndFork"},
	"approvals.when":       {"worker/TestApprovalGate", "integration/TestDevApprovalGateAndFork"},
	"approvals.timeout":    {"worker/TestApprovalTimeoutDenies"},
	"approvals.on_timeout": {"worker/TestApprovalTimeoutDenies"},
	"ask_human.timeout":    {"worker/TestAskHumanTimeout"},
	"ask_human.on_timeout": {"worker/TestAskHumanTimeout"},

	"mcp_servers.name":        {"worker/TestMCPToolSteps"},
	"mcp_servers.url":         {"worker/TestMCPToolSteps"},
	"mcp_servers.command":     {"tools/mcp/TestStdioServerGetsItsEnvAndNotTheWorkers"},
	"mcp_servers.headers_env": {"tools/mcp/TestHeadersEnvReachTheServer"},
	"mcp_servers.env":         {"tools/mcp/TestStdioServerGetsItsEnvAndNotTheWorkers"},
	"mcp_servers.tools":       {"tools/mcp/TestAdmitRefusesWhatCannotBeAdmitted", "integration/TestDevAgentUsesMCPServers"},
	"mcp_servers.replay_safe": {"integration/TestDevKillDuringMCPCall"},
	"mcp_servers.timeout":     {"integration/TestDevAgentUsesMCPServers"},
	"mcp_servers.on_change":   {"tools/mcp/TestChangedDescriptionOnReconnectIsFollowedAndRecorded", "integration/TestDevAgentUsesMCPServers"},

	"concurrency.limit": {"worker/TestConcurrencyLimitAcrossWorkers", "integration/TestDevFlowControl"},
	"concurrency.key":   {"worker/TestConcurrencyKeyAndWaitingHoldNoSlot"},
	"requests":          {"ingest/TestRequestsAreDecidedByTheAgent", "integration/TestDevFlowControl"},

	"limits.session_usd":        {"worker/TestSessionSpendCeilingStopsTheNextRun", "integration/TestDevFlowControl"},
	"limits.agent_usd_per_day":  {"worker/TestDaySpendCeilingsAreShared"},
	"limits.key_usd_per_day":    {"worker/TestDaySpendCeilingsAreShared"},
	"limits.key":                {"worker/TestDaySpendCeilingsAreShared"},
	"context.mask_after_turns":  {"window/TestMaskAfterTurns", "worker/TestContextPolicyBoundsRequests"},
	"context.compact_at_tokens": {"worker/TestContextPolicyBoundsRequests", "integration/TestDevPullRequestSessionStaysBounded"},
	"context.keep_first_turns":  {"window/TestPlan"},
	"context.keep_last_turns":   {"window/TestPlan"},
	"context.notes":             {"tools/TestNotes", "api/TestContextEndpoint"},
	"retention.max_age":         {"worker/TestRetentionNeverTouchesRunningOrWaitingSessions"},
	"retention.max_count":       {"worker/TestRetentionOfEphemeralTicks"},
	"retention.sessions":        {"worker/TestRetentionOfEphemeralTicks"},
	"apply_to_running":          {"policies/TestResolveKeepsSessionsOnTheirVersion", "integration/TestDevApplyToRunningMovesASession"},

	"rollout.version":                 {"policies/TestRolloutFromTheFile"},
	"rollout.percent":                 {"policies/TestRolloutFromTheFile", "integration/TestDevCanaryRolledBackByItsGuard"},
	"rollout.guard.max_failure_rate":  {"policies/TestGuardRollsBackAFailingCanary", "integration/TestDevCanaryRolledBackByItsGuard"},
	"rollout.guard.min_runs":          {"policies/TestGuardRollsBackAFailingCanary"},
	"rollout.guard.compare_to_stable": {"policies/TestGuardJudge"},

	"github.app_id":           {"ghapp/TestResolve", "integration/TestDevGitHubCommentOnceAcrossKill"},
	"github.private_key_file": {"ghapp/TestResolve"},
	"github.private_key_env":  {"ghapp/TestResolve"},
	"github.token_env":        {"ghapp/TestTokenAuth"},
	"github.base_url":         {"ghapp/TestTokenAuth"},
}

// leafFields returns the YAML path of every field of t that holds a
// value rather than fields of its own (indices dropped: "triggers.when").
func leafFields(t reflect.Type, prefix string, out *[]string) {
	text := reflect.TypeFor[encoding.TextUnmarshaler]()
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		path := name
		if prefix != "" {
			path = prefix + "." + name
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && !reflect.PointerTo(ft).Implements(text) {
			leafFields(ft, path, out)
			continue
		}
		*out = append(*out, path)
	}
}

// TestEveryFieldHasAnEffect walks every field of policies.Definition and
// holds it to fieldEffects: each has a test that shows its effect, and
// each such test exists.
func TestEveryFieldHasAnEffect(t *testing.T) {
	var leaves []string
	leafFields(reflect.TypeFor[policies.Definition](), "", &leaves)
	for _, p := range leaves {
		if len(fieldEffects[p]) == 0 {
			t.Errorf("field %s: no test shows what it does; add one and name it in fieldEffects (or refuse the field at apply)", p)
		}
	}
	for p := range fieldEffects {
		if !slices.Contains(leaves, p) {
			t.Errorf("fieldEffects names %s, which Definition does not have", p)
		}
	}
	// Every test named exists in its package.
	have := map[string]map[string]bool{}
	for p, tests := range fieldEffects {
		for _, pt := range tests {
			dir, name := filepath.Split(pt)
			dir = filepath.Clean(dir)
			if have[dir] == nil {
				have[dir] = testsIn(t, filepath.Join("..", dir))
			}
			if !have[dir][name] {
				t.Errorf("field %s: no test %s in %s", p, name, dir)
			}
		}
	}
}

var testFuncRE = regexp.MustCompile(`(?m)^func (Test\w+)\(`)

// testsIn returns the test functions of dir's _test.go files.
func testsIn(t *testing.T, dir string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil || len(files) == 0 {
		t.Errorf("no tests in %s: %v", dir, err)
	}
	out := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range testFuncRE.FindAllSubmatch(b, -1) {
			out[string(m[1])] = true
		}
	}
	return out
}
