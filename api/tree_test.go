package api_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
)

// requests records the subjects (and payloads) of the JetStream API
// requests that read jl_sessions while it runs.
type requests struct {
	sub    *nats.Subscription
	stream string
}

func watchRequests(t *testing.T, nc *nats.Conn, names streams.Names) *requests {
	t.Helper()
	sub, err := nc.SubscribeSync("$JS.API.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &requests{sub: sub, stream: streams.KVStream(names.BucketSessions())}
}

// stop returns the requests of jl_sessions seen so far. Once the flush
// is answered, the server has routed every request published before it
// on nc, and the copies are queued on the subscription ahead of the
// answer: they are read from that queue here, so none is lost to a
// callback that has not run yet when the subscription ends.
func (r *requests) stop(t *testing.T, nc *nats.Conn) []string {
	t.Helper()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		n, _, err := r.sub.Pending()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		m, err := r.sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("a queued request: %v", err)
		}
		if strings.Contains(m.Subject, r.stream) && !streamInfoOnly(m) {
			got = append(got, m.Subject+" "+string(m.Data))
		}
	}
	if err := r.sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	return got
}

// streamInfoOnly is a stream info request that asks for no subjects (a
// bucket's bind): one with a subjects filter lists the bucket's keys, a
// read like any other.
func streamInfoOnly(m *nats.Msg) bool {
	return strings.HasPrefix(m.Subject, "$JS.API.STREAM.INFO.") && !strings.Contains(string(m.Data), "subjects_filter")
}

// A show of a delegating session among many unrelated sessions reads the
// records of its own tree alone, and still lists every child it has (the
// answered ones of an earlier run too) and says what its waiting ones
// wait for, down to a grandchild's approval.
func TestShowReadsOnlyItsTree(t *testing.T) {
	h := start(t, api.Config{})
	store, err := record.Open(ctx(t), h.js, h.names)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	for i := range 300 {
		st := record.NewState(fmt.Sprintf("other-%d", i%7), fmt.Sprintf("s-%03d", i), now)
		if i%2 == 0 {
			// Delegated sessions of other trees, some waiting.
			st.Delegation = &record.Delegation{Parent: fmt.Sprintf("boss/s-%d", i), CallID: "call_1"}
			st.Status = record.StatusWaiting
			st.Children = []record.Child{{CallID: "c", Session: fmt.Sprintf("x/s-%d", i)}}
		}
		h.putSession(t, st, nil)
	}

	lead := ref(t, "lead", "s")
	mid := ref(t, "mid", "lead/s/call_1")
	rev := ref(t, "rev", "lead/s/call_0")
	leaf := ref(t, "leaf", "mid/lead/s/call_1/call_0")
	st := record.NewState(lead.Agent, lead.Session, now)
	st.Status = record.StatusWaiting
	st.Children = []record.Child{{CallID: "call_1", Session: mid.String()}}
	st.WaitingFor = "the answers of " + mid.String() + " (call call_1)"
	h.putSession(t, st, []record.Entry{{ID: 1, Kind: record.KindUser, Time: now, Text: "review it"}})
	m := record.NewState(mid.Agent, mid.Session, now)
	m.Status, m.Delegation = record.StatusWaiting, &record.Delegation{Parent: lead.String(), CallID: "call_1"}
	m.Children = []record.Child{{CallID: "call_0", Session: leaf.String()}}
	h.putSession(t, m, nil)
	r := record.NewState(rev.Agent, rev.Session, now)
	r.Status, r.Delegation, r.Turns = record.StatusDone, &record.Delegation{Parent: lead.String(), CallID: "call_0", Answered: true}, 2
	h.putSession(t, r, nil)
	l := record.NewState(leaf.Agent, leaf.Session, now)
	l.Status, l.WaitingFor, l.Delegation = record.StatusBlocked, "call_7", &record.Delegation{Parent: mid.String(), CallID: "call_0"}
	h.putSession(t, l, nil)
	for _, c := range []struct {
		parent, child streams.SessionRef
		call          string
	}{{lead, rev, "call_0"}, {lead, mid, "call_1"}, {mid, leaf, "call_0"}} {
		if err := store.NoteChild(ctx(t), c.parent, c.child, c.call); err != nil {
			t.Fatal(err)
		}
	}

	reqs := watchRequests(t, h.nc, h.names)
	sh, err := h.client.Show(ctx(t), api.ShowRequest{Agent: lead.Agent, Session: lead.Session})
	if err != nil {
		t.Fatal(err)
	}
	got := reqs.stop(t, h.nc)

	if len(sh.Children) != 2 || sh.Children[0].Session != mid.String() || sh.Children[0].Answered ||
		sh.Children[1].Session != rev.String() || !sh.Children[1].Answered || sh.Children[1].Status != record.StatusDone || sh.Children[1].SubtreeTurns != 2 {
		t.Fatalf("children %+v", sh.Children)
	}
	if want := "the answers of " + mid.String() + " (waiting: the answers of " + leaf.String() + " (blocked: call_7))"; sh.WaitingFor != want {
		t.Fatalf("waiting_for %q, want %q", sh.WaitingFor, want)
	}
	if len(got) == 0 {
		t.Fatal("show made no request of jl_sessions that the test saw")
	}
	// Every key or filter of jl_sessions a request names is one of the
	// tree's sessions' (a listing would name *.*.state).
	tree := []string{lead.Key() + ".", mid.Key() + ".", rev.Key() + ".", leaf.Key() + "."}
	keys := regexp.MustCompile(`\$KV\.` + regexp.QuoteMeta(h.names.BucketSessions()) + `\.([^" ]+)`)
	states := map[string]bool{}
	for _, g := range got {
		if strings.HasPrefix(g, "$JS.API.CONSUMER.DELETE.") {
			continue
		}
		named := keys.FindAllStringSubmatch(g, -1)
		if len(named) == 0 {
			t.Errorf("show of %s made a request of jl_sessions that names no key: %s", lead, g)
		}
		for _, k := range named {
			if !slices.ContainsFunc(tree, func(p string) bool { return strings.HasPrefix(k[1], p) }) {
				t.Errorf("show of %s read %s, beyond its tree: %s", lead, k[1], g)
			}
			if strings.HasSuffix(k[1], ".state") {
				states[k[1]] = true
			}
		}
	}
	if len(states) != len(tree) {
		t.Errorf("show read the states %v, want the %d of its tree", states, len(tree))
	}
}
