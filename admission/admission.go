package admission

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
)

// Extension attributes admission sets on the events it admits, beside
// events.ExtAgent and events.ExtSession.
const (
	// ExtTrigger names the trigger that admitted the event.
	ExtTrigger = "jltrigger"
	// ExtPrompt carries the trigger's rendered prompt, when it has one:
	// the text the turn should start from. A prompt may hold newlines,
	// which a CloudEvents string may not, so the value is the prompt's
	// standard base64 encoding; read it with Prompt.
	ExtPrompt = "jlprompt"
	// ExtCount is, on a debounced event, how many events the burst it
	// stands for held (the data is the latest one's).
	ExtCount = "jlcount"
	// ExtOnBusy is the admitting trigger's on_busy policy, when it is not
	// enqueue: what the event does if its session's run still goes on.
	ExtOnBusy = "jlonbusy"
)

// Outcome is what admission decided for one agent.
type Outcome string

// Outcomes of a decision.
const (
	// Admitted: the event goes to the session now.
	Admitted Outcome = "admitted"
	// Rejected: no trigger of the agent matched.
	Rejected Outcome = "rejected"
	// RateLimited: a trigger matched but its rate limit was exhausted.
	RateLimited Outcome = "rate_limited"
	// Debounced: a trigger matched and the event joins a burst that fires
	// once after the trigger's quiet window.
	Debounced Outcome = "debounced"
	// Throttled: a trigger matched and its throttle queues the event: it
	// goes to the session at the decision's At.
	Throttled Outcome = "throttled"
	// Busy: the session's run was still going and the trigger's on_busy
	// is reject: the event does not run. The worker decides it.
	Busy Outcome = "busy"
	// LimitReached: a spend limit of the agent (per session, agent or key)
	// was reached: the event's run does not start. The worker decides it.
	LimitReached Outcome = "limit_reached"
	// Failed: a rule did not evaluate; the event goes to JL_DLQ.
	Failed Outcome = "error"
	// Duplicate: the event was handled before; nothing is evaluated.
	Duplicate Outcome = "duplicate"
	// Refused: the host's rule for delegations refused the event (a hop
	// limit, a cycle, an input the agent does not read); the reason goes
	// back to the delegating session.
	Refused Outcome = "refused"
	// NoRoom: the agent holds its share of JL_IN's room (streams.Room):
	// the event is not published to it, and goes to JL_DLQ (reason
	// no_room) to be redriven when room frees, while the agents that had
	// room get it.
	NoRoom Outcome = "no_room"
)

// Decision is admission's answer for one agent (or, for Rejected with no
// Agent, for every agent at once).
type Decision struct {
	Agent   string  `json:"agent,omitempty"`
	Trigger string  `json:"trigger,omitempty"`
	Outcome Outcome `json:"decision"`
	// Session is where an admitted or debounced event goes.
	Session string `json:"session,omitempty"`
	// Reason explains a rejection, a rate limit or an error.
	Reason string `json:"reason,omitempty"`
	// Version is the definition version that decided.
	Version uint64 `json:"version,omitempty"`
	// Prompt is the trigger's rendered prompt, if any.
	Prompt string `json:"-"`
	// Window is the debounce window of a debounced decision, MaxWait its
	// bound on a burst's age (0: none).
	Window  time.Duration `json:"-"`
	MaxWait time.Duration `json:"-"`
	// DebounceKey is the burst a debounced event joins within its
	// session, when the trigger's debounce has a key.
	DebounceKey string `json:"debounce_key,omitempty"`
	// At is when a throttled event goes to its session.
	At time.Time `json:"at,omitzero"`
	// OnBusy is the trigger's on_busy policy ("" for enqueue).
	OnBusy string `json:"on_busy,omitempty"`
}

// Rule names the trigger as "agent/trigger", or "" when none decided.
func (d Decision) Rule() string {
	if d.Agent == "" || d.Trigger == "" {
		return ""
	}
	return d.Agent + "/" + d.Trigger
}

// Ref is the session an admitted or debounced decision targets.
func (d Decision) Ref() (streams.SessionRef, error) {
	return streams.NewSessionRef(d.Agent, d.Session)
}

// Config configures an Admitter.
type Config struct {
	Names streams.Names
	// Log receives one line per refused rule evaluation. Default: discard.
	Log *slog.Logger
	// Now is the clock of rate limits and debounce. Default time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Admitter evaluates events against every agent's triggers and carries out
// the side effects of its decisions: rate-limit state, debounce messages,
// decision records and dead letters. It is safe for concurrent use.
type Admitter struct {
	js      jetstream.JetStream
	names   streams.Names
	rules   *Rules
	log     *slog.Logger
	now     func() time.Time
	limiter *limiter
	in      jetstream.Stream
	audit   *auditWriter
}

// New returns an Admitter over rules, with its state in the deployment's
// streams and buckets (which streams.Provision creates).
func New(ctx context.Context, js jetstream.JetStream, rules *Rules, cfg Config) (*Admitter, error) {
	cfg.setDefaults()
	kv, err := js.KeyValue(ctx, cfg.Names.BucketDedupe())
	if err != nil {
		return nil, fmt.Errorf("admission: open bucket %s: %w", cfg.Names.BucketDedupe(), err)
	}
	in, err := js.Stream(ctx, cfg.Names.StreamIn())
	if err != nil {
		return nil, fmt.Errorf("admission: open stream %s: %w", cfg.Names.StreamIn(), err)
	}
	return &Admitter{
		js: js, names: cfg.Names, rules: rules, log: cfg.Log, now: cfg.Now, in: in,
		audit:   &auditWriter{js: js, wait: maxRecordWait},
		limiter: &limiter{js: js, kv: kv, names: cfg.Names, now: cfg.Now},
	}, nil
}

// ErrBadData means the event's data cannot be read as its content type
// claims (JSON that does not parse): the sender's fault.
var ErrBadData = errors.New("admission: event data does not parse")

// Decide evaluates e against the triggers of every agent, or only of the
// agent its jlagent extension addresses, and returns one or more decisions
// per agent: errors of triggers that failed to evaluate, then the agent's
// outcome. An agent's triggers are tried in order and the first that
// matches decides; a matching trigger takes a token from its rate limit,
// once per event: deciding the same event again (a retry after a failed
// publish) takes no second token and is admitted again.
//
// The error is ErrNotReady before the definitions are loaded,
// ErrUnknownAgent for an event addressed to no known agent, ErrBadData for
// data that does not parse (when a rule reads it), and ErrState when
// rate-limit state cannot be read or written; the event should then be
// retried, not dropped.
//
// A trigger whose session or prompt cannot be carried by the event (a
// control character in the session name, say) fails alone: its decision is
// Failed and the event goes to the dead letter stream for that rule, while
// every other agent still gets it.
func (a *Admitter) Decide(ctx context.Context, e event.Event) ([]Decision, error) {
	return a.DecideData(ctx, policies.NewEventData(e), e)
}

// DataPaths returns what of event.data the triggers of every agent read:
// what a receiver decodes of an event's data for them
// (policies.ParseJSONPaths, policies.PartlyDecodedEventData).
func (a *Admitter) DataPaths() *policies.DataPaths {
	_, p := a.rules.agentsPaths()
	return p
}

// DecideData is Decide with the rules' view of e built already: a
// receiver that decoded e's data hands it over (policies.DecodedEventData)
// so that it is not decoded twice. The data is decoded only when a trigger
// of the agents considered reads event.data; data that does not parse is
// then ErrBadData.
func (a *Admitter) DecideData(ctx context.Context, data *policies.EventData, e event.Event) ([]Decision, error) {
	if !a.rules.IsSynced() {
		return nil, ErrNotReady
	}
	agents, need := a.rules.agentsPaths()
	to, _ := e.Extensions()[events.ExtAgent].(string)
	if to != "" {
		c, ok := a.rules.fetch(ctx, to)
		if !ok {
			return nil, fmt.Errorf("%w: %q", ErrUnknownAgent, to)
		}
		agents, need = []*policies.Compiled{c}, c.DataPaths()
	}
	if e.Type() == events.TypeDelegate {
		if len(agents) != 1 || e.Extensions()[events.ExtAgent] == nil {
			return nil, fmt.Errorf("%w: delegate event %s is addressed to no agent (extension %s)", ErrBadData, e.ID(), events.ExtAgent)
		}
		return a.decideDelegation(e, agents[0])
	}
	vars, err := data.VarsFor(need)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadData, err)
	}
	var out []Decision
	for _, c := range agents {
		ds, err := a.decideAgent(ctx, e, c, vars, to != "" && e.Type() == events.TypeRequest)
		if err != nil {
			return nil, err
		}
		out = append(out, ds...)
	}
	return out, nil
}

// RequestsRule is the trigger name of a user request admitted by the
// agent's requests setting rather than by one of its triggers: a name no
// trigger can have.
const RequestsRule = "(requests)"

// decideAgent decides e for one agent; request is set for a user request
// addressed to it, which its requests setting governs.
func (a *Admitter) decideAgent(ctx context.Context, e event.Event, c *policies.Compiled, vars policies.Vars, request bool) ([]Decision, error) {
	var out []Decision
	def := c.Definition
	if request && def.Requests == policies.RequestsOff {
		return []Decision{{Agent: def.Name, Trigger: RequestsRule, Outcome: Rejected, Version: def.Version,
			Reason: fmt.Sprintf("agent %s takes no user requests (requests: off)", def.Name)}}, nil
	}
	fail := func(t *policies.CompiledTrigger, err error) {
		out = append(out, Decision{Agent: def.Name, Trigger: t.Name, Outcome: Failed, Reason: err.Error(), Version: def.Version})
	}
	for _, t := range c.Triggers {
		ok, err := t.Admits(ctx, vars)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			fail(t, err)
			continue
		}
		if !ok {
			continue
		}
		d := Decision{Agent: def.Name, Trigger: t.Name, Version: def.Version}
		if d.Session, err = t.SessionOf(ctx, vars); err != nil {
			fail(t, err)
			continue
		}
		ref, err := d.Ref()
		if err != nil {
			fail(t, fmt.Errorf("session %q: %w", d.Session, err))
			continue
		}
		if d.Prompt, err = t.RenderPrompt(ctx, vars); err != nil {
			fail(t, err)
			continue
		}
		if err := a.publishable(e, d, ref); err != nil {
			fail(t, err)
			continue
		}
		if t.DebounceKey != nil {
			// Before the rate limit: a failure here takes no token.
			if d.DebounceKey, err = t.DebounceKey.EvalString(ctx, vars); err != nil {
				fail(t, err)
				continue
			}
		}
		var throttleKey string
		if t.ThrottleKey != nil {
			if throttleKey, err = t.ThrottleKey.EvalString(ctx, vars); err != nil {
				fail(t, err)
				continue
			}
		}
		if t.OnBusy != policies.OnBusyEnqueue {
			d.OnBusy = t.OnBusy
		}
		if t.Rate != nil {
			key, err := t.RateKey.EvalString(ctx, vars)
			if err != nil {
				fail(t, err)
				continue
			}
			ok, err := a.limiter.take(ctx, def.Name, t.Name, key, events.MsgID(e), *t.Rate)
			if err != nil {
				return nil, err
			}
			if !ok {
				d.Outcome = RateLimited
				d.Reason = fmt.Sprintf("rate limit %g/min for key %q exhausted", t.Rate.PerMinute, key)
				return append(out, d), nil
			}
		}
		d.Outcome = Admitted
		if th := t.Throttle; th != nil {
			at, err := a.limiter.turn(ctx, def.Name, t.Name, throttleKey, events.MsgID(e), *th)
			if err != nil {
				return nil, err
			}
			switch now := a.now(); {
			case at.Sub(now) > MaxThrottleWait:
				d.Outcome = RateLimited
				d.Reason = fmt.Sprintf("throttle %g/min for key %q: its queue is more than %s long", th.PerMinute, throttleKey, MaxThrottleWait)
				return append(out, d), nil
			case at.After(now):
				d.Outcome, d.At = Throttled, at.UTC()
				d.Reason = fmt.Sprintf("throttle %g/min for key %q: its turn is at %s", th.PerMinute, throttleKey, d.At.Format(time.RFC3339))
				return append(out, d), nil
			}
		}
		if t.Debounce != nil {
			d.Outcome = Debounced
			d.Window, d.MaxWait = t.Debounce.Window.D(), t.Debounce.MaxWait.D()
		}
		return append(out, d), nil
	}
	if len(out) > 0 {
		return out, nil
	}
	if request {
		if c.RequestsByTriggers() {
			why := "requests: triggers"
			if def.Requests == "" {
				why = "a trigger of it takes requests, so the triggers decide them; requests: on admits the others"
			}
			return []Decision{{Agent: def.Name, Trigger: RequestsRule, Outcome: Rejected, Version: def.Version,
				Reason: fmt.Sprintf("no trigger of agent %s admits this request (%s)", def.Name, why)}}, nil
		}
		// A request addressed to a session goes there, unless the agent
		// says otherwise.
		d := Decision{Agent: def.Name, Trigger: RequestsRule, Outcome: Admitted, Version: def.Version, Session: policies.DefaultSession(vars)}
		ref, err := d.Ref()
		if err == nil {
			err = a.publishable(e, d, ref)
		}
		if err != nil {
			return []Decision{{Agent: def.Name, Trigger: RequestsRule, Outcome: Failed, Reason: err.Error(), Version: def.Version}}, nil
		}
		return []Decision{d}, nil
	}
	return []Decision{{Agent: def.Name, Outcome: Rejected, Reason: "no trigger matched", Version: def.Version}}, nil
}

// publishable checks that e stamped for d can be written as a message on
// its session's subject, so that what cannot be published fails this rule
// alone rather than the whole delivery.
func (a *Admitter) publishable(e event.Event, d Decision, ref streams.SessionRef) error {
	// The data is checked once for the event, by its receiver.
	bare := e
	bare.DataEncoded, bare.DataBase64 = nil, false
	if err := events.CheckMsg(a.names.In(ref), Stamp(bare, d)); err != nil {
		return fmt.Errorf("event for session %q cannot be published: %w", d.Session, err)
	}
	return nil
}

// Prompt returns the prompt ExtPrompt carries on e, "" when it has none.
func Prompt(e event.Event) (string, error) {
	v, ok := e.Extensions()[ExtPrompt]
	if !ok {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("admission: extension %s of event %s is %T, want a base64 string", ExtPrompt, e.ID(), v)
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "", fmt.Errorf("admission: extension %s of event %s: %w", ExtPrompt, e.ID(), err)
	}
	return string(b), nil
}

// Stamp returns the copy of e that goes to d's session: e with the agent,
// session, trigger and prompt extensions set, its data shared with e.
func Stamp(e event.Event, d Decision) event.Event {
	ec, ok := e.Context.(*event.EventContextV1)
	if !ok || e.FieldErrors != nil {
		return stampSlow(e, d)
	}
	// What stampSlow makes, built at once: the context copied as Clone
	// copies it, the extensions into a map sized for admission's own
	// (a clone of the sender's grows as they are set), set without
	// SetExtension's checks, which their names and string values pass.
	c := *ec
	if ec.Time != nil {
		t := *ec.Time
		c.Time = &t
	}
	if ec.DataSchema != nil {
		s := *ec.DataSchema
		c.DataSchema = &s
	}
	exts := make(map[string]any, len(ec.Extensions)+5)
	for k, v := range ec.Extensions {
		switch k {
		case events.ExtAgent, events.ExtSession, ExtTrigger, ExtPrompt, ExtCount, ExtOnBusy:
			// A sender must not be able to supply what only admission sets.
			continue
		}
		exts[k] = types.Clone(v)
	}
	exts[events.ExtAgent] = d.Agent
	exts[events.ExtSession] = d.Session
	exts[ExtTrigger] = d.Trigger
	if d.OnBusy != "" {
		exts[ExtOnBusy] = d.OnBusy
	}
	if d.Prompt != "" {
		exts[ExtPrompt] = base64.StdEncoding.EncodeToString([]byte(d.Prompt))
	}
	c.Extensions = exts
	// The data is shared, not copied: an event's data is never written
	// in place, and a copy of a webhook's tens of kilobytes per session
	// is most of what stamping would cost.
	return event.Event{Context: &c, DataEncoded: e.DataEncoded, DataBase64: e.DataBase64}
}

// stampSlow is Stamp through the SDK's Clone and SetExtension, for a
// context other than 1.0's or an event carrying field errors.
func stampSlow(e event.Event, d Decision) event.Event {
	data := e.DataEncoded
	e.DataEncoded = nil
	out := e.Clone()
	out.DataEncoded = data
	out.SetExtension(events.ExtAgent, d.Agent)
	out.SetExtension(events.ExtSession, d.Session)
	out.SetExtension(ExtTrigger, d.Trigger)
	// A sender must not be able to supply what only admission sets.
	out.SetExtension(ExtPrompt, nil)
	out.SetExtension(ExtCount, nil)
	out.SetExtension(ExtOnBusy, nil)
	if d.OnBusy != "" {
		out.SetExtension(ExtOnBusy, d.OnBusy)
	}
	if d.Prompt != "" {
		out.SetExtension(ExtPrompt, base64.StdEncoding.EncodeToString([]byte(d.Prompt)))
	}
	return out
}
