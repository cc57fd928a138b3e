package schedule_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/schedule"
	"github.com/jetloop/jetloop/streams"
)

// FuzzParsePattern feeds arbitrary patterns and time zones, as an agent
// definition carries them, to ParsePattern: it never panics, refuses with
// ErrBadPattern, and a pattern it accepts parses again to itself and
// answers Next and Slot.
func FuzzParsePattern(f *testing.F) {
	f.Add("*/5 * * * *", "")
	f.Add("0 0 9 * * MON-FRI", "Europe/Berlin")
	f.Add("@every 90s", "")
	f.Add("@hourly", "America/New_York")
	f.Add("0 0 0 30 2 *", "")
	f.Add("@at 2030-01-01T00:00:00Z", "")
	f.Fuzz(func(t *testing.T, expr, tz string) {
		p, err := schedule.ParsePattern(expr, tz, "agent/sched")
		if err != nil {
			if !errors.Is(err, schedule.ErrBadPattern) {
				t.Fatalf("error %v is not ErrBadPattern", err)
			}
			return
		}
		again, err := schedule.ParsePattern(p.Expr, p.TimeZone, "agent/sched")
		if err != nil {
			t.Fatalf("accepted %q as %q, which does not parse again: %v", expr, p.Expr, err)
		}
		if again.Expr != p.Expr {
			t.Fatalf("accepted %q as %q, which parses again as %q", expr, p.Expr, again.Expr)
		}
		now := time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC)
		if next := p.Next(now); !next.IsZero() && !next.After(now) {
			t.Fatalf("%q: next slot %s is not after %s", p.Expr, next, now)
		}
		if slot := p.Slot(now); !slot.IsZero() && !slot.Before(now) {
			t.Fatalf("%q: slot %s before next %s is not before it", p.Expr, slot, now)
		}
	})
}

// FuzzParseTick feeds ParseTick messages as anyone allowed to publish on
// an agent's input subject could shape them: arbitrary scheduler and next
// headers, type and body. It never panics; what it accepts has a tick id,
// a session and an event that can be published again.
func FuzzParseTick(f *testing.F) {
	spec, err := schedule.Resolve("mon", policies.Schedule{Name: "drift", Cron: "*/5 * * * *", Session: "ephemeral"})
	if err != nil {
		f.Fatal(err)
	}
	m, err := spec.Message(streams.Names{})
	if err != nil {
		f.Fatal(err)
	}
	f.Add("jl.sched.mon.drift", "2026-11-30T00:05:00Z", events.TypeTick, m.Data)
	f.Add("jl.sched.mon.drift", "purge", events.TypeTick, m.Data)
	f.Add("jl.sched.mon.drift", "2026-11-30T00:05:00Z", events.TypeTick, []byte(`{"agent":"mon","schedule":"s","pattern":"@every 1s","expr":"@every 1s","session_mode":"ephemeral"}`))
	f.Add("jl.sched.mon.drift", "2026-11-30T00:05:00Z", events.TypeRequest, []byte(`{"text":"hi"}`))
	f.Add("", "", events.TypeTick, []byte(`null`))
	f.Fuzz(func(t *testing.T, scheduler, next, typ string, body []byte) {
		msg := &nats.Msg{Subject: "jl.in.mon.drift", Header: nats.Header{}, Data: body}
		for k, v := range m.Header {
			msg.Header[k] = v
		}
		msg.Header.Set("ce-type", typ)
		msg.Header.Set(schedule.HeaderScheduler, scheduler)
		msg.Header.Set(schedule.HeaderNext, next)
		tick, err := schedule.ParseTick(msg)
		if err != nil {
			return
		}
		if tick.ID == "" || tick.Session == "" && tick.Spec.Mode == schedule.Ephemeral {
			t.Fatalf("accepted a tick without id or session: %+v", tick)
		}
		if tick.Event.Type() != events.TypeTick || tick.Event.ID() != tick.ID {
			t.Fatalf("tick event %s/%s does not match tick %s", tick.Event.Type(), tick.Event.ID(), tick.ID)
		}
		if _, err := events.ToMsg("jl.in.mon.x", tick.Event); err != nil && !errors.Is(err, events.ErrTooLarge) {
			t.Fatalf("accepted a tick whose event cannot be published: %v", err)
		}
	})
}
