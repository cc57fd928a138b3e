package chaos

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/jetloop/jetloop/internal/ghfake"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
)

// violation is one broken promise, with the session it concerns.
type violation struct {
	what    string
	session ref // zero when it concerns no one session
}

// report is what the checker found.
type report struct {
	counts     map[string]int
	violations []violation
	sessions   map[ref]record.Transcript
	// unsettled lists why the system is not yet at rest (empty once it
	// is): what the quiet period waits for.
	unsettled []string
}

func (r *report) add(what string, n int) { r.counts[what] += n }

func (r *report) violate(s ref, format string, args ...any) {
	r.violations = append(r.violations, violation{what: fmt.Sprintf(format, args...), session: s})
}

// check reads every session and the ledger back and holds them against
// what the workload was answered.
func check(ctx context.Context, s *system, sent []sent) (*report, error) {
	r := &report{counts: map[string]int{}, sessions: map[ref]record.Transcript{}}
	sums, err := record.List(ctx, s.js, s.names)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	for _, sum := range sums {
		sr, err := streams.NewSessionRef(sum.Agent, sum.Session)
		if err != nil {
			return nil, err
		}
		tr, err := record.Show(ctx, s.js, s.names, sr)
		if err != nil {
			return nil, fmt.Errorf("show %s: %w", sr, err)
		}
		r.sessions[ref{sum.Agent, sum.Session}] = tr
	}
	r.add("sessions", len(r.sessions))

	// Every session ended final or waiting: no run in progress, no step in
	// flight.
	for k, tr := range r.sessions {
		r.add("sessions "+string(tr.Status), 1)
		switch {
		case tr.Pending != nil:
			r.violate(k, "session is %s with a %s step in flight (step %d, owner %s)", tr.Status, tr.Pending.Kind, tr.Pending.Step, tr.Pending.Owner)
			r.unsettled = append(r.unsettled, k.String()+" has a step in flight")
		case !tr.Status.Resting():
			r.violate(k, "session is still %s", tr.Status)
			r.unsettled = append(r.unsettled, k.String()+" is "+string(tr.Status))
		case tr.Status == record.StatusWaiting:
			r.violate(k, "session still waits for %s", tr.WaitingFor)
			r.unsettled = append(r.unsettled, k.String()+" waits for the sessions it delegated to")
		}
	}

	checkDelegations(r)

	// No transcript has a tool call without exactly one result.
	calls := map[string]bool{} // "agent session call" of every tool call
	for k, tr := range r.sessions {
		results := map[string]int{}
		called := map[string]bool{}
		for _, e := range tr.Transcript {
			switch e.Kind {
			case record.KindToolCall:
				if called[e.CallID] {
					r.violate(k, "tool call %s appears twice", e.CallID)
				}
				called[e.CallID] = true
				calls[k.agent+" "+k.session+" "+e.CallID] = true
			case record.KindToolResult:
				results[e.CallID]++
				if e.IsError && strings.Contains(e.Result, "may or may not have run") {
					r.add("tool calls interrupted, settled as such", 1)
				}
			}
		}
		r.add("tool calls", len(called))
		for id := range called {
			if n := results[id]; n != 1 {
				r.violate(k, "tool call %s has %d results", id, n)
				if n == 0 {
					r.unsettled = append(r.unsettled, k.String()+" has a call without a result")
				}
			}
		}
		for id := range results {
			if !called[id] {
				r.violate(k, "tool result %s has no call", id)
			}
		}
	}

	// No replay-unsafe tool ran twice: every ledger line is unique; and
	// every line is a call some transcript records, and every call whose
	// result says it ran has its line.
	lines, err := readLines(s.ledger)
	if err != nil {
		return nil, err
	}
	seen := map[string]int{}
	for _, l := range lines {
		seen[l]++
	}
	r.add("ledger lines", len(lines))
	for l, n := range seen {
		k := lineRef(l)
		if n > 1 {
			r.violate(k, "replay-unsafe call ran %d times: ledger line %q", n, l)
		}
		if !calls[l] {
			r.violate(k, "ledger line %q is no tool call of any transcript", l)
		}
	}
	for k, tr := range r.sessions {
		for _, e := range tr.Transcript {
			if e.Kind == record.KindToolResult && e.Name == "shell" && !e.IsError && seen[k.agent+" "+k.session+" "+e.CallID] == 0 {
				r.violate(k, "tool result %s says the call ran, but the ledger has no line for it", e.CallID)
			}
		}
	}

	// No GitHub comment was posted twice for one call: every comment
	// carries its call's marker, no marker appears twice, every marker is
	// a call some transcript records, and every result that says it posted
	// names a comment GitHub has.
	if s.gh != nil {
		checkComments(r, s.gh.Comments("", 0), calls)
	}

	// Every event answered 2xx was processed, once.
	recorded := map[ref]map[string]int{}
	for k, tr := range r.sessions {
		ids := map[string]int{}
		for _, e := range tr.Transcript {
			if (e.Kind == record.KindEvent || e.Kind == record.KindUser) && e.Event != nil {
				ids[e.Event.ID]++
				if e.Name == "dev.jetloop.tick" {
					r.add("ticks processed", 1)
				}
			}
		}
		recorded[k] = ids
	}
	answered := map[string]bool{}
	bursts := map[ref]*burstIDs{}
	for _, d := range sent {
		if d.kind == sendControl {
			continue
		}
		if d.agent == agentBurst {
			// Debounced: proved by burst below.
			k := ref{d.agent, d.session}
			if bursts[k] == nil {
				bursts[k] = &burstIDs{ok: map[string]bool{}, tried: map[string]bool{}}
			}
			bursts[k].tried[d.id] = true
			if d.ok {
				bursts[k].ok[d.id] = true
			}
			continue
		}
		r.add(d.kind+" deliveries", 1)
		r.add(d.kind+" delivery attempts", d.attempts)
		if d.repeat {
			r.add(d.kind+" redeliveries of an id", 1)
		}
		if !d.ok {
			r.add(d.kind+" deliveries never answered 2xx", 1)
			continue
		}
		r.add(d.kind+" deliveries answered 2xx", 1)
		k := ref{d.agent, d.session}
		if answered[k.String()+" "+d.id] {
			continue
		}
		answered[k.String()+" "+d.id] = true
		r.add(d.kind+" events answered 2xx", 1)
		switch n := recorded[k][d.id]; n {
		case 1:
			r.add(d.kind+" events processed once", 1)
		case 0:
			r.violate(k, "%s event %s was answered %d %s but is not in the transcript", d.kind, d.id, d.status, strings.TrimSpace(d.answer))
			r.unsettled = append(r.unsettled, k.String()+" lacks event "+d.id)
		default:
			r.violate(k, "%s event %s is in the transcript %d times", d.kind, d.id, n)
		}
	}

	checkBursts(r, bursts)
	if err := checkConcurrency(r, intervalsOf(s.ledger)); err != nil {
		return nil, err
	}

	// Every control message answered 2xx was applied once: one control or
	// system entry records its JL_CTL sequence, or, for a steer, it waits
	// in the state for the session's next model call. A message sent
	// again with its Idempotency-Key is stored once.
	firstSeq := map[string]uint64{}
	applied := map[uint64]bool{}
	for _, d := range sent {
		if d.kind != sendControl {
			continue
		}
		r.add("control messages sent", 1)
		r.add("control message attempts", d.attempts)
		if !d.ok {
			r.add("control messages never answered 2xx", 1)
			continue
		}
		r.add("control messages answered 2xx", 1)
		k := ref{d.agent, d.session}
		if prev, ok := firstSeq[d.id]; ok {
			if prev != d.seq {
				r.violate(k, "control message %s sent again with its Idempotency-Key was stored twice: seq %d and %d", d.id, prev, d.seq)
			}
			continue
		}
		firstSeq[d.id] = d.seq
		if applied[d.seq] {
			continue
		}
		applied[d.seq] = true
		tr, ok := r.sessions[k]
		if !ok {
			r.violate(k, "%s (seq %d) for a session that does not exist", d.verb, d.seq)
			continue
		}
		n := 0
		for _, e := range tr.Transcript {
			if (e.Kind == record.KindControl || e.Kind == record.KindSystem) && e.Event != nil && e.Event.Seq == d.seq &&
				(e.Event.Type == "steer" || strings.HasPrefix(e.Event.Type, "dev.jetloop.control.")) {
				n++
			}
		}
		for _, st := range tr.Steers {
			if st.Seq == d.seq {
				n++
				r.add("control steers waiting for a next model call", 1)
			}
		}
		switch n {
		case 1:
			r.add("control messages applied once", 1)
		case 0:
			r.violate(k, "%s (seq %d, id %s) was answered 2xx but never applied", d.verb, d.seq, d.id)
			r.unsettled = append(r.unsettled, fmt.Sprintf("%s has not applied control seq %d", k, d.seq))
		default:
			r.violate(k, "%s (seq %d, id %s) was applied %d times", d.verb, d.seq, d.id, n)
		}
	}
	return r, nil
}

// burstIDs are the requests sent to one session of the debounced agent:
// every id tried, and those answered 2xx.
type burstIDs struct{ ok, tried map[string]bool }

// checkBursts proves every burst of the debounced agent ran once and
// counted its events once: each event entry of a burst session stands
// for a burst (its count, 1 for a single event) whose latest event is one
// that was sent and appears in no other entry; and the counts add up to
// every request answered 2xx, plus at most those never answered 2xx (a
// request stored in its burst whose answer a fault lost, retried past its
// attempts).
func checkBursts(r *report, sent map[ref]*burstIDs) {
	for k, ids := range sent {
		tr, ok := r.sessions[k]
		if !ok {
			if len(ids.ok) > 0 {
				r.violate(k, "%d requests answered 2xx, and the session does not exist", len(ids.ok))
				r.unsettled = append(r.unsettled, k.String()+" does not exist yet")
			}
			continue
		}
		total, seen := 0, map[string]bool{}
		for _, e := range tr.Transcript {
			if (e.Kind != record.KindEvent && e.Kind != record.KindUser) || e.Event == nil {
				continue
			}
			n := max(1, e.Event.Count)
			total += n
			r.add("bursts run", 1)
			r.add("burst requests in them", n)
			if seen[e.Event.ID] {
				r.violate(k, "the burst of latest event %s ran twice", e.Event.ID)
			}
			seen[e.Event.ID] = true
			if !ids.tried[e.Event.ID] {
				r.violate(k, "a burst's latest event %s was never sent", e.Event.ID)
			}
		}
		if total < len(ids.ok) || total > len(ids.tried) {
			r.violate(k, "its bursts count %d requests; %d were answered 2xx, %d sent", total, len(ids.ok), len(ids.tried))
			if total < len(ids.ok) {
				r.unsettled = append(r.unsettled, fmt.Sprintf("%s has run %d of its %d burst requests", k, total, len(ids.ok)))
			}
		}
	}
}

// checkConcurrency proves the limited agent never ran more than its limit
// of runs at once: its tool calls, which run inside its runs, note when
// they began and ended, and no more than limitedRuns of them overlap.
// A call with no end (stopped by a fault) or settled as interrupted is
// left out: its worker lost the session, and with it its slot, while the
// call may have gone on.
func checkConcurrency(r *report, path string) error {
	lines, err := readLines(path)
	if err != nil {
		return err
	}
	type span struct{ begin, end int64 }
	spans := map[string]*span{}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 4 {
			continue
		}
		t, err := strconv.ParseInt(f[len(f)-1], 10, 64)
		if err != nil {
			continue
		}
		key := strings.Join(f[1:len(f)-1], " ") // session call
		sp := spans[key]
		if sp == nil {
			sp = &span{}
			spans[key] = sp
		}
		switch f[0] {
		case "begin":
			sp.begin = t
		case "end":
			sp.end = t
		}
	}
	interrupted := map[string]bool{}
	for k, tr := range r.sessions {
		if k.agent != agentLimited {
			continue
		}
		for _, e := range tr.Transcript {
			if e.Kind == record.KindToolResult && e.IsError {
				interrupted[k.session+" "+e.CallID] = true
			}
		}
	}
	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	for key, sp := range spans {
		if sp.begin == 0 || sp.end == 0 || interrupted[key] {
			r.add("limited calls left out (cut by a fault)", 1)
			continue
		}
		r.add("limited calls timed", 1)
		edges = append(edges, edge{sp.begin, 1}, edge{sp.end, -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at != edges[j].at {
			return edges[i].at < edges[j].at
		}
		return edges[i].delta < edges[j].delta // an end before a begin at the same instant
	})
	now, most := 0, 0
	for _, e := range edges {
		now += e.delta
		most = max(most, now)
	}
	r.add(fmt.Sprintf("limited calls at once, at most (limit %d)", limitedRuns), most)
	if most > limitedRuns {
		r.violate(ref{agent: agentLimited}, "%d of its runs went on at once, over its limit of %d", most, limitedRuns)
	}
	return nil
}

// checkDelegations proves every delegated session ran once and every
// delegate call got exactly one result: each child session records one
// delegate event (its start, never twice), names a parent that has the
// call, and, once its run ended, answered it; each delegate call a parent
// settled as delegated has its child session (no child lost), and its
// one result (counted with every call's) comes from that child unless
// the parent's run ended first.
func checkDelegations(r *report) {
	delegatedTo := map[string]string{} // "parent call" → child, from the parents' entries
	for k, tr := range r.sessions {
		for _, e := range tr.Transcript {
			if e.Kind == record.KindSystem && e.Name == "delegate" && e.CallID != "" {
				if i := strings.Index(e.Text, " delegated to "); i >= 0 {
					child, _, _ := strings.Cut(e.Text[i+len(" delegated to "):], ";")
					key := k.String() + " " + e.CallID
					if prev, ok := delegatedTo[key]; ok && prev != child {
						r.violate(k, "call %s delegated to %s and to %s", e.CallID, prev, child)
					}
					delegatedTo[key] = child
				}
			}
		}
	}
	r.add("delegate calls delegated", len(delegatedTo))
	children := map[string]bool{}
	for k, tr := range r.sessions {
		d := tr.Delegation
		if d == nil {
			continue
		}
		r.add("delegated sessions", 1)
		children[k.String()] = true
		starts := 0
		for _, e := range tr.Transcript {
			if e.Kind == record.KindEvent && e.Name == "dev.jetloop.delegate" {
				starts++
			}
		}
		if starts != 1 {
			r.violate(k, "delegated session records its start %d times", starts)
		}
		pa, ps, _ := strings.Cut(d.Parent, "/")
		parent, ok := r.sessions[ref{pa, ps}]
		if !ok {
			r.violate(k, "delegated by %s, which does not exist", d.Parent)
			continue
		}
		if delegatedTo[d.Parent+" "+d.CallID] != k.String() {
			r.violate(k, "its parent %s did not record call %s as delegated to it", d.Parent, d.CallID)
		}
		results := 0
		for _, e := range parent.Transcript {
			if e.Kind == record.KindToolResult && e.CallID == d.CallID {
				results++
			}
		}
		if results != 1 {
			r.violate(k, "its parent's call %s has %d results", d.CallID, results)
		}
		if tr.Status.Ended() && !d.Answered {
			r.violate(k, "its run ended %s without answering its parent", tr.Status)
			r.unsettled = append(r.unsettled, k.String()+" has not answered "+d.Parent)
		}
		if d.Answered {
			r.add("delegated sessions answered", 1)
		}
	}
	for key, child := range delegatedTo {
		if !children[child] {
			parent, call, _ := strings.Cut(key, " ")
			pa, ps, _ := strings.Cut(parent, "/")
			r.violate(ref{pa, ps}, "call %s was delegated to %s, which never started", call, child)
			r.unsettled = append(r.unsettled, child+" never started")
		}
	}
}

// lineRef is the session of a ledger line "agent session call".
func lineRef(line string) ref {
	f := strings.Fields(line)
	if len(f) < 3 {
		return ref{}
	}
	return ref{f[0], strings.Join(f[1:len(f)-1], " ")}
}

func readLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out, sc.Err()
}

// countLines renders the counts, sorted.
func (r *report) countLines() []string {
	var out []string
	for k, n := range r.counts {
		out = append(out, fmt.Sprintf("%-52s %d", k, n))
	}
	sort.Strings(out)
	return out
}

// describe renders a session's transcript for a violation's report: its
// state and its last entries, at most max of them (0: all).
func describe(tr record.Transcript, max int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "session %s/%s: status %s", tr.Agent, tr.Session, tr.Status)
	if tr.Reason != "" {
		fmt.Fprintf(&b, " (%s)", tr.Reason)
	}
	if tr.Pending != nil {
		fmt.Fprintf(&b, ", pending %s step %d call %s owner %s", tr.Pending.Kind, tr.Pending.Step, tr.Pending.CallID, tr.Pending.Owner)
	}
	for _, st := range tr.Steers {
		fmt.Fprintf(&b, "\n  steer waiting: seq %d %q", st.Seq, st.Text)
	}
	entries := tr.Transcript
	if max > 0 && len(entries) > max {
		fmt.Fprintf(&b, "\n  (%d earlier entries)", len(entries)-max)
		entries = entries[len(entries)-max:]
	}
	for _, e := range entries {
		fmt.Fprintf(&b, "\n  %4d t%-3d %-11s", e.ID, e.Turn, e.Kind)
		if e.Name != "" {
			fmt.Fprintf(&b, " %s", e.Name)
		}
		if e.CallID != "" {
			fmt.Fprintf(&b, " call=%s", e.CallID)
		}
		if e.Event != nil {
			fmt.Fprintf(&b, " event=%s seq=%d", e.Event.ID, e.Event.Seq)
		}
		text := e.Text
		if e.Kind == record.KindToolResult {
			text = e.Result
		}
		if text != "" {
			fmt.Fprintf(&b, " %q", clip(text, 80))
		}
		if e.IsError {
			b.WriteString(" [error]")
		}
	}
	return b.String()
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

var (
	markerRE = regexp.MustCompile(`<!-- jetloop:([^ ]+) -->`)
	postedRE = regexp.MustCompile(`^posted comment (\d+) `)
)

// checkComments holds the fake GitHub's comments against the transcripts'
// calls ("agent session call").
func checkComments(r *report, comments []ghfake.Comment, calls map[string]bool) {
	r.add("github comments", len(comments))
	byMarker := map[string]int{}
	ids := map[string]bool{}
	for _, c := range comments {
		ids[strconv.FormatInt(c.ID, 10)] = true
		m := markerRE.FindStringSubmatch(c.Body)
		if m == nil {
			r.violate(ref{agentReviewer, c.Repo + "#" + strconv.Itoa(c.Number)}, "comment %d has no marker: %q", c.ID, c.Body)
			continue
		}
		byMarker[m[1]]++
	}
	for m, n := range byMarker {
		// agent/session/call, the session holding '/' itself.
		agent, rest, _ := strings.Cut(m, "/")
		i := strings.LastIndex(rest, "/")
		if i < 0 {
			r.violate(ref{agent, rest}, "marker %q names no call", m)
			continue
		}
		k := ref{agent, rest[:i]}
		if n > 1 {
			r.violate(k, "GitHub comment posted %d times for call %s", n, rest[i+1:])
		}
		if !calls[agent+" "+rest[:i]+" "+rest[i+1:]] {
			r.violate(k, "comment marker %q is no tool call of any transcript", m)
		}
	}
	for k, tr := range r.sessions {
		for _, e := range tr.Transcript {
			if e.Kind != record.KindToolResult || e.Name != "github_comment" || e.IsError {
				continue
			}
			r.add("github_comment results", 1)
			m := postedRE.FindStringSubmatch(e.Result)
			if m == nil || !ids[m[1]] {
				r.violate(k, "github_comment result %s %q names no comment GitHub has", e.CallID, e.Result)
			}
		}
	}
}
