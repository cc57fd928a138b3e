package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/schedule"
	"github.com/jetloop/jetloop/streams"
)

// cronCommands are the client verbs of schedules.
func cronCommands() []command {
	return []command{
		{name: "schedules", summary: "list schedules; 'schedules resume|suspend AGENT/SCHEDULE' closes or opens a breaker", run: runSchedules},
	}
}

// cronComponent returns the schedule reconciler.
func cronComponent(ctx context.Context, rt *Runtime) (Component, error) {
	defs, err := policies.NewStore(ctx, rt.JS, rt.Names)
	if err != nil {
		return Component{}, err
	}
	r, err := schedule.NewReconciler(ctx, schedule.Config{Names: rt.Names, Log: rt.Log.With("component", "cron")}, rt.JS, defs)
	if err != nil {
		return Component{}, err
	}
	return Component{Name: "cron", Run: r.Run}, nil
}

// scheduleRow is one line of `jetloop schedules` and one object of its
// --json output.
type scheduleRow struct {
	Agent               string    `json:"agent"`
	Schedule            string    `json:"schedule"`
	Pattern             string    `json:"pattern"`
	Expr                string    `json:"expr"`
	TimeZone            string    `json:"time_zone,omitempty"`
	Session             string    `json:"session_mode"`
	State               string    `json:"state"`
	NextFire            time.Time `json:"next_fire,omitzero"`
	LastFire            time.Time `json:"last_fire,omitzero"`
	LastResult          string    `json:"last_result,omitempty"`
	LastError           string    `json:"last_error,omitempty"`
	ConsecutiveFailures int       `json:"consecutive_failures"`
	MaxFailures         int       `json:"max_failures"`
	InstallError        string    `json:"install_error,omitempty"`
}

func runSchedules(ctx context.Context, env *Env, args []string) error {
	var sf serverFlags
	var asJSON bool
	fs := newFlags(env, "schedules", "[resume|suspend AGENT/SCHEDULE] [flags]")
	sf.register(fs, env)
	fs.BoolVar(&asJSON, "json", false, "print JSON for machines")
	if err := parse(fs, args); err != nil {
		return err
	}
	names, err := streams.NewNames(sf.prefix)
	if err != nil {
		return err
	}
	rt, closeConn, err := dial(ctx, sf, names, "jetloop schedules", env)
	if err != nil {
		return err
	}
	defer closeConn()
	store, err := schedule.NewHealthStore(ctx, rt.JS, names)
	if err != nil {
		return err
	}
	switch fs.Arg(0) {
	case "":
		return listSchedules(ctx, env, store, asJSON)
	case "resume", "suspend":
		if fs.NArg() != 2 {
			fmt.Fprintf(env.Stderr, "Usage: jetloop schedules %s AGENT/SCHEDULE\n", fs.Arg(0))
			return errUsage
		}
		agent, sched, ok := strings.Cut(fs.Arg(1), "/")
		if !ok || agent == "" || sched == "" {
			return fmt.Errorf("%q: want AGENT/SCHEDULE", fs.Arg(1))
		}
		var h schedule.Health
		if fs.Arg(0) == "resume" {
			h, err = store.Resume(ctx, agent, sched)
		} else {
			h, err = store.Suspend(ctx, agent, sched)
		}
		if errors.Is(err, schedule.ErrNotFound) {
			return fmt.Errorf("no schedule %s/%s (see 'jetloop schedules')", agent, sched)
		}
		if err != nil {
			return err
		}
		if asJSON {
			return json.NewEncoder(env.Stdout).Encode(row(h, time.Now()))
		}
		fmt.Fprintf(env.Stdout, "%s/%s %s\n", agent, sched, h.State)
		return nil
	default:
		fmt.Fprintf(env.Stderr, "jetloop schedules: unknown action %q (want resume or suspend)\n", fs.Arg(0))
		return errUsage
	}
}

func listSchedules(ctx context.Context, env *Env, store *schedule.HealthStore, asJSON bool) error {
	hs, err := store.List(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	rows := make([]scheduleRow, 0, len(hs))
	for _, h := range hs {
		rows = append(rows, row(h, now))
	}
	sort.Slice(rows, func(i, j int) bool {
		return rows[i].Agent+"/"+rows[i].Schedule < rows[j].Agent+"/"+rows[j].Schedule
	})
	if asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCHEDULE\tPATTERN\tSESSION\tNEXT FIRE\tLAST FIRE\tLAST RESULT\tFAILURES\tSTATE")
	for _, r := range rows {
		state := r.State
		if r.InstallError != "" {
			state += " (not installed: " + r.InstallError + ")"
		}
		fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\n", r.Agent, r.Schedule, r.Pattern, r.Session,
			when(r.NextFire, now), when(r.LastFire, now), dash(r.LastResult), r.ConsecutiveFailures, r.MaxFailures, state)
	}
	return tw.Flush()
}

func row(h schedule.Health, now time.Time) scheduleRow {
	r := scheduleRow{
		Agent: h.Agent, Schedule: h.Schedule, Pattern: h.Pattern, Expr: h.Expr, TimeZone: h.TimeZone,
		Session: h.Mode, State: h.State, LastFire: h.LastFire, LastResult: h.LastResult, LastError: h.LastError,
		ConsecutiveFailures: h.ConsecutiveFailures, MaxFailures: h.MaxFailures, InstallError: h.InstallError,
	}
	if h.State == schedule.StateActive && h.InstallError == "" {
		if p, err := schedule.ParsePattern(h.Expr, h.TimeZone, ""); err == nil {
			next := p.Next(now)
			// An @every schedule runs from its last fire, not the clock.
			if strings.HasPrefix(h.Expr, "@every ") && !h.LastFire.IsZero() {
				if n := p.Next(h.LastFire); n.After(now) {
					next = n
				}
			}
			r.NextFire = next
		}
	}
	return r
}

// when writes t relative to now: "in 4s", "12s ago", "-" for zero.
func when(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := t.Sub(now).Round(time.Second)
	switch {
	case d > 0:
		return "in " + d.String()
	case d == 0:
		return "now"
	}
	return (-d).String() + " ago"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
