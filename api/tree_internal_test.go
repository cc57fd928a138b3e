package api

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/record"
)

// A waiting session says what each session it waits for is doing now: a
// child blocked on an approval makes its parent, and its grandparent,
// report that approval.
func TestDescribeWaiting(t *testing.T) {
	all := []record.Summary{
		{Agent: "lead", Session: "s", Status: record.StatusWaiting, Children: []string{"mid/lead/s/call_1", "rev/lead/s/call_2", "late/lead/s/call_3"}},
		{Agent: "mid", Session: "lead/s/call_1", Status: record.StatusWaiting, DelegatedBy: "lead/s", Children: []string{"leaf/mid/lead/s/call_1/call_0"}},
		{Agent: "leaf", Session: "mid/lead/s/call_1/call_0", Status: record.StatusBlocked, WaitingFor: "call_7", DelegatedBy: "mid/lead/s/call_1"},
		{Agent: "rev", Session: "lead/s/call_2", Status: record.StatusDone, Reason: "", DelegatedBy: "lead/s"},
	}
	describeWaitingIn(all)
	want := "the answers of mid/lead/s/call_1 (waiting: the answers of leaf/mid/lead/s/call_1/call_0 (blocked: call_7)), " +
		"rev/lead/s/call_2 (done), late/lead/s/call_3 (not started yet)"
	if all[0].WaitingFor != want {
		t.Fatalf("waiting_for\n%s\nwant\n%s", all[0].WaitingFor, want)
	}
	if !strings.Contains(all[1].WaitingFor, "(blocked: call_7)") || all[2].WaitingFor != "call_7" {
		t.Fatalf("mid %q, leaf %q", all[1].WaitingFor, all[2].WaitingFor)
	}
}

// A wide tree keeps a waiting session's description bounded: children
// past the bound are counted, and a child's own description is cut.
func TestDescribeWaitingIsBounded(t *testing.T) {
	all := []record.Summary{{Agent: "lead", Session: "s", Status: record.StatusWaiting}}
	for i := range 1000 {
		mid := fmt.Sprintf("mid/lead/s/call_%d", i)
		all[0].Children = append(all[0].Children, mid)
		m := record.Summary{Agent: "mid", Session: strings.TrimPrefix(mid, "mid/"), Status: record.StatusWaiting, DelegatedBy: "lead/s"}
		for j := range 50 {
			leaf := fmt.Sprintf("leaf/%s/call_%d", mid, j)
			m.Children = append(m.Children, leaf)
			all = append(all, record.Summary{Agent: "leaf", Session: strings.TrimPrefix(leaf, "leaf/"), Status: record.StatusBlocked,
				WaitingFor: strings.Repeat("approval of a long call ", 20), DelegatedBy: mid})
		}
		all = append(all, m)
	}
	describeWaitingIn(all)
	for _, x := range all {
		if len(x.WaitingFor) > maxWaitingFor {
			t.Fatalf("%s/%s says %d bytes of what it waits for, more than %d", x.Agent, x.Session, len(x.WaitingFor), maxWaitingFor)
		}
	}
	if w := all[0].WaitingFor; !strings.HasPrefix(w, "the answers of mid/lead/s/call_0 (waiting: the answers of leaf/") || !strings.Contains(w, " more") {
		t.Fatalf("waiting_for %q", w)
	}
}

// Forest puts each session under its parent, in the order of the calls.
func TestForest(t *testing.T) {
	rows := []record.Summary{
		{Agent: "a", Session: "s"},
		{Agent: "b", Session: "a/s/call_10_0", DelegatedBy: "a/s", DelegatedCall: "call_10_0"},
		{Agent: "b", Session: "a/s/call_2_0", DelegatedBy: "a/s", DelegatedCall: "call_2_0"},
		{Agent: "c", Session: "b/a/s/call_2_0/x", DelegatedBy: "b/a/s/call_2_0", DelegatedCall: "x"},
		{Agent: "d", Session: "orphan", DelegatedBy: "gone/s"},
	}
	f := Forest(rows)
	if len(f) != 2 || f[0].Agent != "a" || f[1].Agent != "d" || len(f[0].Children) != 2 ||
		f[0].Children[0].DelegatedCall != "call_2_0" || f[0].Children[1].DelegatedCall != "call_10_0" ||
		len(f[0].Children[0].Children) != 1 || f[0].Children[0].Children[0].Agent != "c" {
		t.Fatalf("forest %+v", f)
	}
}
