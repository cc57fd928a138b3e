package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// row is one line of the printed report: a label and how to render a
// result's figures.
type row struct {
	name   string // measurement
	label  string
	render func(f map[string]float64) string
}

var rows = slices.Concat(ingestRows(Ingest, "ingest"), ingestRows(IngestR3, "ingest R3"), stepRows(Step, "step"), stepRows(StepR3, "step R3"), []row{
	{Control, "control: raw publish→consume p50 / p99", func(f map[string]float64) string {
		return fmt.Sprintf("%s / %s", ms(f["raw-p50-ms"]), ms(f["raw-p99-ms"]))
	}},
	{Control, "control: steer publish→next model call p50 / p99", func(f map[string]float64) string {
		return fmt.Sprintf("%s / %s", ms(f["steer-p50-ms"]), ms(f["steer-p99-ms"]))
	}},
	{Control, "control: cancel publish→tool stopped p50 / p99", func(f map[string]float64) string {
		return fmt.Sprintf("%s / %s", ms(f["cancel-tool-p50-ms"]), ms(f["cancel-tool-p99-ms"]))
	}},
	{Control, "control: cancel publish→cancelled p50 / p99", func(f map[string]float64) string {
		return fmt.Sprintf("%s / %s", ms(f["cancel-final-p50-ms"]), ms(f["cancel-final-p99-ms"]))
	}},
	{Control, "control: ratio to raw, p50 (steer, cancel-tool)", func(f map[string]float64) string {
		if f["raw-p50-ms"] == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f, %.1f", f["steer-p50-ms"]/f["raw-p50-ms"], f["cancel-tool-p50-ms"]/f["raw-p50-ms"])
	}},
	{Recovery, "recovery: kill -9 of a worker→session done p50 / max", func(f map[string]float64) string {
		return fmt.Sprintf("%s / %s", ms(f["recovery-p50-ms"]), ms(f["recovery-max-ms"]))
	}},
	{Idle, "idle: heap held for the idle sessions", func(f map[string]float64) string {
		return fmt.Sprintf("%.1f MB (%.0f B each, %.0f goroutines)", f["held-MB"], f["held-bytes/session"], f["goroutines-held"])
	}},
	{Age, "age: time per event, first 100 / last 100", func(f map[string]float64) string {
		return fmt.Sprintf("%s / %s", ms(f["first-ms"]), ms(f["last-ms"]))
	}},
	{Age, "age: last / first; last to raw", func(f map[string]float64) string {
		return fmt.Sprintf("%.2f; %.1f", f["last/first"], f["ratio-to-raw"])
	}},
	{Window, "window: input tokens with context:, largest / last", func(f map[string]float64) string {
		return fmt.Sprintf("%.0f / %.0f (compact at %.0f)", f["with-max-tokens"], f["with-last-tokens"], f["compact-at-tokens"])
	}},
	{Window, "window: input tokens without, first / last", func(f map[string]float64) string {
		return fmt.Sprintf("%.0f / %.0f (+%.0f a tick)", f["without-first-tokens"], f["without-last-tokens"], f["without-tokens/tick"])
	}},
})

// ingestRows are the rows of an ingest measurement (Ingest or IngestR3).
func ingestRows(name, label string) []row {
	return []row{
		{name, label + ": webhooks/s, raw JetStream ops/s", func(f map[string]float64) string {
			return fmt.Sprintf("%.0f vs %.0f", f["events/s"], f["raw-events/s"])
		}},
		{name, label + ": ratio to raw", func(f map[string]float64) string { return fmt.Sprintf("%.2f", f["ratio"]) }},
		{name, label + ": CPU and JetStream messages a webhook, vs raw", func(f map[string]float64) string {
			return fmt.Sprintf("%.0f µs, %.1f vs %.0f µs, %.1f", f["cpu-us/event"], f["js-msgs/event"], f["raw-cpu-us/op"], f["raw-js-msgs/op"])
		}},
		{name, label + ": CPU of the sender's request to a 202 handler, vs net/http's client", func(f map[string]float64) string {
			return fmt.Sprintf("%.0f µs vs %.0f µs", f["sender-cpu-us/op"], f["nethttp-sender-cpu-us/op"])
		}},
	}
}

// stepRows are the rows of a step measurement (Step or StepR3), for one
// and for eight sessions.
func stepRows(name, label string) []row {
	var out []row
	for _, n := range StepSessions {
		sfx, who := "", "1 session"
		if n > 1 {
			sfx, who = fmt.Sprintf("-%d", n), fmt.Sprintf("%d sessions", n)
		}
		out = append(out,
			row{name, fmt.Sprintf("%s, %s: steps/s vs raw create+CAS/s", label, who), func(f map[string]float64) string {
				return fmt.Sprintf("%.0f vs %.0f", f["steps/s"+sfx], f["raw-steps/s"+sfx])
			}},
			row{name, fmt.Sprintf("%s, %s: step p50 / p99 vs raw p50 / p99", label, who), func(f map[string]float64) string {
				return fmt.Sprintf("%s / %s vs %s / %s", ms(f["step-p50-ms"+sfx]), ms(f["step-p99-ms"+sfx]), ms(f["raw-step-p50-ms"+sfx]), ms(f["raw-step-p99-ms"+sfx]))
			}},
			row{name, fmt.Sprintf("%s, %s: ratio to raw, steps/s (p50)", label, who), func(f map[string]float64) string {
				return fmt.Sprintf("%.2f (%.2f×)", f["ratio"+sfx], f["p50-ratio"+sfx])
			}},
			row{name, fmt.Sprintf("%s, %s: JetStream writes a step (in jl_sessions) vs raw", label, who), func(f map[string]float64) string {
				return fmt.Sprintf("%.2f (%.2f) vs 2", f["writes/step"+sfx], f["session-writes/step"+sfx])
			}})
	}
	return out
}

// ms renders milliseconds.
func ms(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.2f s", v/1000)
	case v >= 10:
		return fmt.Sprintf("%.0f ms", v)
	default:
		return fmt.Sprintf("%.2f ms", v)
	}
}

// syncLabel names a sync setting in the report's header.
func syncLabel(s string) string {
	if s == SyncDefault {
		return "sync_interval " + s + " (default)"
	}
	return "sync_interval " + s
}

// Write prints the report as a table: a row per figure, a column per sync
// setting, then what each measurement ran and any notes.
func (r Report) Write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	header := []string{""}
	for _, s := range r.Config.Syncs {
		header = append(header, syncLabel(s))
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, rw := range rows {
		cells := []string{rw.label}
		shown := false
		for _, s := range r.Config.Syncs {
			res, ok := r.Get(rw.name, s)
			switch {
			case !ok:
				cells = append(cells, "")
			case res.Note != "" || res.Figures == nil:
				cells = append(cells, "-")
				shown = true
			default:
				cells = append(cells, rw.render(res.Figures))
				shown = true
			}
		}
		if shown {
			fmt.Fprintln(tw, strings.Join(cells, "\t"))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	c := r.Config
	fmt.Fprintf(w, "\ningest: %d signed webhooks of %s, %d at a time, from a minimal HTTP/1.1 writer on keep-alive connections in this process; raw: a jl_dedupe create and a publish each; sender: the same requests to a handler that answers 202 at once (the sender and net/http's server side together); ingest R3: the same on a three-node cluster, replicas 3.\n", c.Events, sizeOf(r), c.Concurrency)
	fmt.Fprintf(w, "step: %d steps of one session, then of %d at once on one worker (scripted model, no-op replay-safe tool); raw: per step a KV create of %s and a compare-and-set of %s, what the best possible implementation needs; step R3: the same on a three-node cluster, replicas 3.\n",
		c.Steps, StepSessions[len(StepSessions)-1], bytesOf(r, "create-bytes"), bytesOf(r, "state-bytes"))
	fmt.Fprintf(w, "control: %d of each, publish waiting for the JL_CTL ack; raw: delivery to an ordered consumer.\n", c.Control)
	fmt.Fprintf(w, "recovery: %d rounds of kill -9 of the `jetloop worker` running a shell step, with a standby worker; lease TTL and ack wait %s.\n", c.Recoveries, c.LeaseTTL)
	fmt.Fprintf(w, "idle: %d sessions run once, then at rest; heap of the worker running less after it stopped.\n", c.Sessions)
	fmt.Fprintf(w, "age: %d events into one persistent session (scripted model; a 4 KB tool result each; context policy: mask after 4 turns, compact at 4000 tokens); publish to rest; raw: its publish, and the entry creates and state writes of its three steps.\n", c.AgeEvents)
	fmt.Fprintf(w, "window: %d ticks of a persistent monitor on the OpenAI provider against an in-process fake (a 4 KB tool result each), with and without a context policy; input as the provider counted it.\n", c.WindowTicks)
	for _, res := range r.Results {
		if res.Note != "" {
			fmt.Fprintf(w, "%s (%s): %s\n", res.Name, syncLabel(res.Sync), res.Note)
		}
	}
	var total time.Duration
	for _, res := range r.Results {
		total += res.Elapsed
	}
	_, err := fmt.Fprintf(w, "measured in %s\n", total.Round(time.Second))
	return err
}

// bytesOf names the size figure fig of the step measurement.
func bytesOf(r Report, fig string) string {
	for _, res := range r.Results {
		if res.Name == Step {
			if b := res.Figures[fig]; b > 0 {
				return fmt.Sprintf("%.0f bytes", b)
			}
		}
	}
	return "the step's size"
}

// sizeOf names the webhook body size of the run.
func sizeOf(r Report) string {
	for _, res := range r.Results {
		if b := res.Figures["body-bytes"]; b > 0 {
			return fmt.Sprintf("%.0f KB", b/1024)
		}
	}
	return "about 12 KB"
}
