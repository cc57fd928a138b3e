package policies

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/model/prices"
	"github.com/jetloop/jetloop/schedule/pattern"
	"github.com/jetloop/jetloop/tools"
)

// Compiled is a validated definition with every rule compiled. It is
// immutable and safe for concurrent use.
type Compiled struct {
	Definition Definition
	Triggers   []*CompiledTrigger
	Approvals  []*CompiledApproval
	// ConcurrencyKey is the concurrency limit's key; nil without a limit
	// or a key.
	ConcurrencyKey *Expr
	// LimitKey is the key of the spend limit per key; nil without one.
	LimitKey *Expr

	// file and loc place the problems the store finds (a rollout that
	// cannot start) in the file Parse read.
	file string
	loc  locate
}

// requestTriggerRE matches a when that tests for the request type: the
// trigger is one for requests.
var requestTriggerRE = regexp.MustCompile(`event\.type\s*==\s*["']` + regexp.QuoteMeta(events.TypeRequest) + `["']|["']` +
	regexp.QuoteMeta(events.TypeRequest) + `["']\s*==\s*event\.type`)

// RequestsByTriggers reports whether only the triggers decide the user
// requests addressed to the agent, so that one no trigger admits is
// refused: with requests: triggers, and by default (requests unset) when
// a trigger's when tests event.type == "dev.jetloop.request": that
// trigger is the agent's word on requests, and a request it refuses is
// not run past it.
func (c *Compiled) RequestsByTriggers() bool {
	switch c.Definition.Requests {
	case RequestsTriggers:
		return true
	case "":
		for _, t := range c.Definition.Triggers {
			if requestTriggerRE.MatchString(t.When) {
				return true
			}
		}
	}
	return false
}

// Position returns the line and column of a field path such as
// "mcp_servers[0].tools[1]" in the file the definition was parsed from,
// for problems found after parsing; zeros when unknown.
func (c *Compiled) Position(field string) (line, col int) {
	if c == nil || c.loc == nil {
		return 0, 0
	}
	return c.loc(field, 0, 0)
}

// fieldError is a problem of field, placed in the file the definition
// came from when Parse read it.
func (c *Compiled) fieldError(field string, err error) error {
	e := &Error{File: c.file, Field: field, Err: err}
	if c.loc != nil {
		e.Line, e.Column = c.loc(field, 0, 0)
	}
	return e
}

// CompiledTrigger is a trigger with its expressions compiled.
type CompiledTrigger struct {
	Trigger
	// When is the admission condition.
	When *Expr
	// Session names the session; nil when the trigger has none (see
	// DefaultSession).
	Session *Expr
	// RateKey is the rate limit key; nil without a rate limit.
	RateKey *Expr
	// DebounceKey names a trigger's burst within the session; nil when
	// the session has one burst.
	DebounceKey *Expr
	// Prompt renders the turn's leading text; nil without one.
	Prompt  *Prompt
	payload *Expr
	// ThrottleKey is the throttle's key; nil without one.
	ThrottleKey *Expr
}

// CompiledApproval is an approval gate with its condition compiled.
type CompiledApproval struct {
	Approval
	When *Expr
}

// Rule names the trigger in decisions and dead letters: "agent/trigger".
func (t *CompiledTrigger) Rule(agent string) string { return agent + "/" + t.Name }

// Admits reports whether the trigger's condition holds for vars.
func (t *CompiledTrigger) Admits(ctx context.Context, vars Vars) (bool, error) {
	return t.When.EvalBool(ctx, vars)
}

// SessionOf returns the session an admitted event goes to: the trigger's
// session expression, else DefaultSession.
func (t *CompiledTrigger) SessionOf(ctx context.Context, vars Vars) (string, error) {
	if t.Session == nil {
		return DefaultSession(vars), nil
	}
	s, err := t.Session.EvalString(ctx, vars)
	if err != nil {
		return "", err
	}
	if s == "" {
		return "", fmt.Errorf("%w: session %s is empty", ErrEval, t.Session)
	}
	return s, nil
}

// DefaultSession is the session of a trigger without a session
// expression: the event's jlsession extension, else its subject, else its
// id (a fresh session per event).
func DefaultSession(vars Vars) string {
	ev := vars.Event()
	if exts, ok := ev["extensions"].(map[string]any); ok {
		if s, ok := exts["jlsession"].(string); ok && s != "" {
			return s
		}
	}
	if s, _ := ev["subject"].(string); s != "" {
		return s
	}
	s, _ := ev["id"].(string)
	return s
}

// RenderPrompt renders the trigger's prompt over vars; "" when the
// trigger has none.
func (t *CompiledTrigger) RenderPrompt(ctx context.Context, vars Vars) (string, error) {
	if t.Prompt == nil {
		return "", nil
	}
	out, err := t.Prompt.Render(ctx, vars)
	if err != nil {
		return "", fmt.Errorf("%w: prompt of trigger %s: %w", ErrEval, t.Name, err)
	}
	return out, nil
}

// NeedsApproval returns the first approval gate whose condition holds for
// the tool call in the session, by its name (or "approvals[i]" when it has
// none).
func (c *Compiled) NeedsApproval(ctx context.Context, tool ToolCall, s SessionInfo) (gate string, need bool, err error) {
	vars := ApprovalVars(tool, s)
	for i, a := range c.Approvals {
		ok, err := a.When.EvalBool(ctx, vars)
		if err != nil {
			return ApprovalName(a.Approval, i), false, err
		}
		if ok {
			return ApprovalName(a.Approval, i), true, nil
		}
	}
	return "", false, nil
}

// ApprovalName is the gate name of approvals[i]: its name, or
// "approvals[i]" when it has none. NeedsApproval returns it.
func ApprovalName(a Approval, i int) string {
	if a.Name != "" {
		return a.Name
	}
	return fmt.Sprintf("approvals[%d]", i)
}

// Compile validates d and compiles its rules. Errors wrap ErrInvalid and
// are *Error values (joined when there are several) naming the field; they
// carry no line, as d has no file. Use Parse for YAML.
//
// Compile is what readers of stored definitions need; Check adds what a
// definition must also pass before it is stored.
func Compile(d Definition) (*Compiled, error) {
	c := &checker{}
	out := compile(d, c)
	return c.result(out)
}

// Check is Compile plus the checks against this runtime that a new
// definition must pass before it is stored: every tool it lists is one
// workers run (tools.Names). A stored version that lists a tool a later
// release no longer has still compiles and serves; applying it again is
// refused.
func Check(d Definition) (*Compiled, error) {
	c := &checker{}
	out := compile(d, c)
	checkRuntime(c, d)
	return c.result(out)
}

// checkRuntime refuses what this runtime cannot do for d.
func checkRuntime(c *checker, d Definition) {
	for i, t := range d.Tools {
		if strings.Contains(t, ".") {
			// A mounted MCP tool: known when mcp_servers admits it (checkMCP).
			continue
		}
		if strings.TrimSpace(t) != "" && !slices.Contains(knownTools(), t) {
			c.addf(fmt.Sprintf("tools[%d]", i), "unknown tool %q: the tools are %s", t, strings.Join(knownTools(), ", "))
		}
	}
	checkPriced(c, d)
}

// checkPriced refuses a spend limit or cost budget that could never be
// reached: one on a model that costs nothing because neither the price
// table (package prices) nor model.price prices it.
func checkPriced(c *checker, d Definition) {
	if d.Model.Price != nil {
		return
	}
	if _, ok := prices.Lookup(d.Model.Name); ok {
		return
	}
	var l Limits
	if d.Limits != nil {
		l = *d.Limits
	}
	for _, f := range []struct {
		name string
		usd  float64
	}{{"budget.max_cost_usd", d.Budget.MaxCostUSD}, {"limits.session_usd", l.SessionUSD}, {"limits.agent_usd_per_day", l.AgentUSDPerDay}, {"limits.key_usd_per_day", l.KeyUSDPerDay}} {
		if f.usd > 0 {
			c.addf(f.name, "%s model %q has no price in the price table, so its calls cost 0 and the limit is never reached: give model.price {input_per_mtok, output_per_mtok} (or a model name the table prices)", d.Model.Provider, d.Model.Name)
			return
		}
	}
}

func (c *checker) result(out *Compiled) (*Compiled, error) {
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	return out, nil
}

// locate returns the position in the source of a field path, or, when
// exprLine > 0, of that 1-based line and column within the field's value
// (a CEL expression); zeros when unknown.
type locate func(field string, exprLine, exprCol int) (line, col int)

var (
	nameRE     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
	providers  = []string{"scripted", "anthropic", "openai"}
	scriptErrs = []string{"rate_limited", "server_error", "timeout"}
	sessModes  = []string{"", "persistent", "ephemeral"}
	overlaps   = []string{"", "skip", "queue_one", "cancel_previous"}
	onBusies   = []string{"", OnBusyEnqueue, OnBusyReject, OnBusyInterrupt, OnBusySteer}
)

// MaxConcurrency bounds a concurrency limit: the slots of one key are one
// record that every run's start and end rewrites.
const MaxConcurrency = 1000

// knownTools are the names a definition's tools may list: what workers
// run (package tools keeps the list).
var knownTools = sync.OnceValue(tools.Names)

type checker struct {
	loc  locate
	errs []error
}

func (c *checker) add(field string, err error) {
	e := &Error{Field: field, Err: err}
	if c.loc != nil {
		e.Line, e.Column = c.loc(field, 0, 0)
	}
	c.errs = append(c.errs, e)
}

func (c *checker) addf(field, format string, args ...any) {
	c.add(field, fmt.Errorf(format, args...))
}

func (c *checker) expr(field, src string, kind exprKind) *Expr {
	x, err := compileExpr(src, kind)
	if err == nil {
		return x
	}
	e := &Error{Field: field, Err: err}
	if c.loc != nil {
		e.Line, e.Column = c.loc(field, 0, 0)
		var xe *exprError
		if errors.As(err, &xe) && xe.line > 0 {
			if line, col := c.loc(field, xe.line, xe.col); line > 0 {
				e.Line, e.Column = line, col
			}
		}
	}
	c.errs = append(c.errs, e)
	return nil
}

// prompt compiles a prompt, positioning a fault like expr does.
func (c *checker) prompt(field, src string) *Prompt {
	p, err := compilePrompt(src)
	if err == nil {
		return p
	}
	e := &Error{Field: field, Err: err}
	if c.loc != nil {
		e.Line, e.Column = c.loc(field, 0, 0)
		var xe *exprError
		if errors.As(err, &xe) && xe.line > 0 {
			if line, col := c.loc(field, xe.line, xe.col); line > 0 {
				e.Line, e.Column = line, col
			}
		}
	}
	c.errs = append(c.errs, e)
	return nil
}

func oneOf(v string, allowed []string) bool {
	for _, a := range allowed {
		if v == a {
			return true
		}
	}
	return false
}

// CheckName reports whether name can name an agent, a trigger or a
// schedule: 1 to 64 letters, digits, '-' and '_', starting with a letter or
// digit.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: name %q: want 1 to 64 letters, digits, '-' and '_', starting with a letter or digit", ErrInvalid, name)
	}
	return nil
}

// checkReads checks the names of an agent's reads:.
func checkReads(c *checker, reads []string) {
	if reads != nil && len(reads) == 0 {
		c.addf("reads", "empty: name what the agent receives when delegated to (inputs, and %q for the task), or leave reads out to receive the task and any input", ReadTask)
	}
	if len(reads) > tools.MaxInputs+1 {
		c.addf("reads", "%d names: at most %d inputs and %q", len(reads), tools.MaxInputs, ReadTask)
	}
	seen := map[string]bool{}
	for i, r := range reads {
		f := fmt.Sprintf("reads[%d]", i)
		switch {
		case !tools.InputName.MatchString(r):
			c.addf(f, "%q: want an input name of 1 to 64 letters, digits, '-' and '_'", r)
		case seen[r]:
			c.addf(f, "%q listed twice", r)
		}
		seen[r] = true
	}
}

// compile validates d and compiles its rules, adding every problem to c.
func compile(d Definition, c *checker) *Compiled {
	out := &Compiled{Definition: d}
	switch {
	case d.Name == "":
		c.addf("name", "required")
	case !nameRE.MatchString(d.Name):
		c.addf("name", "%q: want 1 to 64 letters, digits, '-' and '_', starting with a letter or digit", d.Name)
	}
	checkModel(c, d.Model)
	seen := map[string]bool{}
	for i, t := range d.Tools {
		f := fmt.Sprintf("tools[%d]", i)
		switch {
		case strings.TrimSpace(t) == "":
			c.addf(f, "empty tool name")
		case seen[t]:
			c.addf(f, "tool %q listed twice", t)
		}
		seen[t] = true
	}
	checkMCP(c, d)
	if d.GitHub != nil {
		if err := d.GitHub.Validate(); err != nil {
			c.add("github", err)
		}
	}
	b := d.Budget
	if b.MaxTurns < 0 || b.MaxTokens < 0 || b.MaxCostUSD < 0 || b.MaxHops < 0 {
		c.addf("budget", "limits must not be negative")
	}
	if b.MaxHops > MaxHops {
		c.addf("budget.max_hops", "%d: want 0 (default %d) to %d delegation levels", b.MaxHops, DefaultMaxHops, MaxHops)
	}
	checkReads(c, d.Reads)
	seen = map[string]bool{}
	for i, t := range d.Triggers {
		f := fmt.Sprintf("triggers[%d]", i)
		ct := &CompiledTrigger{Trigger: t}
		switch {
		case t.Name == "":
			c.addf(f+".name", "required")
		case !nameRE.MatchString(t.Name):
			c.addf(f+".name", "%q: want letters, digits, '-' and '_'", t.Name)
		case seen[t.Name]:
			c.addf(f+".name", "trigger %q declared twice", t.Name)
		}
		seen[t.Name] = true
		if t.When == "" {
			c.addf(f+".when", "required: a CEL condition over event")
		} else {
			ct.When = c.expr(f+".when", t.When, condOverEvent)
		}
		if t.Session != "" {
			ct.Session = c.expr(f+".session", t.Session, stringOverEvent)
		}
		if t.Prompt != "" {
			ct.Prompt = c.prompt(f+".prompt", t.Prompt)
		}
		if t.Payload != "" && t.Payload != PayloadFull {
			ct.payload = c.expr(f+".payload", t.Payload, payloadOverEvent)
		}
		if r := t.Rate; r != nil {
			if r.Key == "" {
				c.addf(f+".rate.key", "required: a CEL string expression over event")
			} else {
				ct.RateKey = c.expr(f+".rate.key", r.Key, stringOverEvent)
			}
			if !(r.PerMinute > 0) || r.PerMinute > 1e6 {
				c.addf(f+".rate.per_minute", "%v: want more than 0 and at most 1000000", r.PerMinute)
			}
			if r.Burst < 0 || r.Burst > 1e6 {
				c.addf(f+".rate.burst", "%d: want 0 (default: per_minute) to 1000000", r.Burst)
			}
		}
		if th := t.Throttle; th != nil {
			if !(th.PerMinute > 0) || th.PerMinute > 1e6 {
				c.addf(f+".throttle.per_minute", "%v: want more than 0 and at most 1000000", th.PerMinute)
			}
			if th.Key != "" {
				ct.ThrottleKey = c.expr(f+".throttle.key", th.Key, stringOverEvent)
			}
			if t.Debounce != nil {
				c.addf(f+".throttle", "a trigger takes throttle or debounce, not both: a debounced burst is one event already")
			}
		}
		if !oneOf(t.OnBusy, onBusies) {
			c.addf(f+".on_busy", "%q: want enqueue, reject, interrupt or steer", t.OnBusy)
		}
		if db := t.Debounce; db != nil {
			if db.Window.D() < MinDebounce || db.Window.D() > MaxDebounce {
				c.addf(f+".debounce.window", "%s: want %s to %s", db.Window.D(), MinDebounce, MaxDebounce)
			}
			if w := db.MaxWait.D(); w != 0 && (w < db.Window.D() || w > MaxDebounceWait) {
				c.addf(f+".debounce.max_wait", "%s: want at least the window (%s) and at most %s", w, db.Window.D(), MaxDebounceWait)
			}
			if db.Key != "" {
				ct.DebounceKey = c.expr(f+".debounce.key", db.Key, stringOverEvent)
			}
		}
		out.Triggers = append(out.Triggers, ct)
	}
	seen = map[string]bool{}
	for i, s := range d.Schedules {
		f := fmt.Sprintf("schedules[%d]", i)
		switch {
		case s.Name == "":
			c.addf(f+".name", "required")
		case !nameRE.MatchString(s.Name):
			c.addf(f+".name", "%q: want letters, digits, '-' and '_'", s.Name)
		case seen[s.Name]:
			c.addf(f+".name", "schedule %q declared twice", s.Name)
		}
		seen[s.Name] = true
		switch {
		case strings.TrimSpace(s.Cron) == "":
			c.addf(f+".cron", "required: a 5-field cron (minute first), a 6-field cron (seconds first), @hourly and the like, or @every 5m")
		default:
			// The reconciler's own parser: a pattern accepted here is one
			// it installs.
			if _, err := pattern.Parse(s.Cron, s.TimeZone, d.Name+"/"+s.Name); err != nil {
				field := f + ".cron"
				if s.TimeZone != "" && strings.Contains(err.Error(), "time zone") {
					field = f + ".time_zone"
				}
				c.add(field, err)
			}
		}
		if !oneOf(s.Session, sessModes) {
			c.addf(f+".session", "%q: want persistent or ephemeral", s.Session)
		}
		if !oneOf(s.Overlap, overlaps) {
			c.addf(f+".overlap", "%q: want skip, queue_one or cancel_previous", s.Overlap)
		}
		if s.MaxFailures < 0 {
			c.addf(f+".max_failures", "must not be negative")
		}
		switch {
		case s.CatchupWindow < 0:
			c.addf(f+".catchup_window", "must not be negative")
		case s.CatchupWindow > 0 && s.CatchupWindow.D() < time.Second:
			c.addf(f+".catchup_window", "%s: want at least 1s (slots fire on whole seconds)", s.CatchupWindow.D())
		}
		switch {
		case s.Jitter < 0:
			c.addf(f+".jitter", "must not be negative")
		case s.Jitter > 0 && s.Jitter.D() < time.Second:
			c.addf(f+".jitter", "%s: want at least 1s (a delayed tick fires on a whole second)", s.Jitter.D())
		case s.Jitter > 0:
			if p, err := pattern.Parse(s.Cron, s.TimeZone, d.Name+"/"+s.Name); err == nil {
				if every := p.Every(); every > 0 && s.Jitter.D() >= every {
					c.addf(f+".jitter", "%s: want less than the interval of %s, or ticks overtake each other", s.Jitter.D(), p.Expr)
				}
			}
		}
	}
	for i, a := range d.Approvals {
		f := fmt.Sprintf("approvals[%d]", i)
		ca := &CompiledApproval{Approval: a}
		if a.When == "" {
			c.addf(f+".when", "required: a CEL condition over tool and session")
		} else {
			ca.When = c.expr(f+".when", a.When, condOverTool)
		}
		checkWait(c, f, a.Timeout, a.OnTimeout)
		out.Approvals = append(out.Approvals, ca)
	}
	if w := d.AskHuman; w != nil {
		if w.Timeout == 0 {
			c.addf("ask_human.timeout", "required: how long a session waits for an answer")
		}
		checkWait(c, "ask_human", w.Timeout, w.OnTimeout)
	}
	if !oneOf(d.Requests, []string{"", RequestsOn, RequestsOff, RequestsTriggers}) {
		c.addf("requests", "%q: want on, off or triggers", d.Requests)
	}
	if cc := d.Concurrency; cc != nil {
		if cc.Limit < 1 || cc.Limit > MaxConcurrency {
			c.addf("concurrency.limit", "%d: want 1 to %d runs at once", cc.Limit, MaxConcurrency)
		}
		if cc.Key != "" {
			out.ConcurrencyKey = c.expr("concurrency.key", cc.Key, stringOverEvent)
		}
	}
	if l := d.Limits; l != nil {
		if l.SessionUSD < 0 || l.AgentUSDPerDay < 0 || l.KeyUSDPerDay < 0 {
			c.addf("limits", "ceilings must not be negative")
		}
		switch {
		case l.KeyUSDPerDay > 0 && l.Key == "":
			c.addf("limits.key", "required with key_usd_per_day: a CEL string expression over event")
		case l.Key != "" && l.KeyUSDPerDay == 0:
			c.addf("limits.key", "takes key_usd_per_day, the ceiling per key")
		case l.Key != "":
			out.LimitKey = c.expr("limits.key", l.Key, stringOverEvent)
		}
	}
	checkRollout(c, d.Rollout)
	checkContext(c, d)
	return out
}

func checkModel(c *checker, m Model) {
	switch {
	case m.Provider == "":
		c.addf("model.provider", "required: one of %s", strings.Join(providers, ", "))
		return
	case !oneOf(m.Provider, providers):
		c.addf("model.provider", "%q: want one of %s", m.Provider, strings.Join(providers, ", "))
		return
	}
	if m.Provider != "scripted" {
		if m.Name == "" {
			c.addf("model.name", "required for provider %s", m.Provider)
		}
		if len(m.Script) > 0 || m.Then != nil {
			c.addf("model.script", "only the scripted provider takes a script")
		}
	}
	if m.MaxTokens < 0 {
		c.addf("model.max_tokens", "must not be negative")
	}
	if p := m.Price; p != nil && (p.InputPerMTok < 0 || p.OutputPerMTok < 0) {
		c.addf("model.price", "prices must not be negative")
	}
	switch m.ScriptScope {
	case "", "session", "run":
		if m.ScriptScope != "" && m.Provider != "scripted" {
			c.addf("model.script_scope", "only the scripted provider takes a script")
		}
	default:
		c.addf("model.script_scope", "%q: want session or run", m.ScriptScope)
	}
	entries := m.Script
	if m.Then != nil {
		entries = append(entries[:len(entries):len(entries)], *m.Then)
	}
	for i, e := range entries {
		f := fmt.Sprintf("model.script[%d]", i)
		if i == len(m.Script) {
			f = "model.then"
		}
		if e.Error != "" && !oneOf(e.Error, scriptErrs) {
			c.addf(f+".error", "%q: want one of %s", e.Error, strings.Join(scriptErrs, ", "))
		}
		if !utf8.ValidString(e.Text) {
			c.addf(f+".text", "not valid UTF-8")
		}
		for j, tc := range e.ToolCalls {
			if tc.Name == "" {
				c.addf(fmt.Sprintf("%s.tool_calls[%d].name", f, j), "required")
			}
		}
	}
}

// MaxWaitTimeout bounds the timeout of a wait for a human.
const MaxWaitTimeout = 365 * 24 * time.Hour

// checkWait checks the timeout and on_timeout of a wait at field f.
func checkWait(c *checker, f string, timeout Duration, onTimeout string) {
	switch d := timeout.D(); {
	case d < 0:
		c.addf(f+".timeout", "must not be negative")
	case d > 0 && d < time.Second:
		c.addf(f+".timeout", "%s: want at least 1s (a timeout fires on a whole second)", d)
	case d > MaxWaitTimeout:
		c.addf(f+".timeout", "%s: want at most %s", d, MaxWaitTimeout)
	}
	switch {
	case onTimeout != "" && timeout == 0:
		c.addf(f+".on_timeout", "%q without a timeout never happens: set timeout", onTimeout)
	case !oneOf(onTimeout, []string{"", OnTimeoutDeny, OnTimeoutCancel, OnTimeoutEscalate}):
		c.addf(f+".on_timeout", "%q: want deny, cancel or escalate", onTimeout)
	}
}
