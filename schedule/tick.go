package schedule

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/events"
)

// ErrNotTick reports a message that was not fired by a schedule.
var ErrNotTick = errors.New("message is not a schedule tick")

// Tick is one firing of a schedule, read from the message the server
// published to the target subject.
type Tick struct {
	// ID is derived from the schedule subject and the slot: the same for a
	// tick the server produced twice (a leader change mid-fire), different
	// for every slot.
	ID string
	// Spec is the schedule as installed when the tick fired.
	Spec Spec
	// Next is the slot after this one, as the server reported it.
	Next time.Time
	// Slot is the slot that fired (zero when it cannot be derived).
	Slot time.Time
	// Session is the session the tick runs in: the persistent session, or
	// for an ephemeral schedule one named by the schedule and the slot.
	Session string
	// Event is the tick as a CloudEvent, its id set to ID.
	Event event.Event
	// Scheduler and NextHeader are the tick's headers as fired.
	Scheduler, NextHeader string
	// Kind is how it came: KindFired by the server's schedule, KindTrigger
	// (`jetloop schedules trigger`) or KindBackfill.
	Kind string
	// Jittered marks a tick that has waited out its schedule's jitter.
	Jittered bool
}

// Kinds of ticks.
const (
	// KindFired: the server's schedule fired it.
	KindFired = "fired"
	// KindTrigger: fired by hand, now; it runs whatever the overlap
	// policy, the catch-up window or the jitter say.
	KindTrigger = "trigger"
	// KindBackfill: one slot of a backfill; its id is the id the server's
	// tick of that slot has, so a slot runs once.
	KindBackfill = "backfill"
)

// Headers of ticks published by jetloop rather than fired by the server.
const (
	// HeaderKind is the Kind of a tick published by hand (absent: fired).
	HeaderKind = "Jl-Tick-Kind"
	// HeaderSlot is the slot of a triggered tick, which no next slot
	// names.
	HeaderSlot = "Jl-Tick-Slot"
	// HeaderJittered marks a tick delayed by its schedule's jitter.
	HeaderJittered = "Jl-Tick-Jittered"
)

// Manual reports whether the tick was published by hand (a trigger or a
// backfill) rather than fired by the server's schedule.
func (t Tick) Manual() bool { return t.Kind == KindTrigger || t.Kind == KindBackfill }

// IsTick reports whether m was fired by a schedule (or routed from one).
// A message a delayed (@at) schedule message fired, such as a debounced
// burst, is not a tick: the server marks it with a next slot of "purge",
// as it fires once.
func IsTick(m *nats.Msg) bool {
	s, n := tickHeaders(m)
	return s != "" && n != "" && n != nextPurge
}

// nextPurge is HeaderNext on a message a non-repeating schedule fired.
const nextPurge = "purge"

// tickHeaders returns the schedule subject and the next slot of a tick.
func tickHeaders(m *nats.Msg) (scheduler, next string) {
	if m.Header == nil {
		return "", ""
	}
	// A routed copy (an ephemeral session's tick, a jittered tick fired
	// again by an @at message of its own) names the tick it carries.
	if s := m.Header.Get(HeaderRoutedScheduler); s != "" {
		return s, m.Header.Get(HeaderRoutedNext)
	}
	return m.Header.Get(HeaderScheduler), m.Header.Get(HeaderNext)
}

// Route returns the headers that make a copy of tick t's message, published
// elsewhere, read as the same tick.
func Route(h nats.Header, scheduler, next string) {
	h.Set(HeaderRoutedScheduler, scheduler)
	h.Set(HeaderRoutedNext, next)
}

// ParseTick reads a tick from the message the server fired.
func ParseTick(m *nats.Msg) (Tick, error) {
	if !IsTick(m) {
		return Tick{}, fmt.Errorf("schedule: %w: %s has no %s and %s headers", ErrNotTick, m.Subject, HeaderScheduler, HeaderNext)
	}
	scheduler, nextHdr := tickHeaders(m)
	e, err := events.FromMsg(m)
	if err != nil {
		return Tick{}, fmt.Errorf("schedule: tick from %s: %w", scheduler, err)
	}
	if e.Type() != events.TypeTick {
		return Tick{}, fmt.Errorf("schedule: %w: %s fired an event of type %q", ErrNotTick, scheduler, e.Type())
	}
	var spec Spec
	if err := json.Unmarshal(e.Data(), &spec); err != nil {
		return Tick{}, fmt.Errorf("schedule: tick from %s: decode its schedule: %w", scheduler, err)
	}
	if p, err := ParsePattern(spec.Expr, spec.TimeZone, ""); err == nil {
		spec.pattern = p
	}
	t := Tick{Spec: spec, ID: TickID(scheduler, nextHdr), Session: spec.Session, Scheduler: scheduler, NextHeader: nextHdr,
		Kind: KindFired, Jittered: m.Header.Get(HeaderJittered) != ""}
	switch k := m.Header.Get(HeaderKind); k {
	case "", KindFired:
	case KindTrigger, KindBackfill:
		t.Kind = k
	default:
		return Tick{}, fmt.Errorf("schedule: tick from %s: unknown %s %q", scheduler, HeaderKind, k)
	}
	if next, err := time.Parse(time.RFC3339Nano, nextHdr); err == nil {
		t.Next = next.UTC()
		t.Slot = spec.pattern.Slot(t.Next)
	}
	if v := m.Header.Get(HeaderSlot); v != "" {
		slot, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return Tick{}, fmt.Errorf("schedule: tick from %s: %s %q: %w", scheduler, HeaderSlot, v, err)
		}
		t.Slot = slot.UTC()
	}
	if spec.Mode == Ephemeral {
		t.Session = EphemeralSession(spec.Schedule, t.Slot, t.ID)
		e.SetExtension(events.ExtSession, t.Session)
	}
	e.SetID(t.ID)
	if !t.Slot.IsZero() {
		e.SetTime(t.Slot)
	}
	t.Event = e
	return t, nil
}

// TickID is the id of the tick a schedule subject fired for the slot
// before next ("purge" for a one-off @at).
func TickID(scheduler, next string) string {
	h := sha256.Sum256([]byte(scheduler + "\x00" + next))
	return "tick-" + hex.EncodeToString(h[:16])
}

// EphemeralSession names the session of one ephemeral tick: the schedule
// and the slot, e.g. "nightly-20261130T000000Z"; the tick id when the slot
// is unknown.
func EphemeralSession(schedule string, slot time.Time, id string) string {
	if slot.IsZero() {
		return schedule + "-" + id
	}
	return schedule + "-" + slot.UTC().Format("20060102T150405Z")
}

// JitterDelay is the delay below jitter of the tick with id: stable, so a
// tick handled twice is delayed to the same moment, and in whole seconds,
// as a delayed (@at) message fires.
func JitterDelay(id string, jitter time.Duration) time.Duration {
	n := uint64(jitter / time.Second)
	if n == 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	return time.Duration(h.Sum64()%n) * time.Second
}
