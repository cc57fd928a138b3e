package schedule_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/schedule"
	"github.com/jetloop/jetloop/streams"
)

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
