package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/jetloop/jetloop/ledger"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
)

// Delegation trees as status and show report them: a waiting session
// says what each session it waits for is doing (a reviewer blocked on an
// approval makes its parent say so), show lists a session's children
// with their statuses, and Forest arranges a status listing as trees.

// maxWaitDepth bounds how far down a waiting session's description goes.
const maxWaitDepth = 3

// maxWaitingFor bounds a waiting session's description: the children past
// it are counted, not named, so a wide tree keeps a status row small.
const maxWaitingFor = 4096

// cutText is s cut to at most n bytes, at a rune boundary, marked "…".
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	keep := n - len("…")
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + "…"
}

// describeWaiting rewrites the waiting_for of every waiting session of a
// page of the status listing with what the sessions it waits for are
// doing now: those not on the page are read from their states.
func (s *Service) describeWaiting(ctx context.Context, page []record.Summary) error {
	on := make(map[string]bool, len(page))
	for _, x := range page {
		on[x.Agent+"/"+x.Session] = true
	}
	var missing []streams.SessionRef
	for _, x := range page {
		if x.Status != record.StatusWaiting {
			continue
		}
		for _, c := range x.Children {
			if on[c] {
				continue
			}
			agent, session, _ := strings.Cut(c, "/")
			if ref, err := streams.NewSessionRef(agent, session); err == nil {
				missing = append(missing, ref)
				on[c] = true
			}
		}
	}
	if len(missing) == 0 {
		describeWaitingIn(page)
		return nil
	}
	extra, err := record.Summaries(ctx, s.js, s.names, missing)
	if err != nil {
		return err
	}
	all := append(slices.Clone(page), extra...)
	describeWaitingIn(all)
	copy(page, all[:len(page)])
	return nil
}

// describeWaitingIn rewrites the waiting_for of every waiting session in
// all with what the sessions it waits for (in all too) are doing now.
func describeWaitingIn(all []record.Summary) {
	by := make(map[string]int, len(all))
	for i, x := range all {
		by[x.Agent+"/"+x.Session] = i
	}
	var describe func(i, depth int) string
	describe = func(i, depth int) string {
		x := all[i]
		if x.Status != record.StatusWaiting || len(x.Children) == 0 || depth > maxWaitDepth {
			return x.WaitingFor
		}
		parts := make([]string, 0, min(len(x.Children), 64))
		size := len("the answers of ")
		for k, c := range x.Children {
			part := c + " (not started yet)"
			if j, ok := by[c]; ok {
				ch := all[j]
				what := string(ch.Status)
				if w := describe(j, depth+1); w != "" && (ch.Status == record.StatusBlocked || ch.Status == record.StatusWaiting || ch.Status == record.StatusQueued) {
					what += ": " + cutText(w, maxWaitingFor/8) // room for its siblings
				}
				part = c + " (" + what + ")"
			}
			if k > 0 && size+len(part) > maxWaitingFor-32 {
				parts = append(parts, fmt.Sprintf("and %d more", len(x.Children)-k))
				break
			}
			parts = append(parts, part)
			size += len(part) + 2
		}
		return cutText("the answers of "+strings.Join(parts, ", "), maxWaitingFor)
	}
	out := make([]string, len(all))
	for i := range all {
		out[i] = describe(i, 0)
	}
	for i := range all {
		all[i].WaitingFor = out[i]
	}
}

// Node is a session in a delegation tree, with the sessions it delegated
// to.
type Node struct {
	record.Summary
	Children []Node `json:"children,omitempty"`
}

// Forest arranges sessions as delegation trees: each session under the
// one that delegated to it, in the order given; a session whose parent is
// not among them is a root.
func Forest(rows []record.Summary) []Node {
	by := make(map[string]int, len(rows))
	for i, x := range rows {
		by[x.Agent+"/"+x.Session] = i
	}
	kids := make(map[int][]int, len(rows))
	var roots []int
	for i, x := range rows {
		if p, ok := by[x.DelegatedBy]; ok && x.DelegatedBy != "" && p != i {
			kids[p] = append(kids[p], i)
			continue
		}
		roots = append(roots, i)
	}
	for p := range kids {
		// A session's children in the order of its calls.
		slices.SortStableFunc(kids[p], func(a, b int) int { return naturalCompare(rows[a].DelegatedCall, rows[b].DelegatedCall) })
	}
	var build func(i, depth int) Node
	build = func(i, depth int) Node {
		n := Node{Summary: rows[i]}
		if depth > maxTreeDepth {
			return n
		}
		for _, k := range kids[i] {
			n.Children = append(n.Children, build(k, depth+1))
		}
		return n
	}
	out := make([]Node, 0, len(roots))
	for _, r := range roots {
		out = append(out, build(r, 0))
	}
	return out
}

// naturalCompare orders strings with their runs of digits as numbers:
// call_2_0 before call_10_0.
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := cmp.Compare(len(na), len(nb)); c != 0 {
				return c
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func digits(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

// maxTreeDepth bounds a tree's depth, well past the deepest a delegation
// may go.
const maxTreeDepth = 64

// children lists every session ref delegated to, among all, with its
// status and usage; the ones its state still waits for are not answered.
func children(ref streams.SessionRef, all []record.Summary, awaited []record.ChildStatus) []record.ChildStatus {
	waiting := make(map[string]bool, len(awaited))
	for _, c := range awaited {
		waiting[c.Session] = true
	}
	var out []record.ChildStatus
	for _, x := range all {
		if x.DelegatedBy != ref.String() {
			continue
		}
		name := x.Agent + "/" + x.Session
		out = append(out, record.ChildStatus{
			Session: name, CallID: x.DelegatedCall, Answered: !waiting[name],
			Status: x.Status, Since: x.Since, WaitingFor: x.WaitingFor, Reason: x.Reason,
			SubtreeTurns: x.SubtreeTurns, SubtreeTokens: x.SubtreeTokens, SubtreeCostUSD: x.SubtreeCostUSD,
		})
		delete(waiting, name)
	}
	for _, c := range awaited {
		if waiting[c.Session] {
			// Its start is admitted but not read yet.
			out = append(out, c)
		}
	}
	return out
}

// maxWaitReads bounds the states show reads below a session's children
// to say what its waiting descendants wait for; a session whose children
// are past it is described by its own waiting_for.
const maxWaitReads = 1000

// delegationOf fills in tr the sessions it delegated to and its ledger
// account, when it has either. It reads the session's child keys, its
// children's states, and those of the waiting ones' awaited sessions a
// few levels down: what it costs grows with the session's tree, not with
// the deployment.
func (s *Service) delegationOf(ctx context.Context, ref streams.SessionRef, tr *record.Transcript) error {
	kids, err := record.Children(ctx, s.js, s.names, ref)
	if err != nil {
		return err
	}
	self := record.Summary{Agent: tr.Agent, Session: tr.Session, Status: tr.Status, WaitingFor: tr.WaitingFor}
	for _, c := range tr.Children {
		self.Children = append(self.Children, c.Session)
	}
	all := append([]record.Summary{self}, kids...)
	if all, err = s.awaitedBelow(ctx, all); err != nil {
		return err
	}
	describeWaitingIn(all)
	tr.WaitingFor = all[0].WaitingFor
	tr.Children = children(ref, all[1:1+len(kids)], tr.Children)
	if s.ledger == nil {
		return nil
	}
	acct, err := s.ledger.Get(ctx, ref)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("api: ledger of %s: %w", ref, err)
	}
	tr.Ledger = &acct
	return nil
}

// awaitedBelow adds to all (a session and its children) the sessions its
// waiting sessions wait for, read by name, level by level as deep as
// describeWaitingIn describes them, at most maxWaitReads states. A
// waiting session whose awaited sessions are not read loses its Children
// here, so it is described by its own waiting_for.
func (s *Service) awaitedBelow(ctx context.Context, all []record.Summary) ([]record.Summary, error) {
	on := make(map[string]bool, len(all))
	for _, x := range all {
		on[x.Agent+"/"+x.Session] = true
	}
	level, reads := []int{0}, 0
	for depth := 0; depth <= maxWaitDepth && len(level) > 0; depth++ {
		var missing []streams.SessionRef
		for _, i := range level {
			x := &all[i]
			if x.Status != record.StatusWaiting {
				continue
			}
			var want []streams.SessionRef
			for _, c := range x.Children {
				if on[c] {
					continue
				}
				agent, session, _ := strings.Cut(c, "/")
				if r, err := streams.NewSessionRef(agent, session); err == nil {
					want = append(want, r)
				}
			}
			if reads+len(want) > maxWaitReads {
				x.Children = nil
				continue
			}
			reads += len(want)
			for _, r := range want {
				on[r.String()] = true
			}
			missing = append(missing, want...)
		}
		next := []int{}
		if depth == 0 {
			// The children are read already.
			for i := 1; i < len(all); i++ {
				next = append(next, i)
			}
		}
		if len(missing) > 0 {
			extra, err := record.Summaries(ctx, s.js, s.names, missing)
			if err != nil {
				return nil, err
			}
			for i := range extra {
				next = append(next, len(all)+i)
			}
			all = append(all, extra...)
		}
		level = next
	}
	return all, nil
}
