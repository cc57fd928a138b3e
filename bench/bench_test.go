package bench_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/bench"
)

// TestRunPrintsEveryFigure runs every measurement with small counts under
// both sync settings and checks that each produced its figures and that the
// report prints a row for each. It asserts no speed: figures are for
// people, and this machine is shared.
func TestRunPrintsEveryFigure(t *testing.T) {
	if testing.Short() {
		t.Skip("runs servers, workers and worker processes")
	}
	exe := filepath.Join(t.TempDir(), "jetloop")
	build := exec.Command("go", "build", "-o", exe, "../cmd/jetloop")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build jetloop: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rep, err := bench.Run(ctx, bench.Config{
		Events: 40, Concurrency: 4, Steps: 20, Control: 3, Recoveries: 1, Sessions: 50, AgeEvents: 200, WindowTicks: 10,
		LeaseTTL: 2 * time.Second, Executable: exe, Dir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		bench.Ingest:   {"events/s", "raw-events/s", "ratio", "js-msgs/event", "raw-js-msgs/op", "cpu-us/event", "raw-cpu-us/op", "sender-cpu-us/op", "nethttp-sender-cpu-us/op"},
		bench.IngestR3: {"events/s", "raw-events/s", "ratio", "js-msgs/event", "raw-js-msgs/op", "cpu-us/event", "raw-cpu-us/op", "sender-cpu-us/op", "nethttp-sender-cpu-us/op"},
		bench.Step:     {"steps/s", "raw-steps/s", "ratio", "step-p50-ms", "raw-step-p50-ms", "p50-ratio", "steps/s-8", "raw-steps/s-8", "ratio-8", "writes/step", "session-writes/step"},
		bench.StepR3:   {"steps/s", "raw-steps/s", "ratio", "p50-ratio", "steps/s-8", "raw-steps/s-8"},
		bench.Control:  {"raw-p50-ms", "raw-p99-ms", "steer-p50-ms", "steer-p99-ms", "cancel-tool-p50-ms", "cancel-final-p99-ms"},
		bench.Recovery: {"recovery-p50-ms", "recovery-max-ms"},
		bench.Idle:     {"held-MB", "goroutines-held"},
		bench.Age:      {"first-ms", "last-ms", "last/first", "ratio-to-raw"},
		bench.Window:   {"with-max-tokens", "with-last-tokens", "without-first-tokens", "without-last-tokens"},
	}
	// The copies of what each writes to: the R3 measurements' figures
	// are of three, the others' of one.
	replicas := map[string]float64{bench.Ingest: 1, bench.IngestR3: 3, bench.Step: 1, bench.StepR3: 3}
	for _, sync := range []string{bench.SyncDefault, bench.SyncAlways} {
		for name, n := range replicas {
			if res, ok := rep.Get(name, sync); ok && res.Note == "" && res.Figures["replicas"] != n {
				t.Errorf("%s (sync %s): measured on %v replicas, want %v", name, sync, res.Figures["replicas"], n)
			}
		}
		for name, figs := range want {
			res, ok := rep.Get(name, sync)
			if !ok {
				t.Errorf("%s (sync %s): no result", name, sync)
				continue
			}
			if res.Note != "" {
				t.Errorf("%s (sync %s): %s", name, sync, res.Note)
				continue
			}
			for _, f := range figs {
				if _, ok := res.Figures[f]; !ok {
					t.Errorf("%s (sync %s): no figure %s in %v", name, sync, f, res.Figures)
				}
			}
		}
	}
	var out bytes.Buffer
	if err := rep.Write(&out); err != nil {
		t.Fatal(err)
	}
	for _, label := range []string{"ingest: ratio to raw", "ingest R3: webhooks/s, raw JetStream ops/s", "ingest R3: ratio to raw", "ingest R3: CPU and JetStream messages a webhook", "ingest: CPU of the sender's request to a 202 handler", "step, 1 session: ratio to raw", "step, 8 sessions: steps/s", "step R3, 8 sessions: ratio to raw", "control: steer publish→next model call", "recovery: kill -9", "idle: heap held", "age: last / first", "window: input tokens with context:", "window: input tokens without"} {
		if !strings.Contains(out.String(), label) {
			t.Errorf("report has no row %q:\n%s", label, out.String())
		}
	}
	t.Log("\n" + out.String())
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     bench.Config
		wantErr bool
	}{
		{name: "zero", cfg: bench.Config{}},
		{name: "unknown measurement", cfg: bench.Config{Only: []string{"speed"}}, wantErr: true},
		{name: "bad sync", cfg: bench.Config{Syncs: []string{"sometimes"}}, wantErr: true},
		{name: "duration sync", cfg: bench.Config{Syncs: []string{"10s", "always"}}},
		{name: "negative", cfg: bench.Config{Events: -1}, wantErr: true},
		{name: "short lease", cfg: bench.Config{LeaseTTL: 100 * time.Millisecond}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cfg.Validate(); (err != nil) != tt.wantErr {
				t.Fatalf("Validate() = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}
