package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools/mcp/mcptest"
)

type harness struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	names  streams.Names
	svc    *api.Service
	client *api.Client
	rules  *admission.Rules
}

// start runs a provisioned server and the API service on it until the test
// ends.
func start(t testing.TB, cfg api.Config) *harness {
	t.Helper()
	return startProvisioned(t, cfg, streams.Options{})
}

// startProvisioned is start with the streams provisioned by opts (their
// names always the default ones).
func startProvisioned(t testing.TB, cfg api.Config, opts streams.Options) *harness {
	t.Helper()
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := streams.Default()
	opts.Names = names
	if _, err := streams.Provision(ctx, js, opts); err != nil {
		t.Fatal(err)
	}
	cfg.Names = names
	var rules *admission.Rules
	if cfg.Requests == nil {
		cfg.Requests, rules = ingestFor(t, js, names)
	}
	svc, err := api.New(ctx, nc, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := svc.Run(runCtx); err != nil {
			t.Errorf("run: %v", err)
		}
	})
	t.Cleanup(func() { stop(); wg.Wait() })
	client := api.NewClient(nc, names)
	// The service is up once it answers.
	natstest.WaitFor(t, 10*time.Second, func() error {
		_, err := client.Agents(context.Background())
		return err
	})
	return &harness{nc: nc, js: js, names: names, svc: svc, client: client, rules: rules}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func ref(t *testing.T, agent, session string) streams.SessionRef {
	t.Helper()
	r, err := streams.NewSessionRef(agent, session)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// ctlMsg reads the control message at seq back from JL_CTL.
func (h *harness) ctlMsg(t *testing.T, seq uint64) control.Message {
	t.Helper()
	st, err := h.js.Stream(ctx(t), h.names.StreamCtl())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetMsg(ctx(t), seq)
	if err != nil {
		t.Fatalf("JL_CTL message %d: %v", seq, err)
	}
	m, err := control.Parse(&nats.Msg{Subject: raw.Subject, Header: raw.Header, Data: raw.Data})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestServiceAnnouncesEveryEndpoint(t *testing.T) {
	h := start(t, api.Config{Build: "test"})
	msg, err := h.nc.Request("$SRV.INFO."+api.Name, nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Name      string `json:"name"`
		Version   string `json:"version"`
		Endpoints []struct {
			Name    string `json:"name"`
			Subject string `json:"subject"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range info.Endpoints {
		got[e.Name] = e.Subject
	}
	want := []string{"agents", "apply", "send", "status", "show", "context", "steer", "interrupt", "resume", "cancel", "approve", "deny", "fork", "schedules", "events", "dlq",
		"history", "definition", "diff", "rollback", "rollout"}
	if len(api.Endpoints()) != len(want) {
		t.Errorf("Endpoints() = %v, want %v", api.Endpoints(), want)
	}
	for _, name := range want {
		if got[name] != "jl.api."+name {
			t.Errorf("endpoint %s on %q, want jl.api.%s", name, got[name], name)
		}
	}
	if info.Name != "jetloop" || info.Version != api.Version {
		t.Errorf("service %s %s", info.Name, info.Version)
	}
}

// applyDemo stores examples/demo.yaml, so the agent "demo" exists.
func (h *harness) applyDemo(t *testing.T) {
	t.Helper()
	demo, err := os.ReadFile("../examples/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.Apply(ctx(t), api.ApplyRequest{Files: []api.File{{Name: "demo.yaml", Content: string(demo)}}}); err != nil {
		t.Fatal(err)
	}
	// The ingest's admission takes it.
	natstest.WaitFor(t, 10*time.Second, func() error {
		if _, ok := h.rules.Agent("demo"); !ok {
			return errors.New("admission has no demo yet")
		}
		return nil
	})
}

// session returns the state of a session of agent demo in status, after
// turns turns; blocked on call (an approval gate when gate is set).
func session(name string, status record.Status, turns int, call, gate string) record.State {
	var st record.State
	st.Agent, st.Session, st.Status, st.Since, st.Turns = "demo", name, status, time.Now().UTC(), turns
	if status == record.StatusBlocked {
		st.BlockedCall, st.WaitingFor, st.Approval = call, call, gate
	}
	return st
}

// ctlLast is JL_CTL's last sequence.
func (h *harness) ctlLast(t *testing.T) uint64 {
	t.Helper()
	st, err := h.js.Stream(ctx(t), h.names.StreamCtl())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// TestControlEndpoints sends every verb to sessions in the states it acts
// on, and in the states it cannot act on: those are answered 404, 409 or
// 400 naming why, and nothing is published.
func TestControlEndpoints(t *testing.T) {
	h := start(t, api.Config{})
	h.applyDemo(t)
	h.putSession(t, session("working", record.StatusWorking, 3, "", ""), nil)
	h.putSession(t, session("paused", record.StatusPaused, 2, "", ""), nil)
	h.putSession(t, session("gated", record.StatusBlocked, 2, "toolu_01", "rule 1"), nil)
	h.putSession(t, session("asking", record.StatusBlocked, 1, "toolu_07", ""), nil)
	h.putSession(t, session("done", record.StatusDone, 2, "", ""), nil)
	h.putSession(t, session("cancelled", record.StatusCancelled, 1, "", ""), nil)
	h.putSession(t, session("delegating", record.StatusWaiting, 2, "", ""), nil)
	// A session whose first event waits in JL_IN for a worker.
	if _, err := h.client.Send(ctx(t), api.SendRequest{Agent: "demo", Session: "queued", Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	turn, zero, past := 2, 0, 4
	tests := []struct {
		name    string
		verb    control.Verb
		req     api.ControlRequest
		wantErr error
		errText string
	}{
		{name: "steer", verb: control.Steer, req: api.ControlRequest{Session: "working", Text: "focus on the tests"}},
		{name: "steer a resting session", verb: control.Steer, req: api.ControlRequest{Session: "done", Text: "next time"}},
		{name: "interrupt", verb: control.Interrupt, req: api.ControlRequest{Session: "working"}},
		{name: "resume paused", verb: control.Resume, req: api.ControlRequest{Session: "paused", Text: "go on"}},
		{name: "resume ask_human", verb: control.Resume, req: api.ControlRequest{Session: "asking", Text: "yes"}},
		{name: "resume done with text", verb: control.Resume, req: api.ControlRequest{Session: "done", Text: "and then"}},
		{name: "cancel", verb: control.Cancel, req: api.ControlRequest{Session: "paused", Text: "wrong branch"}},
		{name: "approve", verb: control.Approve, req: api.ControlRequest{Session: "gated", CallID: "toolu_01"}},
		{name: "deny", verb: control.Deny, req: api.ControlRequest{Session: "gated", CallID: "toolu_01", Text: "not on main"}},
		{name: "fork", verb: control.Fork, req: api.ControlRequest{Session: "working", Turn: &turn, As: "working-retry"}},
		{name: "fork at turn 0", verb: control.Fork, req: api.ControlRequest{Session: "done", Turn: &zero, As: "done-0"}},

		{name: "steer of a session whose event waits", verb: control.Steer, req: api.ControlRequest{Session: "queued", Text: "be brief"}},
		{name: "interrupt of a session whose event waits", verb: control.Interrupt, req: api.ControlRequest{Session: "queued"}, wantErr: api.ErrConflict, errText: "the session is idle, not working"},
		{name: "unknown agent", verb: control.Steer, req: api.ControlRequest{Agent: "nosuchagent", Session: "x", Text: "hi"}, wantErr: api.ErrNotFound, errText: `no agent "nosuchagent"`},
		{name: "unknown session", verb: control.Steer, req: api.ControlRequest{Session: "nosuch", Text: "hi"}, wantErr: api.ErrNotFound, errText: "no session demo/nosuch"},
		{name: "cancel of an unknown session", verb: control.Cancel, req: api.ControlRequest{Session: "nosuch"}, wantErr: api.ErrNotFound, errText: "no session demo/nosuch"},
		{name: "approve of another call", verb: control.Approve, req: api.ControlRequest{Session: "gated", CallID: "toolu_99"}, wantErr: api.ErrConflict, errText: "call toolu_99 is not pending: the session waits for approval of call toolu_01"},
		{name: "deny of a session waiting for no approval", verb: control.Deny, req: api.ControlRequest{Session: "done", CallID: "toolu_01"}, wantErr: api.ErrConflict, errText: "the session is done and waits for no approval"},
		{name: "approve of an ask_human", verb: control.Approve, req: api.ControlRequest{Session: "asking", CallID: "toolu_07"}, wantErr: api.ErrConflict, errText: "waits for an answer to call toolu_07"},
		{name: "resume of a gated session", verb: control.Resume, req: api.ControlRequest{Session: "gated"}, wantErr: api.ErrConflict, errText: "approve or deny it"},
		{name: "resume of a done session", verb: control.Resume, req: api.ControlRequest{Session: "done"}, wantErr: api.ErrConflict, errText: "nothing to resume"},
		{name: "resume of a session waiting for its children", verb: control.Resume, req: api.ControlRequest{Session: "delegating"}, wantErr: api.ErrConflict, errText: "waits for the sessions it delegated to"},
		{name: "interrupt of a session waiting for its children", verb: control.Interrupt, req: api.ControlRequest{Session: "delegating"}, wantErr: api.ErrConflict, errText: "the session is waiting, not working"},
		{name: "cancel of a session waiting for its children", verb: control.Cancel, req: api.ControlRequest{Session: "delegating", Text: "enough"}},
		{name: "interrupt of a resting session", verb: control.Interrupt, req: api.ControlRequest{Session: "done"}, wantErr: api.ErrConflict, errText: "not working"},
		{name: "cancel of a cancelled session", verb: control.Cancel, req: api.ControlRequest{Session: "cancelled"}, wantErr: api.ErrConflict, errText: "already cancelled"},
		{name: "steer of a cancelled session", verb: control.Steer, req: api.ControlRequest{Session: "cancelled", Text: "x"}, wantErr: api.ErrConflict, errText: "cancelled"},
		{name: "fork onto an existing session", verb: control.Fork, req: api.ControlRequest{Session: "working", Turn: &turn, As: "done"}, wantErr: api.ErrConflict, errText: "session demo/done exists"},
		{name: "fork past the last turn", verb: control.Fork, req: api.ControlRequest{Session: "working", Turn: &past, As: "new"}, wantErr: api.ErrBadRequest, errText: "turn 4 is past the last turn, 3"},
		{name: "fork of an unknown session", verb: control.Fork, req: api.ControlRequest{Session: "nosuch", Turn: &zero, As: "new"}, wantErr: api.ErrNotFound, errText: "no session demo/nosuch"},

		{name: "steer without text", verb: control.Steer, req: api.ControlRequest{Session: "working"}, wantErr: api.ErrBadRequest, errText: "steer needs text"},
		{name: "approve without call id", verb: control.Approve, req: api.ControlRequest{Session: "gated"}, wantErr: api.ErrBadRequest, errText: "approve needs call_id"},
		{name: "fork without turn", verb: control.Fork, req: api.ControlRequest{Session: "working", As: "x"}, wantErr: api.ErrBadRequest, errText: "turn is required"},
		{name: "turn on cancel", verb: control.Cancel, req: api.ControlRequest{Session: "working", Turn: &turn}, wantErr: api.ErrBadRequest, errText: "turn is only for fork"},
		{name: "bad session", verb: control.Cancel, req: api.ControlRequest{Session: strings.Repeat("s", 300)}, wantErr: api.ErrBadRequest, errText: "session name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := tt.req
			if req.Agent == "" {
				req.Agent = "demo"
			}
			before := h.ctlLast(t)
			resp, err := h.client.Control(ctx(t), tt.verb, req)
			if tt.wantErr != nil {
				var e *api.Error
				if !errors.Is(err, tt.wantErr) || !errors.As(err, &e) || !strings.Contains(e.Message, tt.errText) {
					t.Fatalf("got %v, want %v saying %q", err, tt.wantErr, tt.errText)
				}
				if after := h.ctlLast(t); after != before {
					t.Errorf("a refused %s was published: JL_CTL went from %d to %d", tt.verb, before, after)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.Verb != tt.verb || resp.Agent != "demo" || resp.Session != req.Session || resp.Seq == 0 || resp.ID == "" {
				t.Errorf("response %+v", resp)
			}
			m := h.ctlMsg(t, resp.Seq)
			if m.Verb != tt.verb || m.Text != req.Text || m.CallID != req.CallID || m.As != req.As || m.ID != resp.ID || m.Source != "/jetloop/api" {
				t.Errorf("stored %+v for %+v", m, req)
			}
			if req.Turn != nil && m.Turn != *req.Turn {
				t.Errorf("stored turn %d, want %d", m.Turn, *req.Turn)
			}
		})
	}
}

// TestControlIdempotent sends one message twice with one id: it is stored
// once, and a retry after the first changed the session (an approve that
// was applied) is answered as the first was, not refused.
func TestControlIdempotent(t *testing.T) {
	h := start(t, api.Config{})
	h.applyDemo(t)
	h.putSession(t, session("main", record.StatusWorking, 1, "", ""), nil)
	req := api.ControlRequest{Agent: "demo", Session: "main", Text: "once", ID: "chat-42"}
	a, err := h.client.Control(ctx(t), control.Steer, req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.client.Control(ctx(t), control.Steer, req)
	if err != nil {
		t.Fatal(err)
	}
	if a.Seq != b.Seq {
		t.Errorf("a retry with one id was stored twice: seq %d and %d", a.Seq, b.Seq)
	}

	h.putSession(t, session("gated", record.StatusBlocked, 1, "toolu_1", "rule 1"), nil)
	approve := api.ControlRequest{Agent: "demo", Session: "gated", CallID: "toolu_1", ID: "chat-43"}
	first, err := h.client.Control(ctx(t), control.Approve, approve)
	if err != nil {
		t.Fatal(err)
	}
	// The worker applied it: the session works again.
	h.putSession(t, session("gated", record.StatusWorking, 1, "", ""), nil)
	again, err := h.client.Control(ctx(t), control.Approve, approve)
	if err != nil || again.Seq != first.Seq {
		t.Errorf("retry of an applied approve: %+v, %v; want seq %d", again, err, first.Seq)
	}
	approve.ID = "chat-44"
	if _, err := h.client.Control(ctx(t), control.Approve, approve); !errors.Is(err, api.ErrConflict) {
		t.Errorf("a new approve of the applied call: %v, want 409", err)
	}
}

func TestApplyAndAgents(t *testing.T) {
	h := start(t, api.Config{})
	demo, err := os.ReadFile("../examples/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bad := "name: broken\nmodel: {provider: scripted}\ntriggers:\n  - name: t\n    when: event.type ==\n"
	_, err = h.client.Apply(ctx(t), api.ApplyRequest{Files: []api.File{{Name: "demo.yaml", Content: string(demo)}, {Name: "broken.yaml", Content: bad}}})
	var e *api.Error
	if !errors.Is(err, api.ErrBadRequest) || !errors.As(err, &e) || len(e.Problems) == 0 || !strings.HasPrefix(e.Problems[0], "broken.yaml:") {
		t.Fatalf("apply with a broken file: got %#v, want a 400 listing broken.yaml's problems", err)
	}
	if got, err := h.client.Agents(ctx(t)); err != nil || len(got.Agents) != 0 {
		t.Fatalf("a refused apply stored %v (%v)", got.Agents, err)
	}
	res, err := h.client.Apply(ctx(t), api.ApplyRequest{Files: []api.File{{Name: "demo.yaml", Content: string(demo)}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Applied) != 1 || res.Applied[0].Agent != "demo" || res.Applied[0].Version == 0 || res.Applied[0].Unchanged {
		t.Errorf("applied %+v", res.Applied)
	}
	again, err := h.client.Apply(ctx(t), api.ApplyRequest{Files: []api.File{{Name: "demo.yaml", Content: string(demo)}}})
	if err != nil || !again.Applied[0].Unchanged || again.Applied[0].Version != res.Applied[0].Version {
		t.Errorf("second apply: %+v, %v", again, err)
	}
	agents, err := h.client.Agents(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(agents.Agents) != 1 || agents.Agents[0].Definition.Name != "demo" || agents.Agents[0].Source != "demo.yaml" {
		t.Errorf("agents %+v", agents.Agents)
	}
	if _, err := h.client.Apply(ctx(t), api.ApplyRequest{}); !errors.Is(err, api.ErrBadRequest) {
		t.Errorf("apply of nothing: %v", err)
	}
}

// putSession writes a session's state and transcript as a worker would.
func (h *harness) putSession(t *testing.T, st record.State, entries []record.Entry) {
	t.Helper()
	kv, err := h.js.KeyValue(ctx(t), h.names.BucketSessions())
	if err != nil {
		t.Fatal(err)
	}
	r := ref(t, st.Agent, st.Session)
	for _, e := range entries {
		b, _ := json.Marshal(e)
		if _, err := kv.Put(ctx(t), h.names.LogKey(r, e.ID), b); err != nil {
			t.Fatal(err)
		}
	}
	st.NextEntry = uint64(len(entries)) + 1
	b, _ := json.Marshal(st)
	if _, err := kv.Put(ctx(t), h.names.StateKey(r), b); err != nil {
		t.Fatal(err)
	}
	idx, err := record.OpenIndex(ctx(t), h.js, h.names)
	if err != nil {
		t.Fatal(err)
	}
	if err := idx.Heal(ctx(t), st); err != nil {
		t.Fatal(err)
	}
}

func TestSendStatusShow(t *testing.T) {
	h := start(t, api.Config{MaxResponse: 64 << 10})
	h.applyDemo(t)
	sent, err := h.client.Send(ctx(t), api.SendRequest{Agent: "demo", Session: "s1", Text: "hello", ID: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	in, err := h.js.Stream(ctx(t), h.names.StreamIn())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := in.GetMsg(ctx(t), sent.Seq)
	if err != nil || raw.Subject != h.names.In(ref(t, "demo", "s1")) {
		t.Fatalf("JL_IN message %d: %+v, %v", sent.Seq, raw, err)
	}
	if _, err := h.client.Send(ctx(t), api.SendRequest{Agent: "demo", Session: "s1", Text: " "}); !errors.Is(err, api.ErrBadRequest) {
		t.Errorf("empty text: %v", err)
	}

	now := time.Now().UTC().Truncate(time.Second)
	blocked := record.NewState("demo", "s1", now)
	blocked.Status, blocked.WaitingFor, blocked.Turns = record.StatusBlocked, "toolu_9", 1
	h.putSession(t, blocked, nil)
	var entries []record.Entry
	for i := range 40 {
		entries = append(entries, record.Entry{ID: uint64(i + 1), Kind: record.KindUser, Turn: i / 2, Time: now, Text: strings.Repeat("x", 4<<10)})
	}
	h.putSession(t, record.NewState("pr-reviewer", "octo/repo#12", now), entries)

	st, err := h.client.Status(ctx(t), api.StatusRequest{Status: "blocked"})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Sessions) != 1 || st.Sessions[0].Session != "s1" || st.Sessions[0].WaitingFor != "toolu_9" || !st.Sessions[0].Since.Equal(now) {
		t.Errorf("blocked sessions: %+v", st.Sessions)
	}
	all, err := h.client.Status(ctx(t), api.StatusRequest{})
	if err != nil || len(all.Sessions) != 2 {
		t.Errorf("all sessions: %+v, %v", all.Sessions, err)
	}

	// 40 entries of 4 KiB do not fit a 64 KiB response: page through them.
	var got []uint64
	from := uint64(0)
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("show does not end")
		}
		sh, err := h.client.Show(ctx(t), api.ShowRequest{Agent: "pr-reviewer", Session: "octo/repo#12", From: from})
		if err != nil {
			t.Fatal(err)
		}
		if sh.Agent != "pr-reviewer" || sh.Status != record.StatusIdle {
			t.Fatalf("show: %+v", sh.Transcript)
		}
		for _, e := range sh.Transcript.Transcript {
			got = append(got, e.ID)
		}
		if !sh.Truncated {
			break
		}
		if sh.Next == 0 || len(sh.Transcript.Transcript) == 0 {
			t.Fatalf("truncated page without progress: next %d", sh.Next)
		}
		from = sh.Next
	}
	if len(got) != 40 || got[0] != 1 || got[39] != 40 {
		t.Errorf("paged entries %v", got)
	}
	if _, err := h.client.Show(ctx(t), api.ShowRequest{Agent: "demo", Session: "nobody"}); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("show of a missing session: %v", err)
	}
}

func TestSchedulesAndEvents(t *testing.T) {
	h := start(t, api.Config{})
	s, err := h.client.Schedules(ctx(t), api.SchedulesRequest{})
	if err != nil || s.Schedules == nil || len(s.Schedules) != 0 {
		t.Errorf("schedules: %+v, %v", s, err)
	}
	_, err = h.client.Schedules(ctx(t), api.SchedulesRequest{Action: api.ScheduleResume, Agent: "a", Schedule: "nightly"})
	if !errors.Is(err, api.ErrNotFound) {
		t.Errorf("resume of a missing schedule: %v", err)
	}
	if _, err := h.client.Schedules(ctx(t), api.SchedulesRequest{Action: "restart"}); !errors.Is(err, api.ErrBadRequest) {
		t.Errorf("unknown action: %v", err)
	}
	ev, err := h.client.Events(ctx(t), api.EventsRequest{})
	if err != nil || ev.Records == nil {
		t.Errorf("events: %+v, %v", ev, err)
	}
	if _, err := h.client.Events(ctx(t), api.EventsRequest{Limit: api.MaxEvents + 1}); !errors.Is(err, api.ErrBadRequest) {
		t.Errorf("events over the limit: %v", err)
	}
}

func TestRequestErrors(t *testing.T) {
	h := start(t, api.Config{})
	msg, err := h.nc.Request(h.names.API("status"), []byte(`{"agent":"a","colour":"red"}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "400" || !strings.Contains(msg.Header.Get("Nats-Service-Error"), `unknown field "colour"`) {
		t.Errorf("unknown field: code %q, error %q", code, msg.Header.Get("Nats-Service-Error"))
	}
	for _, tt := range []struct{ endpoint, body, says string }{
		{"status", `{"status":"bogus"}`, `status "bogus"`},
		{"status", `{"agent":"a b"}`, `agent "a b"`},
		{"events", `{"agent":"a*"}`, `agent "a*"`},
		{"status", `{"agent":"a"} {}`, "more than one JSON value"},
	} {
		msg, err := h.nc.Request(h.names.API(tt.endpoint), []byte(tt.body), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if code := msg.Header.Get("Nats-Service-Error-Code"); code != "400" || !strings.Contains(msg.Header.Get("Nats-Service-Error"), tt.says) {
			t.Errorf("%s %s: code %q, error %q, want 400 saying %q", tt.endpoint, tt.body, code, msg.Header.Get("Nats-Service-Error"), tt.says)
		}
	}
	// No service on another prefix: the client says so.
	other, _ := streams.NewNames("other")
	_, err = api.NewClient(h.nc, other).Agents(ctx(t))
	if !errors.Is(err, api.ErrUnavailable) || !strings.Contains(err.Error(), "other.api.agents") {
		t.Errorf("no service: %v", err)
	}
}

func TestHTTP(t *testing.T) {
	h := start(t, api.Config{})
	mux := http.NewServeMux()
	h.svc.MountHTTP(mux, api.HTTPConfig{Token: "t0ken"})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	unconfigured := http.NewServeMux()
	h.svc.MountHTTP(unconfigured, api.HTTPConfig{})
	srv2 := httptest.NewServer(unconfigured)
	defer srv2.Close()

	do := func(t *testing.T, base, method, path, token, key, body string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx(t), method, base+path, bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatalf("%s %s: body: %v", method, path, err)
		}
		return resp.StatusCode, out
	}
	h.applyDemo(t)
	h.putSession(t, session("octo/repo#12", record.StatusBlocked, 1, "toolu_1", "rule 1"), nil)
	ctl := "/v1/agents/demo/sessions/" + "octo%2Frepo%2312" + "/control"
	tests := []struct {
		name       string
		base, path string
		token, key string
		body       string
		want       int
		wantText   string
	}{
		{name: "steer", token: "t0ken", body: `{"verb":"steer","text":"focus on the tests"}`, want: 202},
		{name: "approve with key", token: "t0ken", key: "slack-1", body: `{"verb":"approve","call_id":"toolu_1"}`, want: 202},
		{name: "fork", token: "t0ken", body: `{"verb":"fork","turn":1,"as":"octo/repo#12-b"}`, want: 202},
		{name: "unknown agent", base: srv.URL, token: "t0ken", path: "/v1/agents/nosuch/sessions/x/control", body: `{"verb":"cancel"}`, want: 404, wantText: `no agent "nosuch"`},
		{name: "unknown session", token: "t0ken", path: "/v1/agents/demo/sessions/nosuch/control", body: `{"verb":"cancel"}`, want: 404, wantText: "no session demo/nosuch"},
		{name: "approve of a call not pending", token: "t0ken", body: `{"verb":"approve","call_id":"toolu_2"}`, want: 409, wantText: "waits for approval of call toolu_1"},
		{name: "fork onto an existing session", token: "t0ken", body: `{"verb":"fork","turn":1,"as":"octo/repo#12"}`, want: 409, wantText: "session demo/octo/repo#12 exists"},
		{name: "fork past the last turn", token: "t0ken", body: `{"verb":"fork","turn":2,"as":"c"}`, want: 400, wantText: "past the last turn"},
		{name: "no token", body: `{"verb":"cancel"}`, want: 401, wantText: "bearer"},
		{name: "wrong token", token: "nope", body: `{"verb":"cancel"}`, want: 401, wantText: "bearer"},
		{name: "not configured", base: srv2.URL, token: "t0ken", body: `{"verb":"cancel"}`, want: 503, wantText: "JETLOOP_API_TOKEN"},
		{name: "no verb", token: "t0ken", body: `{"text":"x"}`, want: 400, wantText: "verb"},
		{name: "unknown verb", token: "t0ken", body: `{"verb":"stop"}`, want: 400, wantText: `unknown verb "stop"`},
		{name: "unknown field", token: "t0ken", body: `{"verb":"cancel","force":true}`, want: 400, wantText: "force"},
		{name: "deny without call id", token: "t0ken", body: `{"verb":"deny"}`, want: 400, wantText: "call_id"},
		{name: "fork without turn", token: "t0ken", body: `{"verb":"fork","as":"b"}`, want: 400, wantText: "turn"},
		{name: "too large", token: "t0ken", body: `{"verb":"steer","text":"` + strings.Repeat("a", 300<<10) + `"}`, want: 413, wantText: "bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := tt.base
			if base == "" {
				base = srv.URL
			}
			path := tt.path
			if path == "" {
				path = ctl
			}
			code, out := do(t, base, http.MethodPost, path, tt.token, tt.key, tt.body)
			if code != tt.want {
				t.Fatalf("status %d, want %d: %v", code, tt.want, out)
			}
			if tt.want != 202 {
				if msg, _ := out["message"].(string); !strings.Contains(msg, tt.wantText) || out["code"] != float64(tt.want) {
					t.Errorf("error %v does not say %q", out, tt.wantText)
				}
				return
			}
			seq := uint64(out["seq"].(float64))
			m := h.ctlMsg(t, seq)
			if m.Ref.Session != "octo/repo#12" || string(m.Verb) != out["verb"] || m.Source != "/jetloop/http" {
				t.Errorf("stored %+v", m)
			}
			if tt.key != "" && m.ID != tt.key {
				t.Errorf("id %q, want the Idempotency-Key %q", m.ID, tt.key)
			}
		})
	}
	t.Run("retry with one key", func(t *testing.T) {
		_, a := do(t, srv.URL, http.MethodPost, ctl, "t0ken", "k-7", `{"verb":"steer","text":"again"}`)
		_, b := do(t, srv.URL, http.MethodPost, ctl, "t0ken", "k-7", `{"verb":"steer","text":"again"}`)
		if a["seq"] != b["seq"] {
			t.Errorf("seq %v then %v", a["seq"], b["seq"])
		}
		code, c := do(t, srv.URL, http.MethodPost, ctl, "t0ken", "k-7", `{"verb":"interrupt"}`)
		if msg, _ := c["message"].(string); code != http.StatusConflict || !strings.Contains(msg, "Idempotency-Key") {
			t.Errorf("the key reused for another verb: %d %v, want 409", code, c)
		}
	})
	t.Run("sessions", func(t *testing.T) {
		h.putSession(t, stateAt("demo", "s1", record.StatusPaused), nil)
		h.putSession(t, stateAt("demo", "s2", record.StatusDone), nil)
		code, out := do(t, srv.URL, http.MethodGet, "/v1/sessions?status=paused", "t0ken", "", "")
		if code != 200 {
			t.Fatalf("status %d: %v", code, out)
		}
		ss, _ := out["sessions"].([]any)
		if len(ss) != 1 || ss[0].(map[string]any)["session"] != "s1" {
			t.Errorf("paused sessions: %v", out)
		}
		if code, _ := do(t, srv.URL, http.MethodGet, "/v1/sessions", "", "", ""); code != 401 {
			t.Errorf("sessions without a token: %d", code)
		}
	})
	// A filter that could never match is the sender's mistake, not an
	// empty answer.
	t.Run("unknown filters", func(t *testing.T) {
		for _, tt := range []struct{ query, says string }{
			{"status=bogus", `status "bogus": want one of idle, working`},
			{"status=Paused", `status "Paused"`},
			{"agent=a.b", `agent "a.b"`},
			{"colour=red", `unknown query parameter "colour"`},
			{"status=paused&status=done", `"status" given 2 times`},
			{"status=%zz", "query"},
		} {
			code, out := do(t, srv.URL, http.MethodGet, "/v1/sessions?"+tt.query, "t0ken", "", "")
			if msg, _ := out["message"].(string); code != 400 || !strings.Contains(msg, tt.says) {
				t.Errorf("?%s: %d %v, want 400 saying %q", tt.query, code, out, tt.says)
			}
		}
	})
	t.Run("trailing data", func(t *testing.T) {
		code, out := do(t, srv.URL, http.MethodPost, ctl, "t0ken", "", `{"verb":"steer","text":"x"} {"verb":"cancel"}`)
		if code != 400 {
			t.Errorf("control body with a second object: %d %v", code, out)
		}
	})
}

// stateAt is a new session's state in status st.
func stateAt(agent, session string, st record.Status) record.State {
	s := record.NewState(agent, session, time.Now().UTC())
	s.Status = st
	return s
}

func TestApplyRecordsMCPCatalogs(t *testing.T) {
	h := start(t, api.Config{})
	srv := mcptest.ServeHTTP(t, func() *sdk.Server { return mcptest.NewServer(mcptest.Options{Name: "srv"}) })
	file := func(tools string) string {
		return fmt.Sprintf("name: m\nmodel: {provider: scripted}\nmcp_servers:\n  - name: srv\n    url: %s\n    tools: [%s]\n", srv.URL, tools)
	}
	_, err := h.client.Apply(ctx(t), api.ApplyRequest{Files: []api.File{{Name: "m.yaml", Content: file("echo, ehco")}}})
	var e *api.Error
	if !errors.As(err, &e) || len(e.Problems) != 1 || !strings.HasPrefix(e.Problems[0], "m.yaml:6:") || !strings.Contains(e.Problems[0], `offers no tool "ehco"; it offers echo, list_issues, slow`) {
		t.Fatalf("apply of a tool the server lacks: %v", err)
	}
	if got, err := h.client.Agents(ctx(t)); err != nil || len(got.Agents) != 0 {
		t.Fatalf("a refused apply stored %v (%v)", got.Agents, err)
	}
	if _, err := h.client.Apply(ctx(t), api.ApplyRequest{Files: []api.File{{Name: "m.yaml", Content: file("echo")}}}); err != nil {
		t.Fatal(err)
	}
	agents, err := h.client.Agents(ctx(t))
	if err != nil || len(agents.Agents) != 1 {
		t.Fatalf("agents %v, %v", agents, err)
	}
	cat := agents.Agents[0].Definition.MCPServers[0].Catalog
	if len(cat) != 1 || cat[0].Name != "echo" || cat[0].Description != mcptest.DefaultEchoDescription || !strings.Contains(string(cat[0].Schema), `"text"`) {
		t.Fatalf("recorded catalog %+v", cat)
	}
}

// shortWindow is JL_CTL's duplicate window in the harness of tests that
// outlast it.
const shortWindow = 100 * time.Millisecond

// outlastWindow waits until a message published now is outside JL_CTL's
// duplicate window: a second publish of its id is stored again. The
// harness must have provisioned the window short (shortWindow) from the
// start: the server forgets an id when its purge timer fires, and that
// timer is armed for the window in force when it was set, so shrinking a
// long window with a stream update can leave it armed for the old one
// (the update fires the timer at once but sets the new window only later,
// and a purge in between re-arms for the old window's remaining minutes).
func (h *harness) outlastWindow(t *testing.T) {
	t.Helper()
	st, err := h.js.Stream(ctx(t), h.names.StreamCtl())
	if err != nil {
		t.Fatal(err)
	}
	if w := st.CachedInfo().Config.Duplicates; w > time.Second {
		t.Fatalf("JL_CTL's duplicate window is %s: provision it short to outlast it", w)
	}
	probe := &nats.Msg{Subject: h.names.Ctl(ref(t, "probe", "window")), Header: nats.Header{"Nats-Msg-Id": []string{"window-probe"}}}
	if _, err := h.js.PublishMsg(ctx(t), probe); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		ack, err := h.js.PublishMsg(ctx(t), probe)
		if err != nil {
			return err
		}
		if ack.Duplicate {
			return errors.New("still inside the duplicate window")
		}
		return nil
	})
}

// A control request's id (the HTTP Idempotency-Key) holds as long as
// events are deduplicated, not only inside JL_CTL's window: a retry gets
// the first answer and publishes nothing, and the id used again for
// another request is refused with 409, never 202.
func TestControlIdempotentBeyondTheWindow(t *testing.T) {
	h := startProvisioned(t, api.Config{}, streams.Options{DedupeWindow: shortWindow})
	h.applyDemo(t)
	h.putSession(t, session("main", record.StatusWorking, 1, "", ""), nil)
	req := api.ControlRequest{Agent: "demo", Session: "main", Text: "focus on the tests", ID: "chat-7"}
	first, err := h.client.Control(ctx(t), control.Steer, req)
	if err != nil {
		t.Fatal(err)
	}
	h.outlastWindow(t)
	last := h.ctlLast(t)
	again, err := h.client.Control(ctx(t), control.Steer, req)
	if err != nil || again.Seq != first.Seq || !again.Duplicate {
		t.Fatalf("retry after the window: %+v, %v; want seq %d, duplicate", again, err, first.Seq)
	}
	if h.ctlLast(t) != last {
		t.Fatal("a retry after the window was published again")
	}
	other := req
	other.Text = "ignore the tests"
	if _, err := h.client.Control(ctx(t), control.Steer, other); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "different control request") {
		t.Fatalf("the id reused for another text: %v, want 409", err)
	}
	if _, err := h.client.Control(ctx(t), control.Cancel, api.ControlRequest{Agent: "demo", Session: "main", ID: "chat-7"}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("the id reused for another verb: %v, want 409", err)
	}
	if h.ctlLast(t) != last {
		t.Fatal("a refused request was published")
	}
	// The id is the session's and the sender's: another session may use it.
	h.putSession(t, session("other", record.StatusWorking, 1, "", ""), nil)
	if r, err := h.client.Control(ctx(t), control.Cancel, api.ControlRequest{Agent: "demo", Session: "other", ID: "chat-7"}); err != nil || r.Duplicate {
		t.Fatalf("the id in another session: %+v, %v", r, err)
	}
}
