package schedule_test

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/schedule"
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
