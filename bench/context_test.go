package bench_test

import (
	"context"
	"flag"
	"testing"
	"time"

	"github.com/jetloop/jetloop/bench"
)

var (
	ageEvents   = flag.Int("bench.age-events", bench.DefaultAgeEvents, "events of BenchmarkSessionAge")
	windowTicks = flag.Int("bench.window-ticks", bench.DefaultWindowTicks, "ticks of BenchmarkSessionWindow")
)

// runOne runs one measurement under the server's default sync interval
// and reports its figures.
func runOne(b *testing.B, name string, cfg bench.Config, metrics ...string) {
	b.Helper()
	cfg.Only, cfg.Syncs, cfg.Dir = []string{name}, []string{bench.SyncDefault}, b.TempDir()
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		rep, err := bench.Run(ctx, cfg)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		res, ok := rep.Get(name, bench.SyncDefault)
		if !ok || res.Note != "" {
			b.Fatalf("%s: %+v", name, res)
		}
		for _, m := range metrics {
			b.ReportMetric(res.Figures[m], m)
		}
	}
}

// BenchmarkSessionAge measures a session's cost over its age: events into one
// persistent session on the scripted model; the runtime's time per event
// for the last 100 against the first 100 (last/first), and against the
// raw JetStream operations an event needs (ratio-to-raw).
func BenchmarkSessionAge(b *testing.B) {
	runOne(b, bench.Age, bench.Config{AgeEvents: *ageEvents}, "first-ms", "last-ms", "last/first", "ratio-to-raw", "live-entries", "entries")
}

// BenchmarkSessionWindow measures what a session's window holds: ticks of a
// persistent monitor on the OpenAI provider against an in-process fake;
// the input of the calls with a context policy (largest, last) and
// without one (first, last).
func BenchmarkSessionWindow(b *testing.B) {
	runOne(b, bench.Window, bench.Config{WindowTicks: *windowTicks},
		"with-max-tokens", "with-last-tokens", "compact-at-tokens", "without-first-tokens", "without-last-tokens", "without-tokens/tick")
}
