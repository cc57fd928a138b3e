package schedule

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
)

// Session modes.
const (
	// Persistent: one session that every tick continues.
	Persistent = "persistent"
	// Ephemeral: a new session per tick, named by schedule and slot.
	Ephemeral = "ephemeral"
)

// Overlap policies: what a tick does when the previous tick of its
// schedule is still running.
const (
	OverlapSkip           = "skip"
	OverlapQueueOne       = "queue_one"
	OverlapCancelPrevious = "cancel_previous"
)

// Defaults of a schedule.
const (
	DefaultMaxFailures = 5
	DefaultOverlap     = OverlapSkip
	DefaultSessionMode = Persistent
)

// Extension attributes a tick carries besides jlagent and jlsession.
const (
	ExtSchedule = "jlschedule"
	ExtMode     = "jlschedmode"
)

// Headers of schedule messages and ticks.
const (
	hdrSchedule       = "Nats-Schedule"
	hdrScheduleTZ     = "Nats-Schedule-Time-Zone"
	hdrScheduleTarget = "Nats-Schedule-Target"
	hdrTTL            = "Nats-TTL"
	hdrRollup         = "Nats-Rollup"
	// HeaderScheduler is the schedule subject a tick was fired by.
	HeaderScheduler = "Nats-Scheduler"
	// HeaderNext is the next slot of the schedule that fired a tick.
	HeaderNext = "Nats-Schedule-Next"
	// HeaderRoutedScheduler and HeaderRoutedNext carry HeaderScheduler and
	// HeaderNext on a tick the worker routed to an ephemeral session: the
	// server lets no client publish its own schedule headers.
	HeaderRoutedScheduler = "Jl-Scheduler"
	HeaderRoutedNext      = "Jl-Schedule-Next"
	// HeaderAt and HeaderTarget make a message a delayed one: the server
	// fires it once, at the time of "@at <RFC 3339>", on the target
	// subject (which must be in the same stream).
	HeaderAt     = hdrSchedule
	HeaderTarget = hdrScheduleTarget
	// hdrSpec is the hash of everything the reconciler put in a schedule
	// message, so an unchanged schedule is left alone.
	hdrSpec = "Jl-Schedule-Spec"
)

// Spec is one schedule of one agent, resolved: what its schedule message
// says and what the worker applies to its ticks.
type Spec struct {
	Agent    string `json:"agent"`
	Schedule string `json:"schedule"`
	// Pattern is the definition's pattern; Expr what the server runs.
	Pattern     string            `json:"pattern"`
	Expr        string            `json:"expr"`
	TimeZone    string            `json:"time_zone,omitempty"`
	Mode        string            `json:"session_mode"`
	Overlap     string            `json:"overlap"`
	Timeout     policies.Duration `json:"timeout,omitzero"`
	MaxFailures int               `json:"max_failures"`
	Prompt      string            `json:"prompt,omitempty"`
	// CatchupWindow: a tick whose slot is older than this when it comes
	// to run is skipped (zero: none is).
	CatchupWindow policies.Duration `json:"catchup_window,omitzero"`
	// Jitter: each tick the server fires is delayed by a stable random
	// amount below it before it runs.
	Jitter policies.Duration `json:"jitter,omitzero"`
	// Session is the persistent session's name, or the stem of the
	// ephemeral sessions' names.
	Session string `json:"session"`

	pattern Pattern
}

// Resolve validates a definition's schedule and fills in the defaults.
func Resolve(agent string, s policies.Schedule) (Spec, error) {
	if s.Name == "" {
		return Spec{}, fmt.Errorf("schedule: agent %s: a schedule has no name", agent)
	}
	p, err := ParsePattern(s.Cron, s.TimeZone, agent+"/"+s.Name)
	if err != nil {
		return Spec{}, fmt.Errorf("agent %s schedule %s: %w", agent, s.Name, err)
	}
	spec := Spec{
		Agent: agent, Schedule: s.Name,
		Pattern: s.Cron, Expr: p.Expr, TimeZone: s.TimeZone,
		Mode: s.Session, Overlap: s.Overlap, Timeout: s.Timeout,
		MaxFailures: s.MaxFailures, Prompt: s.Prompt,
		CatchupWindow: s.CatchupWindow, Jitter: s.Jitter,
		Session: s.Name, pattern: p,
	}
	if spec.Mode == "" {
		spec.Mode = DefaultSessionMode
	}
	if spec.Overlap == "" {
		spec.Overlap = DefaultOverlap
	}
	if spec.MaxFailures == 0 {
		spec.MaxFailures = DefaultMaxFailures
	}
	switch spec.Mode {
	case Persistent, Ephemeral:
	default:
		return Spec{}, fmt.Errorf("schedule: agent %s schedule %s: session %q: want %s or %s", agent, s.Name, spec.Mode, Persistent, Ephemeral)
	}
	switch spec.Overlap {
	case OverlapSkip, OverlapQueueOne, OverlapCancelPrevious:
	default:
		return Spec{}, fmt.Errorf("schedule: agent %s schedule %s: overlap %q: want skip, queue_one or cancel_previous", agent, s.Name, spec.Overlap)
	}
	if spec.MaxFailures < 0 {
		return Spec{}, fmt.Errorf("schedule: agent %s schedule %s: max_failures %d: want 1 or more", agent, s.Name, spec.MaxFailures)
	}
	return spec, nil
}

// Specs resolves every schedule of a definition; a bad schedule is
// reported and left out, the others are returned.
func Specs(d policies.Definition) ([]Spec, []error) {
	var out []Spec
	var errs []error
	for _, s := range d.Schedules {
		spec, err := Resolve(d.Name, s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, spec)
	}
	return out, errs
}

// PatternOf returns the parsed pattern of a resolved spec.
func (s Spec) PatternOf() Pattern { return s.pattern }

// Next is the first slot after t.
func (s Spec) Next(t time.Time) time.Time { return s.pattern.Next(t) }

// Message builds the schedule message of s: the server fires its headers
// and body to the target subject at every slot.
func (s Spec) Message(names streams.Names) (*nats.Msg, error) {
	subject, err := names.Sched(s.Agent, s.Schedule)
	if err != nil {
		return nil, err
	}
	ref, err := streams.NewSessionRef(s.Agent, s.Session)
	if err != nil {
		return nil, fmt.Errorf("schedule: %s/%s: %w", s.Agent, s.Schedule, err)
	}
	body, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("schedule: encode %s/%s: %w", s.Agent, s.Schedule, err)
	}
	spec := sha256.Sum256(append([]byte(subject+"\x00"+names.In(ref)+"\x00"), body...))
	specHash := hex.EncodeToString(spec[:16])

	e := event.New()
	e.SetID("schedule-" + specHash) // every tick replaces it with its slot's id
	e.SetType(events.TypeTick)
	e.SetSource("/jetloop/schedules/" + s.Agent + "/" + s.Schedule)
	e.SetSubject(s.Schedule)
	e.SetExtension(events.ExtAgent, s.Agent)
	e.SetExtension(events.ExtSession, s.Session)
	e.SetExtension(ExtSchedule, s.Schedule)
	e.SetExtension(ExtMode, s.Mode)
	if err := e.SetData(event.ApplicationJSON, json.RawMessage(body)); err != nil {
		return nil, fmt.Errorf("schedule: %s/%s: %w", s.Agent, s.Schedule, err)
	}
	m, err := events.ToMsg(subject, e)
	if err != nil {
		return nil, fmt.Errorf("schedule: %s/%s: %w", s.Agent, s.Schedule, err)
	}
	m.Header.Del("Nats-Msg-Id")
	m.Header.Set(hdrSchedule, s.Expr)
	if s.TimeZone != "" {
		m.Header.Set(hdrScheduleTZ, s.TimeZone)
	}
	m.Header.Set(hdrScheduleTarget, names.In(ref))
	// A schedule message removed by a stream limit stops firing for good.
	m.Header.Set(hdrTTL, "never")
	// Replace the previous schedule message of this subject.
	m.Header.Set(hdrRollup, "sub")
	m.Header.Set(hdrSpec, specHash)
	return m, nil
}
