package chaos

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"
)

var (
	flagDuration = flag.Duration("chaos.duration", 0, "workload and faults of the long run (TestChaos); 0 skips it")
	flagSync     = flag.String("chaos.sync", "", `the NATS nodes' JetStream sync_interval: "always" or a duration; empty: the server's default`)
	flagSeed     = flag.Int64("chaos.seed", 0, "seed of the workload and the faults; 0 picks one")
	flagWorkers  = flag.Int("chaos.workers", 3, "worker processes")
	flagIngests  = flag.Int("chaos.ingests", 2, "ingest processes")
	flagCrons    = flag.Int("chaos.crons", 2, "cron processes")
	flagEvery    = flag.Duration("chaos.every", 3*time.Second, "mean time between faults")
	flagKeep     = flag.Bool("chaos.keep", false, "keep the run's folder (logs, ledger, NATS stores) even when the run passes")
)

// TestChaosShort is the CI run: about a minute of workload and faults.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos run takes minutes")
	}
	if *flagDuration > 0 {
		t.Skip("-chaos.duration runs TestChaos")
	}
	run(t, 75*time.Second, 2*time.Minute)
}

// TestChaos is the long run, for -chaos.duration:
//
//	go test ./integration/chaos -run TestChaos -chaos.duration=10m -timeout 60m -v
func TestChaos(t *testing.T) {
	if *flagDuration == 0 {
		t.Skip("set -chaos.duration for the long run")
	}
	run(t, *flagDuration, 5*time.Minute)
}

// run starts the system, runs the workload and the faults for workload,
// stops both, waits up to quiet for the system to come to rest, and checks
// it.
func run(t *testing.T, workload, quiet time.Duration) {
	cfg := config{nodes: 3, ingests: *flagIngests, workers: *flagWorkers, crons: *flagCrons,
		sync: *flagSync, workload: workload, quiet: quiet, seed: *flagSeed, keep: *flagKeep}
	if cfg.seed == 0 {
		cfg.seed = time.Now().UnixNano()
	}
	dir, err := os.MkdirTemp("", "jetloop-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || cfg.keep {
			t.Logf("the run's folder (logs, ledger, stores) is kept: %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	sync := cfg.sync
	if sync == "" {
		sync = "default"
	}
	t.Logf("chaos: seed %d, %d nodes (sync_interval %s), %d ingests, %d workers, %d crons, %s of workload and faults every ~%s",
		cfg.seed, cfg.nodes, sync, cfg.ingests, cfg.workers, cfg.crons, cfg.workload, *flagEvery)
	ctx := context.Background()
	start := time.Now()
	s := startSystem(t, ctx, cfg, dir)
	t.Logf("chaos: system up in %s", time.Since(start).Round(time.Millisecond))

	w := newWorkload(s, cfg.seed)
	f := newFaults(s, cfg.seed, *flagEvery, t.Logf)
	wctx, stop := context.WithTimeout(ctx, cfg.workload)
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(wctx)
	}()
	f.run(wctx)
	<-done
	t.Logf("chaos: workload and faults stopped after %s", cfg.workload)

	// Quiet: every process back and answering, every interrupted session
	// resumed, no more ticks; then wait for the system to come to rest.
	for _, p := range s.all() {
		if !p.running() {
			if err := p.start(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, p := range s.all() {
		if err := p.waitUp(ctx, time.Minute); err != nil {
			t.Fatalf("after the faults: %v", err)
		}
	}
	w.resumeAll(ctx)
	if err := retry(ctx, 30*time.Second, func(ctx context.Context) error { return storeAgents(ctx, s.js, s.names, s.ledger, false, s.github) }); err != nil {
		t.Fatalf("remove the schedules: %v", err)
	}
	sent := w.deliveries()
	quietStart := time.Now()
	var r *report
	var unsettled string
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		r, err = check(cctx, s, sent)
		cancel()
		if err == nil && len(r.unsettled) == 0 {
			break
		}
		if time.Since(quietStart) > cfg.quiet {
			if err != nil {
				t.Fatalf("check: %v", err)
			}
			unsettled = fmt.Sprintf("not at rest after %s of quiet: %s", cfg.quiet, strings.Join(first(r.unsettled, 10), "; "))
			t.Logf("chaos: %s", unsettled)
			break
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("chaos: at rest %s after the workload", time.Since(quietStart).Round(time.Second))

	// The counts, the faults, and any process that exited by itself.
	var b strings.Builder
	b.WriteString("chaos: faults\n")
	for _, l := range f.summary() {
		b.WriteString("  " + l + "\n")
	}
	for _, p := range s.all() {
		if ex := p.unexpectedExits(); len(ex) > 0 {
			fmt.Fprintf(&b, "  %s exited by itself %d times: %s\n", p.name, len(ex), strings.Join(first(ex, 3), "; "))
		}
	}
	b.WriteString("chaos: counts\n")
	for _, l := range r.countLines() {
		b.WriteString("  " + l + "\n")
	}
	fmt.Fprintf(&b, "chaos: %d violations", len(r.violations))
	t.Log(b.String())
	if len(r.violations) == 0 {
		return
	}
	t.Error(violations(r, unsettled))
}

// violations renders what broke: the transcripts of the sessions
// concerned (the last entries of each, for at most maxDescribed sessions)
// and then every violation, last, so that the tail of a CI log, which is
// all it may show, says why the run failed.
func violations(r *report, unsettled string) string {
	const maxDescribed, maxEntries, maxLines = 10, 40, 50
	bySession := map[ref][]string{}
	var keys []ref
	for _, v := range r.violations {
		if _, ok := bySession[v.session]; !ok {
			keys = append(keys, v.session)
		}
		bySession[v.session] = append(bySession[v.session], v.what)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	var b strings.Builder
	for i, k := range keys {
		if i == maxDescribed {
			fmt.Fprintf(&b, "(and %d more sessions with violations)\n", len(keys)-maxDescribed)
			break
		}
		if tr, ok := r.sessions[k]; ok {
			b.WriteString(describe(tr, maxEntries) + "\n")
		}
	}
	fmt.Fprintf(&b, "chaos: %d violations in %d sessions", len(r.violations), len(keys))
	if unsettled != "" {
		b.WriteString("; " + unsettled)
	}
	n := 0
	for _, k := range keys {
		for _, v := range bySession[k] {
			if n == maxLines {
				fmt.Fprintf(&b, "\n  … and %d more", len(r.violations)-maxLines)
				return b.String()
			}
			n++
			name := k.String()
			if k == (ref{}) {
				name = "(no one session)"
			}
			fmt.Fprintf(&b, "\nviolation: %s: %s", name, v)
		}
	}
	return b.String()
}

func first(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
