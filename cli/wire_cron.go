package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/schedule"
)

// cronCommands are the client verbs of schedules.
func cronCommands() []command {
	return []command{
		{name: "schedules", summary: "list schedules; 'schedules resume|suspend AGENT/SCHEDULE' closes or opens a breaker, 'trigger' fires one now, 'backfill --from --to' fires past slots", run: runSchedules},
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

const schedulesSynopsis = "[resume|suspend|trigger AGENT/SCHEDULE] [backfill AGENT/SCHEDULE --from T --to T] [flags]"

func runSchedules(ctx context.Context, env *Env, args []string) error {
	var from, to, id string
	rt, cf, rest, closeConn, err := clientRuntime(ctx, env, "schedules", schedulesSynopsis, args, func(fs *flag.FlagSet) {
		fs.StringVar(&from, "from", "", "backfill: the first slot's earliest time (RFC 3339) or how long ago (2h)")
		fs.StringVar(&to, "to", "", "backfill: the end, excluded: a time (RFC 3339) or how long ago (default now)")
		fs.StringVar(&id, "id", "", "trigger: idempotency key; a trigger sent twice with one key fires once (default: a new one)")
	})
	if err != nil {
		return err
	}
	defer closeConn()
	c := api.NewClient(rt.NC, rt.Names)
	usage := func(why string) error {
		fmt.Fprintf(env.Stderr, "jetloop schedules: %s\nUsage: jetloop schedules %s\n", why, schedulesSynopsis)
		return errUsage
	}
	if len(rest) == 0 {
		if from != "" || to != "" || id != "" {
			return usage("--from, --to and --id are for backfill and trigger")
		}
		resp, err := c.Schedules(ctx, api.SchedulesRequest{})
		if err != nil {
			return err
		}
		return listSchedules(env, resp.Schedules, cf.json)
	}
	action := rest[0]
	switch action {
	case api.ScheduleResume, api.ScheduleSuspend, api.ScheduleTrigger, api.ScheduleBackfill:
	default:
		return usage(fmt.Sprintf("unknown action %q (want resume, suspend, trigger or backfill)", action))
	}
	if len(rest) != 2 {
		return usage(action + " takes AGENT/SCHEDULE")
	}
	agent, sched, ok := strings.Cut(rest[1], "/")
	if !ok || agent == "" || sched == "" {
		return fmt.Errorf("%q: want AGENT/SCHEDULE", rest[1])
	}
	req := api.SchedulesRequest{Action: action, Agent: agent, Schedule: sched, ID: id}
	now := time.Now()
	switch {
	case action == api.ScheduleBackfill:
		if from == "" {
			return usage("backfill needs --from")
		}
		if req.From, err = parseSince(from, now); err != nil {
			return err
		}
		req.To = now
		if to != "" {
			if req.To, err = parseSince(to, now); err != nil {
				return err
			}
		}
	case from != "" || to != "":
		return usage("--from and --to are for backfill")
	case id != "" && action != api.ScheduleTrigger:
		return usage("--id is for trigger")
	}
	resp, err := c.Schedules(ctx, req)
	if errors.Is(err, api.ErrNotFound) && (action == api.ScheduleResume || action == api.ScheduleSuspend) {
		return missing("no schedule %s/%s (see 'jetloop schedules')", agent, sched)
	}
	if err != nil {
		return err
	}
	if action == api.ScheduleTrigger || action == api.ScheduleBackfill {
		if cf.json {
			return writeJSON(env, resp.Ticks)
		}
		fired := 0
		for _, t := range resp.Ticks {
			switch {
			case t.Skipped != "":
				fmt.Fprintf(env.Stdout, "%s/%s %s: skipped, %s\n", agent, sched, t.Slot.Format(time.RFC3339), t.Skipped)
			case t.Duplicate:
				fmt.Fprintf(env.Stdout, "%s/%s %s: fired before (seq %d)\n", agent, sched, t.Slot.Format(time.RFC3339), t.Seq)
			default:
				fired++
				fmt.Fprintf(env.Stdout, "%s/%s %s: fired to %s/%s (seq %d, tick %s)\n", agent, sched, t.Slot.Format(time.RFC3339), agent, t.Session, t.Seq, t.ID)
			}
		}
		if action == api.ScheduleBackfill {
			fmt.Fprintf(env.Stdout, "%d of %d slots fired\n", fired, len(resp.Ticks))
		}
		return nil
	}
	h := resp.Schedules[0]
	if cf.json {
		return json.NewEncoder(env.Stdout).Encode(row(h, now))
	}
	fmt.Fprintf(env.Stdout, "%s/%s %s\n", agent, sched, h.State)
	return nil
}

func listSchedules(env *Env, hs []schedule.Health, asJSON bool) error {
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
	r.NextFire = h.NextFire(now)
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
