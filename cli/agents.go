package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/policies"
)

// appliedBy names the person at this terminal for the history:
// user@host.
func appliedBy(env *Env) string {
	name := env.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	if host, err := os.Hostname(); err == nil && host != "" {
		name += "@" + host
	}
	return name
}

func runApply(ctx context.Context, env *Env, args []string) error {
	rt, cf, rest, closeConn, err := clientRuntime(ctx, env, "apply", "[flags] FILE...", args, nil)
	if err != nil {
		return err
	}
	defer closeConn()
	if len(rest) == 0 {
		fmt.Fprintln(env.Stderr, "jetloop apply: no files; usage: jetloop apply FILE...")
		return errUsage
	}
	// Validate every file here first, for errors without a round trip;
	// the API validates again and stores all or none.
	req := api.ApplyRequest{By: appliedBy(env)}
	var errs []error
	for _, path := range rest {
		if _, err := policies.LoadFile(path); err != nil {
			errs = append(errs, err)
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		req.Files = append(req.Files, api.File{Name: path, Content: string(b)})
	}
	if len(errs) > 0 {
		all := policies.Errors(errors.Join(errs...))
		for _, e := range all {
			fmt.Fprintln(env.Stderr, e)
		}
		return fmt.Errorf("refused: %d problem(s); nothing was stored", len(all))
	}
	for _, f := range req.Files {
		if c, err := policies.Parse(f.Name, []byte(f.Content)); err == nil {
			for _, w := range api.KeyWarnings(c.Definition, env.Getenv) {
				fmt.Fprintln(env.Stderr, "warning: "+w)
			}
		}
	}
	resp, err := api.NewClient(rt.NC, rt.Names).Apply(ctx, req)
	var ae *api.Error
	if errors.As(err, &ae) && len(ae.Problems) > 0 {
		for _, p := range ae.Problems {
			fmt.Fprintln(env.Stderr, p)
		}
	}
	if err != nil {
		return err
	}
	if cf.json {
		return json.NewEncoder(env.Stdout).Encode(resp)
	}
	for i, a := range resp.Applied {
		switch {
		case a.Unchanged:
			fmt.Fprintf(env.Stdout, "%s version %d (unchanged)\n", a.Agent, a.Version)
		default:
			fmt.Fprintf(env.Stdout, "%s version %d: %s\n", a.Agent, a.Version, a.Summary)
		}
		// The API recorded what each MCP server offers of these tools.
		if c, err := policies.Parse(req.Files[i].Name, []byte(req.Files[i].Content)); err == nil {
			for _, s := range c.Definition.MCPServers {
				fmt.Fprintf(env.Stdout, "  mcp server %s: admitted %s\n", s.Name, strings.Join(s.Tools, ", "))
			}
		}
	}
	return nil
}

// agentsVerbs are the subcommands of `jetloop agents`.
var agentsVerbs = map[string]func(ctx context.Context, env *Env, args []string) error{
	"history":  runAgentsHistory,
	"show":     runAgentsShow,
	"diff":     runAgentsDiff,
	"rollback": runAgentsRollback,
	"rollout":  runAgentsRollout,
}

func runAgents(ctx context.Context, env *Env, args []string) error {
	if len(args) > 0 {
		if verb, ok := agentsVerbs[args[0]]; ok {
			return verb(ctx, env, args[1:])
		}
	}
	rt, cf, rest, closeConn, err := clientRuntime(ctx, env, "agents", "[flags] | agents history|show|diff|rollback|rollout NAME ...", args, nil)
	if err != nil {
		return err
	}
	defer closeConn()
	if len(rest) > 0 {
		fmt.Fprintf(env.Stderr, "jetloop agents: unknown subcommand %q (want history, show, diff, rollback or rollout)\n", rest[0])
		return errUsage
	}
	resp, err := api.NewClient(rt.NC, rt.Names).Agents(ctx)
	if err != nil {
		return err
	}
	recs := resp.Agents
	if cf.json {
		type row struct {
			Name        string            `json:"name"`
			Description string            `json:"description,omitempty"`
			Version     uint64            `json:"version"`
			Hash        string            `json:"hash,omitempty"`
			Model       string            `json:"model"`
			Triggers    []string          `json:"triggers"`
			Schedules   []string          `json:"schedules"`
			Source      string            `json:"source,omitempty"`
			AppliedBy   string            `json:"applied_by,omitempty"`
			AppliedAt   time.Time         `json:"applied_at"`
			Rollout     *policies.Rollout `json:"rollout,omitempty"`
		}
		rows := make([]row, 0, len(recs))
		for _, r := range recs {
			d := r.Definition
			rows = append(rows, row{Name: d.Name, Description: d.Description, Version: r.Version, Hash: r.Hash, Model: modelName(d.Model), Triggers: triggerNames(d),
				Schedules: scheduleNames(d), Source: r.Source, AppliedBy: r.AppliedBy, AppliedAt: r.AppliedAt, Rollout: r.Rollout})
		}
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	now := time.Now()
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tVERSION\tROLLOUT\tMODEL\tTRIGGERS\tSCHEDULES\tAPPLIED\tSOURCE")
	for _, r := range recs {
		d := r.Definition
		rollout := "-"
		if r.Rollout != nil {
			rollout = r.Rollout.String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Name, r.Version, rollout, modelName(d.Model),
			orDash(strings.Join(triggerNames(d), ",")), orDash(strings.Join(scheduleNames(d), ",")), ago(r.AppliedAt, now), orDash(r.Source))
	}
	return tw.Flush()
}

// versionArg reads a version number argument.
func versionArg(s string) (uint64, error) {
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "v"), 10, 64)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("version %q: want a version number such as 3", s)
	}
	return v, nil
}

func usageError(env *Env, verb, synopsis, why string) error {
	fmt.Fprintf(env.Stderr, "jetloop agents %s: %s\nUsage: jetloop agents %s %s\n", verb, why, verb, synopsis)
	return errUsage
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func runAgentsHistory(ctx context.Context, env *Env, args []string) error {
	const synopsis = "[flags] NAME"
	rt, cf, rest, closeConn, err := clientRuntime(ctx, env, "agents history", synopsis, args, nil)
	if err != nil {
		return err
	}
	defer closeConn()
	if len(rest) != 1 {
		return usageError(env, "history", synopsis, "want one agent name")
	}
	h, err := api.NewClient(rt.NC, rt.Names).History(ctx, api.HistoryRequest{Agent: rest[0]})
	if err != nil {
		return err
	}
	if cf.json {
		return printJSON(env.Stdout, h)
	}
	w := env.Stdout
	switch r := h.Rollout; {
	case r == nil:
		fmt.Fprintf(w, "%s: version %d serves every new session\n", h.Agent, h.Newest)
	default:
		fmt.Fprintf(w, "%s: %s, since %s", h.Agent, r, r.Started.Local().Format(time.DateTime))
		if r.Guard != nil {
			fmt.Fprintf(w, "; guard: %s", r.Guard)
		}
		fmt.Fprintln(w)
		if c := h.Counts; c != nil {
			fmt.Fprintf(w, "runs since %s: canary v%d %d failed of %d (%.1f%%), stable v%d %d failed of %d (%.1f%%)\n",
				c.Since.Local().Format(time.TimeOnly), c.Canary.Version, c.Canary.Failed, c.Canary.Runs, 100*c.Canary.Rate(),
				c.Stable.Version, c.Stable.Failed, c.Stable.Runs, 100*c.Stable.Rate())
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tCHANGE\tWHEN\tBY\tSOURCE\tHASH\tWHAT")
	for _, e := range h.Entries {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Version, e.Change, e.At.Local().Format(time.DateTime), orDash(e.By), orDash(e.Source),
			policies.ShortHash(e.Hash), oneLine(e.Summary, 160))
	}
	return tw.Flush()
}

func runAgentsShow(ctx context.Context, env *Env, args []string) error {
	const synopsis = "[flags] NAME [--version V]"
	var version string
	rt, cf, rest, closeConn, err := clientRuntime(ctx, env, "agents show", synopsis, args, func(fs *flag.FlagSet) {
		fs.StringVar(&version, "version", "", "the version to show (default: the newest)")
	})
	if err != nil {
		return err
	}
	defer closeConn()
	if len(rest) != 1 {
		return usageError(env, "show", synopsis, "want one agent name")
	}
	req := api.DefinitionRequest{Agent: rest[0]}
	if version != "" {
		if req.Version, err = versionArg(version); err != nil {
			return err
		}
	}
	d, err := api.NewClient(rt.NC, rt.Names).Definition(ctx, req)
	if err != nil {
		return err
	}
	if cf.json {
		return printJSON(env.Stdout, d)
	}
	r := d.Record
	fmt.Fprintf(env.Stdout, "# %s version %d (revision %d, %s)\n", r.Definition.Name, r.Version, r.Revision, r.Hash)
	fmt.Fprintf(env.Stdout, "# applied %s by %s from %s\n", r.AppliedAt.Local().Format(time.DateTime), orDash(r.AppliedBy), orDash(r.Source))
	if r.Restores != 0 {
		fmt.Fprintf(env.Stdout, "# restores the content of version %d\n", r.Restores)
	}
	if d.Serving != "" {
		fmt.Fprintf(env.Stdout, "# serves: %s\n", d.Serving)
	} else {
		fmt.Fprintln(env.Stdout, "# serves no new session")
	}
	_, err = io.WriteString(env.Stdout, d.YAML)
	return err
}

func runAgentsDiff(ctx context.Context, env *Env, args []string) error {
	const synopsis = "[flags] NAME V1 V2"
	rt, cf, rest, closeConn, err := clientRuntime(ctx, env, "agents diff", synopsis, args, nil)
	if err != nil {
		return err
	}
	defer closeConn()
	if len(rest) != 3 {
		return usageError(env, "diff", synopsis, "want an agent name and two versions")
	}
	from, err := versionArg(rest[1])
	if err != nil {
		return err
	}
	to, err := versionArg(rest[2])
	if err != nil {
		return err
	}
	d, err := api.NewClient(rt.NC, rt.Names).Diff(ctx, api.DiffRequest{Agent: rest[0], From: from, To: to})
	if err != nil {
		return err
	}
	if cf.json {
		return printJSON(env.Stdout, d)
	}
	if d.Same {
		fmt.Fprintf(env.Stdout, "%s versions %d and %d have the same content (%s)\n", d.Agent, d.From, d.To, policies.ShortHash(d.FromHash))
		return nil
	}
	_, err = io.WriteString(env.Stdout, d.Diff)
	return err
}

func runAgentsRollback(ctx context.Context, env *Env, args []string) error {
	const synopsis = "[flags] NAME [--to V]"
	var to string
	rt, cf, rest, closeConn, err := clientRuntime(ctx, env, "agents rollback", synopsis, args, func(fs *flag.FlagSet) {
		fs.StringVar(&to, "to", "", "the version whose content to restore (default: the stable version of a rollout, else the version before the newest)")
	})
	if err != nil {
		return err
	}
	defer closeConn()
	if len(rest) != 1 {
		return usageError(env, "rollback", synopsis, "want one agent name")
	}
	req := api.RollbackRequest{Agent: rest[0], By: appliedBy(env)}
	if to != "" {
		if req.To, err = versionArg(to); err != nil {
			return err
		}
	}
	resp, err := api.NewClient(rt.NC, rt.Names).Rollback(ctx, req)
	if err != nil {
		return err
	}
	return printChange(env, cf.json, resp)
}

func runAgentsRollout(ctx context.Context, env *Env, args []string) error {
	const synopsis = "[flags] NAME --version V --percent P [--max-failure-rate R --min-runs N --compare-to-stable=BOOL | --no-guard]"
	var (
		version, percent string
		rate             float64
		minRuns          int
		compare, noGuard bool
	)
	var flags *flag.FlagSet
	rt, cf, rest, closeConn, err := clientRuntime(ctx, env, "agents rollout", synopsis, args, func(fs *flag.FlagSet) {
		flags = fs
		fs.StringVar(&version, "version", "", "the canary version")
		fs.StringVar(&percent, "percent", "", "share of new sessions for the canary: 0 rolls back to the stable version, 100 promotes the canary")
		fs.Float64Var(&rate, "max-failure-rate", 0, "guard: the canary failure rate (0 to 1) tolerated before it is rolled back by itself (a guard flag changes only what it names of the guard in force)")
		fs.IntVar(&minRuns, "min-runs", 0, fmt.Sprintf("guard: canary runs before it judges (default %d)", policies.DefaultMinRuns))
		fs.BoolVar(&compare, "compare-to-stable", true, "guard: roll back only when the canary fails measurably more than the stable version")
		fs.BoolVar(&noGuard, "no-guard", false, "remove the rollout's guard")
	})
	if err != nil {
		return err
	}
	defer closeConn()
	if len(rest) != 1 {
		return usageError(env, "rollout", synopsis, "want one agent name")
	}
	if version == "" || percent == "" {
		return usageError(env, "rollout", synopsis, "--version and --percent are required")
	}
	set := map[string]bool{}
	flags.Visit(func(f *flag.Flag) { set[f.Name] = true })
	req := api.RolloutRequest{Agent: rest[0], By: appliedBy(env), ClearGuard: noGuard}
	if req.Version, err = versionArg(version); err != nil {
		return err
	}
	p, err := strconv.ParseFloat(percent, 64)
	if err != nil {
		return fmt.Errorf("--percent %q: want a number from 0 to 100", percent)
	}
	req.Percent = &p
	client := api.NewClient(rt.NC, rt.Names)
	if set["max-failure-rate"] || set["min-runs"] || set["compare-to-stable"] {
		if noGuard {
			return usageError(env, "rollout", synopsis, "--no-guard with guard flags")
		}
		// The flags change what they name of the guard in force on this
		// canary; the rest of it stays.
		var g policies.Guard
		h, err := client.History(ctx, api.HistoryRequest{Agent: req.Agent})
		if err != nil {
			return err
		}
		if r := h.Rollout; r != nil && r.Canary == req.Version && r.Guard != nil {
			g = *r.Guard
		}
		if set["max-failure-rate"] {
			g.MaxFailureRate = rate
		}
		if set["min-runs"] {
			g.MinRuns = minRuns
		}
		if set["compare-to-stable"] {
			g.CompareToStable = &compare
		}
		req.Guard = &g
	}
	resp, err := client.Rollout(ctx, req)
	if err != nil {
		return err
	}
	return printChange(env, cf.json, resp)
}

func printChange(env *Env, asJSON bool, resp api.ChangeResponse) error {
	if asJSON {
		return printJSON(env.Stdout, resp)
	}
	fmt.Fprintf(env.Stdout, "%s version %d: %s\n", resp.Agent, resp.Version, resp.Entry.Summary)
	return nil
}
