package schedule_test

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/schedule"
	"github.com/jetloop/jetloop/streams"
)

// What a repeating schedule fires is a tick; what a delayed (@at) message
// fires once, such as a debounced burst, is not, whatever its scheduler.
func TestIsTick(t *testing.T) {
	tests := []struct {
		name string
		h    nats.Header
		want bool
	}{
		{name: "fired by a schedule", h: nats.Header{schedule.HeaderScheduler: {"jl.sched.mon.drift"}, schedule.HeaderNext: {"2026-11-30T00:05:00Z"}}, want: true},
		{name: "routed", h: nats.Header{schedule.HeaderRoutedScheduler: {"jl.sched.mon.drift"}, schedule.HeaderRoutedNext: {"2026-11-30T00:05:00Z"}}, want: true},
		{name: "a debounced burst", h: nats.Header{schedule.HeaderScheduler: {"jl.debounce.deb.main"}, schedule.HeaderNext: {"purge"}}},
		{name: "an @at of a schedule subject", h: nats.Header{schedule.HeaderScheduler: {"jl.sched.mon.drift"}, schedule.HeaderNext: {"purge"}}},
		{name: "no headers"},
	}
	for _, tt := range tests {
		if got := schedule.IsTick(&nats.Msg{Header: tt.h}); got != tt.want {
			t.Errorf("%s: IsTick = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// A schedule's time zone is the zone its cron pattern runs in: the
// server reads it from the schedule message.
func TestScheduleMessageCarriesItsTimeZone(t *testing.T) {
	for _, tz := range []string{"", "Europe/Berlin"} {
		spec, err := schedule.Resolve("mon", policies.Schedule{Name: "daily", Cron: "0 9 * * *", TimeZone: tz})
		if err != nil {
			t.Fatal(err)
		}
		m, err := spec.Message(streams.Default())
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Header.Get("Nats-Schedule-Time-Zone"); got != tz {
			t.Errorf("time_zone %q: the schedule message says %q", tz, got)
		}
	}
}
