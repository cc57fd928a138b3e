package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/dlq"
)

// dlqCommands are the verbs of dead letters.
func dlqCommands() []command {
	return []command{
		{name: "dlq", summary: "dead letters: 'dlq ls' lists them with their reasons, 'dlq show SEQ', 'dlq redrive SEQ...|--reason R' puts them back", run: runDLQ},
	}
}

const dlqSynopsis = "ls [--reason R] [--since T] [--agent A]|show SEQ|redrive SEQ...|redrive --reason R|--since T|--agent A [flags]"

func runDLQ(ctx context.Context, env *Env, args []string) error {
	var reason, since, agent string
	var limit int
	var from uint64
	rt, cf, rest, closeConn, err := clientRuntime(ctx, env, "dlq", dlqSynopsis, args, func(fs *flag.FlagSet) {
		fs.StringVar(&reason, "reason", "", "only letters of this reason (no_session, not_applicable, invalid_control, session_cancelled, no_definition, rule_error, …)")
		fs.StringVar(&since, "since", "", "only letters stored since: a time (RFC 3339) or how long ago (1h, 30m)")
		fs.StringVar(&agent, "agent", "", "only letters for this agent's sessions")
		fs.IntVar(&limit, "limit", 0, "at most this many letters (ls: default 50, at most 1000)")
		fs.Uint64Var(&from, "from", 0, "ls: start at this letter (the next page's, which ls prints)")
	})
	if err != nil {
		return err
	}
	defer closeConn()
	usage := func(why string) error {
		fmt.Fprintf(env.Stderr, "jetloop dlq: %s\nUsage: jetloop dlq %s\n", why, dlqSynopsis)
		return errUsage
	}
	if len(rest) == 0 {
		return usage("no action")
	}
	req := api.DLQRequest{Reason: reason, Agent: agent, Limit: limit, From: from}
	if since != "" {
		if req.Since, err = parseSince(since, time.Now()); err != nil {
			return err
		}
	}
	action, rest := rest[0], rest[1:]
	for _, a := range rest {
		seq, err := strconv.ParseUint(a, 10, 64)
		if err != nil || seq == 0 {
			return usage(fmt.Sprintf("%q is not a letter's sequence", a))
		}
		req.Seqs = append(req.Seqs, seq)
	}
	c := api.NewClient(rt.NC, rt.Names)
	switch action {
	case "ls":
		if len(rest) > 0 {
			return usage("ls takes no sequences")
		}
		resp, err := c.DLQ(ctx, req)
		if err != nil {
			return err
		}
		if cf.json {
			return writeJSON(env, resp)
		}
		tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SEQ\tTIME\tREASON\tSESSION\tTYPE\tEVENT\tDETAIL")
		for _, l := range resp.Letters {
			session := orDash(l.Agent)
			if l.Session != "" {
				session = l.Agent + "/" + l.Session
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Seq, l.Time.Local().Format(time.DateTime), l.Reason, session,
				orDash(l.EventType), oneLine(orDash(l.EventID), 40), oneLine(orDash(l.Detail), 100))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if resp.Next != 0 {
			fmt.Fprintf(env.Stderr, "jetloop dlq: more letters: jetloop dlq ls --from %d\n", resp.Next)
		}
		return nil
	case "show":
		if len(req.Seqs) != 1 {
			return usage("show takes one letter's sequence")
		}
		req.Action = api.DLQShow
		resp, err := c.DLQ(ctx, req)
		if err != nil {
			return err
		}
		l := resp.Letters[0]
		if cf.json {
			return writeJSON(env, l)
		}
		fmt.Fprintf(env.Stdout, "letter %d, %s\nreason:  %s\ndetail:  %s\n", l.Seq, l.Time.Local().Format(time.RFC3339), l.Reason, orDash(l.Detail))
		if l.Subject != "" {
			fmt.Fprintf(env.Stdout, "from:    %s #%d\n", l.Subject, l.OrigSeq)
		}
		if l.Rule != "" {
			fmt.Fprintf(env.Stdout, "rule:    %s\n", l.Rule)
		}
		fmt.Fprintf(env.Stdout, "event:   %s %s from %s\nheaders:\n", orDash(l.EventType), orDash(l.EventID), orDash(l.Source))
		keys := make([]string, 0, len(l.Header))
		for k := range l.Header {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(env.Stdout, "  %s: %s\n", k, strings.Join(l.Header[k], ", "))
		}
		fmt.Fprintf(env.Stdout, "data (%d bytes):\n%s\n", len(l.Data), l.Data)
		return nil
	case "redrive":
		if len(req.Seqs) == 0 && reason == "" && since == "" && agent == "" {
			return usage("redrive needs letters' sequences, or --reason, --since or --agent to select them")
		}
		req.Action = api.DLQRedrive
		resp, err := c.DLQ(ctx, req)
		for _, r := range resp.Redriven {
			switch {
			case cf.json:
			case r.Subject != "" && r.Duplicate:
				fmt.Fprintf(env.Stdout, "letter %d: redriven before, to %s (seq %d)\n", r.Letter, r.Subject, r.Seq)
			case r.Subject != "":
				fmt.Fprintf(env.Stdout, "letter %d: back on %s (seq %d)\n", r.Letter, r.Subject, r.Seq)
			case r.Duplicate:
				fmt.Fprintf(env.Stdout, "letter %d: redriven before, admitted to %s\n", r.Letter, orDash(strings.Join(r.Admitted, ", ")))
			default:
				fmt.Fprintf(env.Stdout, "letter %d: admitted again to %s\n", r.Letter, orDash(strings.Join(r.Admitted, ", ")))
			}
		}
		for _, n := range resp.NotRedriven {
			// Beside the JSON array of redrives, not in it: its shape
			// is a contract.
			out := env.Stdout
			if cf.json {
				out = env.Stderr
			}
			fmt.Fprintf(out, "letter %d: not redriven: %s\n", n.Letter, n.Why)
		}
		if err != nil {
			return err
		}
		if cf.json {
			// The answer leaves out an empty redriven: stdout is still
			// the array, empty when nothing was put back.
			if resp.Redriven == nil {
				resp.Redriven = []dlq.Redriven{}
			}
			return writeJSON(env, resp.Redriven)
		}
		if len(resp.Redriven) == 0 && len(resp.NotRedriven) == 0 {
			fmt.Fprintln(env.Stdout, "no letters selected")
		}
		return nil
	}
	return usage(fmt.Sprintf("unknown action %q", action))
}

// parseSince reads --since: an RFC 3339 time, or a duration before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("--since %s: want a positive duration", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--since %q: want a time (2026-01-02T15:04:05Z) or a duration (1h)", s)
	}
	return t, nil
}

// writeJSON prints v indented for --json.
func writeJSON(env *Env, v any) error {
	enc := json.NewEncoder(env.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
