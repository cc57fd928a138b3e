package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/window"
)

// runContext prints what a session's next model call receives: the
// estimate and where the live context starts, then every part with its
// tokens and the text the model gets of it.
func runContext(ctx context.Context, env *Env, args []string) error {
	rt, cf, rest, closeConn, err := clientRuntime(ctx, env, "context", "[flags] AGENT/SESSION", args, nil)
	if err != nil {
		return err
	}
	defer closeConn()
	if len(rest) != 1 {
		fmt.Fprintln(env.Stderr, "Usage: jetloop context [flags] AGENT/SESSION")
		return errUsage
	}
	ref, err := parseRef(rest[0])
	if err != nil {
		return err
	}
	c, err := api.NewClient(rt.NC, rt.Names).Context(ctx, api.ContextRequest{Agent: ref.Agent, Session: ref.Session})
	if errors.Is(err, api.ErrNotFound) {
		return missing("no session %s (see 'jetloop status')", ref)
	}
	if err != nil {
		return err
	}
	if cf.json {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(c)
	}
	w := env.Stdout
	rate := fmt.Sprintf("%.1f bytes a token, estimated", c.BytesPerToken)
	if c.Calibrated {
		rate = fmt.Sprintf("%.2f bytes a token, calibrated on the provider's usage", c.BytesPerToken)
	}
	fmt.Fprintf(w, "%s/%s  %s  next call: turn %d, ~%d tokens (%d bytes; %s)\n", c.Agent, c.Session, c.Status, c.Turn, c.Tokens, c.Bytes, rate)
	if c.LastInputTokens > 0 {
		fmt.Fprintf(w, "last call: %d input tokens, as the provider reported\n", c.LastInputTokens)
	}
	if c.CompactAtTokens > 0 {
		due := ""
		if c.CompactionDue {
			due = ": the next call compacts first"
		}
		fmt.Fprintf(w, "compacts at %d tokens%s\n", c.CompactAtTokens, due)
	}
	if win := c.Window; win != nil {
		head := "no head"
		if win.HeadEnd > 1 {
			head = fmt.Sprintf("head 1-%d", win.HeadEnd-1)
		}
		fmt.Fprintf(w, "window: %s, summary %d (of %d answers), tail from %d\n", head, win.Summary, win.Summarised, win.From)
	}
	fmt.Fprintf(w, "%d messages, %d tool results masked, tools: %s\n", c.Messages, c.Masked, strings.Join(c.Tools, ", "))
	if c.Cut {
		fmt.Fprintln(w, "(texts shortened to fit the answer; the estimates are of the whole texts)")
	}
	for _, p := range c.Parts {
		fmt.Fprintf(w, "\n── %s\n", partHead(p))
		if p.Kind == "tools" {
			continue
		}
		fmt.Fprintln(w, indentBlock(p.Text))
	}
	return nil
}

func partHead(p window.Part) string {
	var b strings.Builder
	if p.Entry != 0 {
		fmt.Fprintf(&b, "[%d] ", p.Entry)
	}
	b.WriteString(p.Kind)
	if p.Name != "" {
		b.WriteString(" " + p.Name)
	}
	if p.Covers != nil {
		fmt.Fprintf(&b, " of %d-%d", p.Covers.From, p.Covers.To)
	}
	if p.Entry != 0 {
		fmt.Fprintf(&b, " t%d", p.Turn)
	}
	if p.Masked {
		b.WriteString(" [masked]")
	}
	fmt.Fprintf(&b, "  ~%d tokens", p.Tokens)
	return b.String()
}

func indentBlock(text string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(text, "\n"), "\n", "\n    ")
}
