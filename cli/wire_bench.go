package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/jetloop/jetloop/bench"
)

// benchCommands are the verbs that measure jetloop (bench).
func benchCommands() []command {
	return []command{
		{name: "bench", summary: "measure ingest, steps, control, recovery, idle sessions and a session's cost over its age against raw JetStream", run: runBench},
	}
}

func runBench(ctx context.Context, env *Env, args []string) error {
	cfg := bench.Config{Log: env.Log}
	var only, syncs string
	var asJSON bool
	fs := newFlags(env, "bench", "[flags]")
	fs.StringVar(&only, "only", "", "comma-separated measurements to run: "+strings.Join(bench.All(), ", ")+" (default: all)")
	fs.StringVar(&syncs, "sync", "default,always", `comma-separated JetStream sync_interval settings: "default" (the server's 2m), "always", or a duration`)
	fs.IntVar(&cfg.Events, "events", bench.DefaultEvents, "webhooks of the ingest measurement")
	fs.IntVar(&cfg.Concurrency, "concurrency", bench.DefaultConcurrency, "webhooks in flight at once")
	fs.IntVar(&cfg.Steps, "steps", bench.DefaultSteps, "durable steps of the step measurement")
	fs.IntVar(&cfg.Control, "control", bench.DefaultControl, "control messages of each kind")
	fs.IntVar(&cfg.Recoveries, "recoveries", bench.DefaultRecoveries, "kills -9 of the recovery measurement")
	fs.IntVar(&cfg.Sessions, "sessions", bench.DefaultSessions, "idle sessions of the idle measurement")
	fs.IntVar(&cfg.AgeEvents, "age-events", bench.DefaultAgeEvents, "events into one session of the age measurement")
	fs.IntVar(&cfg.WindowTicks, "window-ticks", bench.DefaultWindowTicks, "ticks of each run of the window measurement")
	fs.DurationVar(&cfg.LeaseTTL, "lease-ttl", bench.DefaultLeaseTTL, "lease TTL and ack wait of the recovery measurement's workers")
	fs.StringVar(&cfg.Dir, "dir", "", "folder for the servers' stores (default: a temporary folder, removed afterwards)")
	fs.BoolVar(&asJSON, "json", false, "print the results as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.Stderr, "jetloop bench: unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	if only != "" {
		cfg.Only = strings.Split(only, ",")
	}
	for _, s := range strings.Split(syncs, ",") {
		if s = strings.TrimSpace(s); s == "default" {
			s = bench.SyncDefault
		}
		cfg.Syncs = append(cfg.Syncs, s)
	}
	exe, err := os.Executable()
	if err != nil {
		env.Log.Warn("no path to this executable: the recovery measurement is skipped", "err", err)
	}
	cfg.Executable = exe
	if !asJSON {
		fmt.Fprintf(env.Stdout, "jetloop bench %s: %s\n\n", Version, machine())
	}
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Machine string         `json:"machine"`
			Time    time.Time      `json:"time"`
			Results []bench.Result `json:"results"`
		}{machine(), time.Now().UTC(), rep.Results})
	}
	return rep.Write(env.Stdout)
}

// machine describes where the figures were measured: CPU model and count,
// OS and architecture, Go version.
func machine() string {
	cpu := "unknown CPU"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	return fmt.Sprintf("%s, %d CPUs, %s/%s, %s", cpu, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
}
