package bench

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkStepVsRaw measures, in one run, durable steps of one session
// and of eight at once on one worker, and what the best possible
// implementation needs for as many (per step one KV create of the size of
// the step's entries and one compare-and-set of the size of its state),
// under both sync settings, on one node and on a three-node cluster (R3).
// The two take turns, a round of steps then as many raw pairs, so their
// ratios are of the same moments of a shared machine.
// b.N is the steps of each.
func BenchmarkStepVsRaw(b *testing.B) {
	for _, cluster := range []bool{false, true} {
		for _, sync := range []string{SyncDefault, SyncAlways} {
			for _, n := range StepSessions {
				name := fmt.Sprintf("sync=%s/sessions=%d", sync, n)
				if cluster {
					name = "R3/" + name
				}
				b.Run(name, func(b *testing.B) {
					ctx := context.Background()
					start := startEnv
					if cluster {
						start = startCluster
					}
					cfg := Config{}
					cfg.setDefaults()
					e, err := start(ctx, cfg, b.TempDir(), sync)
					if err != nil {
						b.Fatal(err)
					}
					defer e.close()
					b.ResetTimer()
					w, raw, err := stepsVsRaw(ctx, e, n, max(b.N, 4*n))
					if err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					b.ReportMetric(w.rate, "steps/s")
					b.ReportMetric(raw.rate, "raw-steps/s")
					b.ReportMetric(w.rate/raw.rate, "ratio")
					b.ReportMetric(percentile(w.durations, 0.5), "p50-ms")
					b.ReportMetric(percentile(raw.durations, 0.5), "raw-p50-ms")
					b.ReportMetric(percentile(w.durations, 0.5)/percentile(raw.durations, 0.5), "p50-ratio")
					// The sizes the raw pair writes: a step's entries and its state.
					b.ReportMetric(float64(raw.createBytes), "create-bytes")
					b.ReportMetric(float64(raw.stateBytes), "state-bytes")
					// What JetStream stored a step, against the raw pair's two.
					b.ReportMetric(float64(w.writes)/float64(w.steps), "writes/step")
					b.ReportMetric(float64(w.sessionWrites)/float64(w.steps), "session-writes/step")
				})
			}
		}
	}
}
