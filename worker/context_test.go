package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/window"
	"github.com/jetloop/jetloop/worker"
)

// recorder keeps every request a model received.
type recorder struct {
	mu   sync.Mutex
	reqs []model.Request
	m    model.Model
}

func (r *recorder) Complete(ctx context.Context, req model.Request) (model.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return r.m.Complete(ctx, req)
}

func (r *recorder) requests() []model.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]model.Request(nil), r.reqs...)
}

func (r *recorder) factory(spec policies.Model) (model.Model, error) {
	m, err := model.NewScripted(spec)
	r.m = m
	return r, err
}

// size is a request's size in bytes of text.
func size(req model.Request) int {
	n := len(req.System)
	for _, m := range req.Messages {
		n += len(m.Text)
		for _, c := range m.ToolCalls {
			n += len(c.Args)
		}
		for _, r := range m.ToolResults {
			n += len(r.Content)
		}
	}
	return n
}

// big is a tool whose every result is 3 KB.
type big struct{}

func (big) Spec() tools.Spec {
	return tools.Spec{Name: "probe", Description: "measure", Schema: json.RawMessage(`{"type":"object"}`), ReplaySafe: true, State: tools.Stateless}
}

func (big) Call(_ context.Context, c tools.Call) (tools.Result, error) {
	return tools.Result{Content: c.ID + ": " + strings.Repeat("latency ok; ", 256)}, nil
}

// A persistent session under a context policy: old tool results reach
// the model as placeholders with a handle, the context is compacted into
// a summary when it would pass compact_at_tokens, the notes are in every
// call, and the requests stay bounded while the transcript keeps every
// entry.
func TestContextPolicyBoundsRequests(t *testing.T) {
	e := setup(t)
	kv, err := e.js.KeyValue(context.Background(), e.names.BucketSessions())
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(tools.RegistryOptions{}, append(tools.Builtins(tools.BuiltinConfig{Sessions: kv}), big{})...)
	if err != nil {
		t.Fatal(err)
	}
	keepFirst, keepLast := 1, 2
	def := policies.Definition{Name: "mon", Tools: []string{"probe"},
		System: "You watch an endpoint.",
		Model: policies.Model{Provider: "scripted", ScriptScope: "run", Script: []policies.ScriptEntry{
			{Text: "Measuring.", ToolCalls: []policies.ScriptToolCall{{Name: "probe"}}},
			{Text: "Noted.", ToolCalls: []policies.ScriptToolCall{{Name: "notes_write", Args: map[string]any{"text": "baseline: latency ok", "mode": "replace"}}}},
			{Text: "Nothing drifted."},
		}},
		Context: &policies.ContextPolicy{MaskAfterTurns: 3, CompactAtTokens: 2000, KeepFirstTurns: &keepFirst, KeepLastTurns: &keepLast, Notes: true},
	}
	rec := &recorder{}
	e.start(t, worker.Config{Definitions: defs{"mon": def}, Tools: worker.RegistryTools(reg), Models: rec.factory, Agents: []string{"mon"}})
	ref := e.ref(t, "mon", "health")
	const events = 12
	for i := range events {
		e.send(t, ref, "tick")
		e.waitStatusTurns(t, ref, record.StatusDone, 3*(i+1))
	}
	tr := e.waitStatus(t, ref, record.StatusDone)
	reqs := rec.requests()
	var summaries, compactions int
	for _, en := range tr.Transcript {
		if en.Kind == record.KindSummary {
			summaries++
			if en.Covers == nil || en.Covers.From == 0 || en.Covers.To < en.Covers.From || en.Text == "" {
				t.Errorf("summary %d covers %v: %q", en.ID, en.Covers, en.Text)
			}
		}
	}
	var maxSize, firstSize int
	for i, r := range reqs {
		if r.Compact {
			compactions++
			continue
		}
		if i == 0 {
			firstSize = size(r)
		}
		maxSize = max(maxSize, size(r))
	}
	if summaries == 0 || summaries != compactions {
		t.Fatalf("%d summaries, %d compaction requests", summaries, compactions)
	}
	// Every entry stays in the transcript: 3 answers, 2 calls, 2 results
	// and the input per event, and the summaries.
	if got, want := len(tr.Transcript), events*8+summaries; got != want {
		t.Fatalf("transcript has %d entries, want %d: %s", got, want, kinds(tr))
	}
	last := reqs[len(reqs)-1]
	text := requestText(last)
	for _, want := range []string{"[summary of the earlier conversation", "[masked: the result of probe", "read_blob", "baseline: latency ok"} {
		if !strings.Contains(text, want) {
			t.Errorf("the last request lacks %q", want)
		}
	}
	// Bounded: one event adds a probe result of 3 KB; the context stays
	// within the threshold (2000 tokens, 8000 bytes) and one event.
	t.Logf("requests: first %d bytes, largest %d, %d compactions", firstSize, maxSize, compactions)
	if maxSize > 8000+6000 {
		t.Fatalf("largest request %d bytes (first %d)", maxSize, firstSize)
	}
	var offered []string
	for _, sp := range last.Tools {
		offered = append(offered, sp.Name)
	}
	if strings.Join(offered, ",") != "probe,read_blob,notes_read,notes_write" {
		t.Fatalf("tools offered: %v", offered)
	}
	st, _, err := loadState(e, ref)
	if err != nil {
		t.Fatal(err)
	}
	if st.Summary == 0 || st.HeadEnd == 0 || st.From == 0 || st.Summarised == 0 {
		t.Fatalf("window %+v", st.Window)
	}
	// A masked result reads back whole with its handle.
	var handle string
	for _, m := range last.Messages {
		for _, r := range m.ToolResults {
			if i := strings.Index(r.Content, `{"handle": "`); i >= 0 && handle == "" {
				handle = r.Content[i+len(`{"handle": "`):]
				handle = handle[:strings.Index(handle, `"`)]
			}
		}
	}
	rb, _ := reg.Get("read_blob")
	res, err := rb.Call(context.Background(), tools.Call{Agent: "mon", Session: "health", Args: json.RawMessage(`{"handle": "` + handle + `"}`)})
	if err != nil || res.IsError || !strings.Contains(res.Content, "latency ok; latency ok;") {
		t.Fatalf("read_blob %q: %+v, %v", handle, res, err)
	}
	res, _ = rb.Call(context.Background(), tools.Call{Agent: "mon", Session: "other", Args: json.RawMessage(`{"handle": "` + handle + `"}`)})
	if !res.IsError {
		t.Fatalf("another session read %q", handle)
	}
}

func requestText(r model.Request) string {
	var b strings.Builder
	b.WriteString(r.System)
	for _, m := range r.Messages {
		b.WriteString("\n" + m.Text)
		for _, res := range m.ToolResults {
			b.WriteString("\n" + res.Content)
		}
	}
	return b.String()
}

func loadState(e *env, ref streams.SessionRef) (record.State, uint64, error) {
	s, err := record.Open(context.Background(), e.js, e.names)
	if err != nil {
		return record.State{}, 0, err
	}
	return s.Load(context.Background(), ref)
}

// waitStatusTurns waits until the session rests in status after at least
// turns turns.
func (e *env) waitStatusTurns(t *testing.T, ref streams.SessionRef, want record.Status, turns int) {
	t.Helper()
	natstest.WaitFor(t, 30*time.Second, func() error {
		st, _, err := loadState(e, ref)
		if err != nil {
			return err
		}
		if st.Status != want || st.Turns < turns {
			return fmt.Errorf("status %s after %d turns (%s), want %s after %d", st.Status, st.Turns, st.Reason, want, turns)
		}
		return nil
	})
}

// A trigger's payload decides what of an event the model sees: a CEL
// map or string, the whole data with payload: full, the compact GitHub
// projection by default; one that fails to evaluate falls back to the
// projection and says why.
func TestTriggerPayload(t *testing.T) {
	e := setup(t)
	def, err := policies.Parse("rev.yaml", []byte(`name: rev
model: {provider: scripted, script: [{text: seen}]}
tools: [read_event]
triggers:
  - {name: mapped, when: "true", payload: '{"title": event.data.pull_request.title, "n": event.data.number}'}
  - {name: text, when: "true", payload: '"PR " + string(event.data.number) + " by " + event.data.sender.login'}
  - {name: whole, when: "true", payload: full}
  - {name: projected, when: "true"}
  - {name: broken, when: "true", payload: '{"x": event.data.nothing}'}
`))
	if err != nil {
		t.Fatal(err)
	}
	e.start(t, worker.Config{Definitions: defs{"rev": def.Definition}, Agents: []string{"rev"}})
	body := `{"action": "opened", "number": 12, "sender": {"login": "octo"}, "pull_request": {"number": 12, "title": "Fix it", "html_url": "https://github.com/o/r/pull/12", "_links": {"self": "https://api.github.com/x"}}, "repository": {"full_name": "o/r"}}`
	for _, tt := range []struct {
		trigger    string
		want, miss []string
	}{
		{trigger: "mapped", want: []string{`{"n":12,"title":"Fix it"}`, `read_event {"seq":`}, miss: []string{"_links", "octo"}},
		{trigger: "text", want: []string{"PR 12 by octo"}, miss: []string{"_links"}},
		{trigger: "whole", want: []string{`"_links"`, `"html_url"`}, miss: []string{"read_event"}},
		{trigger: "projected", want: []string{`"event":"pull_request"`, `"url":"https://github.com/o/r/pull/12"`, `read_event {"seq":`}, miss: []string{"_links"}},
		{trigger: "broken", want: []string{"the payload of trigger broken failed", `"event":"pull_request"`}, miss: []string{"_links"}},
	} {
		ref := e.ref(t, "rev", tt.trigger)
		ev := event.New()
		ev.SetID("d-" + tt.trigger)
		ev.SetSource("https://github.com/o/r")
		ev.SetType("com.github.pull_request.opened")
		ev.SetExtension(admission.ExtTrigger, tt.trigger)
		if err := ev.SetData(event.ApplicationJSON, []byte(body)); err != nil {
			t.Fatal(err)
		}
		m, err := events.ToMsg(e.names.In(ref), ev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		tr := e.waitStatus(t, ref, record.StatusDone)
		text := tr.Transcript[0].Text
		for _, w := range tt.want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: the event's text lacks %q:\n%s", tt.trigger, w, text)
			}
		}
		for _, m := range tt.miss {
			if strings.Contains(text, m) {
				t.Errorf("%s: the event's text has %q:\n%s", tt.trigger, m, text)
			}
		}
	}
}

// A fork takes the session's notes with it; the original keeps its own.
func TestForkCarriesNotes(t *testing.T) {
	e := setup(t)
	def := policies.Definition{Name: "demo", Model: scripted(policies.ScriptEntry{Text: "one"}, policies.ScriptEntry{Text: "two"}),
		Context: &policies.ContextPolicy{Notes: true}}
	e.start(t, worker.Config{Definitions: defs{"demo": def}, Agents: []string{"demo"}})
	ref := e.ref(t, "demo", "s1")
	e.send(t, ref, "start")
	e.waitStatus(t, ref, record.StatusDone)
	kv, err := e.js.KeyValue(context.Background(), e.names.BucketSessions())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(tools.Notes{Text: "baseline 41 ms", Call: "c1"})
	if _, err := kv.Put(context.Background(), e.names.NotesKey(ref), b); err != nil {
		t.Fatal(err)
	}
	publish(t, e, ref, control.Message{Verb: control.Fork, Turn: 1, As: "s1-copy", Text: "go on"})
	child := e.ref(t, "demo", "s1-copy")
	e.waitStatus(t, child, record.StatusDone)
	n, _, err := tools.ReadNotes(context.Background(), kv, e.names, child)
	if err != nil || n.Text != "baseline 41 ms" {
		t.Fatalf("child's notes %+v, %v", n, err)
	}
}

// A compaction keeps every call with its result through the real worker:
// the first turn's call waits for an approval, whose control entry sits
// between the call and its result, where keep_first_turns ends; every
// request the model receives pairs each call with its result, as
// providers require.
func TestCompactionKeepsApprovedCallsWithResults(t *testing.T) {
	e := setup(t)
	const events = 8
	script := []policies.ScriptEntry{}
	for i := 1; i <= events; i++ {
		script = append(script,
			policies.ScriptEntry{Text: "Measuring.", ToolCalls: []policies.ScriptToolCall{{Name: "probe", Args: map[string]any{"n": i}}}},
			policies.ScriptEntry{Text: fmt.Sprintf("Measured %d.", i)})
	}
	keepFirst, keepLast := 1, 2
	def := policies.Definition{Name: "mon", Tools: []string{"probe"}, System: "You watch an endpoint.",
		Model:     policies.Model{Provider: "scripted", Script: script},
		Approvals: []policies.Approval{{Name: "first", When: `tool.name == "probe" && tool.args.n == 1`}},
		Context:   &policies.ContextPolicy{CompactAtTokens: 2000, KeepFirstTurns: &keepFirst, KeepLastTurns: &keepLast},
	}
	rec := &recorder{}
	e.start(t, worker.Config{Definitions: defs{"mon": def}, Tools: worker.ToolMap{"probe": big{}}, Models: rec.factory, Agents: []string{"mon"}})
	ref := e.ref(t, "mon", "health")
	e.send(t, ref, "tick")
	tr := e.waitStatus(t, ref, record.StatusBlocked)
	publish(t, e, ref, control.Message{Verb: control.Approve, CallID: tr.WaitingFor})
	e.waitStatusTurns(t, ref, record.StatusDone, 2)
	for i := 1; i < events; i++ {
		e.send(t, ref, "tick")
		e.waitStatusTurns(t, ref, record.StatusDone, 2*(i+1))
	}
	compactions := 0
	for i, req := range rec.requests() {
		if req.Compact {
			compactions++
			continue
		}
		open := map[string]bool{}
		for j, m := range req.Messages {
			switch m.Role {
			case model.RoleTool:
				for _, r := range m.ToolResults {
					if !open[r.CallID] {
						t.Fatalf("request %d, message %d: the result of call %s follows no call of it", i, j, r.CallID)
					}
					delete(open, r.CallID)
				}
			default:
				if len(open) > 0 {
					t.Fatalf("request %d, message %d (%s): calls %v have no results", i, j, m.Role, open)
				}
				for _, c := range m.ToolCalls {
					open[c.ID] = true
				}
			}
		}
	}
	if compactions == 0 {
		t.Fatal("no compaction")
	}
}

// Call ids stay unique over a compacted session's whole transcript,
// though each model call sees only the live context: a script that starts
// over at every run answers the same positions again and again.
func TestCallIDsUniqueAcrossCompactions(t *testing.T) {
	e := setup(t)
	keepFirst, keepLast := 0, 1
	def := policies.Definition{Name: "mon", Tools: []string{"probe"},
		Model: policies.Model{Provider: "scripted", ScriptScope: "run", Script: []policies.ScriptEntry{
			{Text: "Measuring.", ToolCalls: []policies.ScriptToolCall{{Name: "probe"}}},
			{Text: "Nothing drifted."},
		}},
		Context: &policies.ContextPolicy{CompactAtTokens: 1000, KeepFirstTurns: &keepFirst, KeepLastTurns: &keepLast},
	}
	e.start(t, worker.Config{Definitions: defs{"mon": def}, Tools: worker.ToolMap{"probe": big{}}, Agents: []string{"mon"}})
	ref := e.ref(t, "mon", "health")
	const events = 8
	for i := range events {
		e.send(t, ref, "tick")
		e.waitStatusTurns(t, ref, record.StatusDone, 2*(i+1))
	}
	tr := e.waitStatus(t, ref, record.StatusDone)
	seen := map[string]uint64{}
	summaries := 0
	for _, en := range tr.Transcript {
		if en.Kind == record.KindSummary {
			summaries++
		}
		if en.Kind != record.KindToolCall {
			continue
		}
		if first, ok := seen[en.CallID]; ok {
			t.Fatalf("call id %s of entry %d is entry %d's too", en.CallID, en.ID, first)
		}
		seen[en.CallID] = en.ID
	}
	if summaries == 0 || len(seen) != events {
		t.Fatalf("%d summaries, %d calls", summaries, len(seen))
	}
}

// keep_last_turns: 1 keeps only the turn in progress, and the session is
// compacted: whether the next call compacts first is decided on the
// context with what the write that starts it records (the event, the
// tool's result), not without it.
func TestKeepLastOneCompacts(t *testing.T) {
	e := setup(t)
	keepFirst, keepLast := 1, 1
	def := policies.Definition{Name: "mon", Tools: []string{"probe"},
		Model: policies.Model{Provider: "scripted", ScriptScope: "run", Script: []policies.ScriptEntry{
			{Text: "Measuring.", ToolCalls: []policies.ScriptToolCall{{Name: "probe"}}},
			{Text: "Nothing drifted."},
		}},
		Context: &policies.ContextPolicy{CompactAtTokens: 1000, KeepFirstTurns: &keepFirst, KeepLastTurns: &keepLast},
	}
	rec := &recorder{}
	e.start(t, worker.Config{Definitions: defs{"mon": def}, Tools: worker.ToolMap{"probe": big{}}, Models: rec.factory, Agents: []string{"mon"}})
	ref := e.ref(t, "mon", "health")
	const events = 10
	for i := range events {
		e.send(t, ref, "tick")
		e.waitStatusTurns(t, ref, record.StatusDone, 2*(i+1))
	}
	compactions, largest := 0, 0
	for _, r := range rec.requests() {
		if r.Compact {
			compactions++
			continue
		}
		largest = max(largest, size(r))
	}
	// Each event adds a 3 KB result: without compaction the last call
	// carries all ten (30 KB); with it, the threshold (about 4 KB) and
	// the head's and the current turn's results.
	if compactions == 0 || largest > 4000+3*3200 {
		t.Fatalf("%d compactions, largest request %d bytes", compactions, largest)
	}
}

// Every request a session builds going on from the one before is the one
// built whole from the same input, byte for byte: over a persistent
// session whose results are masked as they age, whose context is
// compacted and whose notes change, and over one whose answers make
// several calls at once.
func TestRequestsGoOnFromTheLastAsBuiltWhole(t *testing.T) {
	var mu sync.Mutex
	var built, differ, appended int
	var first string
	worker.OnRequestBuilt(t, func(got, whole window.Context, went bool) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(whole)
		mu.Lock()
		defer mu.Unlock()
		built++
		if went {
			appended++
		}
		if string(g) != string(w) && differ == 0 {
			first = fmt.Sprintf("request %d:\ngot   %s\nwhole %s", built, g, w)
		}
		if string(g) != string(w) {
			differ++
		}
	})
	e := setup(t)
	kv, err := e.js.KeyValue(context.Background(), e.names.BucketSessions())
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(tools.RegistryOptions{}, append(tools.Builtins(tools.BuiltinConfig{Sessions: kv}), big{})...)
	if err != nil {
		t.Fatal(err)
	}
	keepFirst, keepLast := 1, 2
	mon := policies.Definition{Name: "mon", Tools: []string{"probe"}, System: "You watch an endpoint.",
		Model: policies.Model{Provider: "scripted", ScriptScope: "run", Script: []policies.ScriptEntry{
			{Text: "Measuring.", ToolCalls: []policies.ScriptToolCall{{Name: "probe"}}},
			{Text: "Noted.", ToolCalls: []policies.ScriptToolCall{{Name: "notes_write", Args: map[string]any{"text": "baseline: latency ok", "mode": "append"}}}},
			{Text: "Nothing drifted."},
		}},
		Context: &policies.ContextPolicy{MaskAfterTurns: 3, CompactAtTokens: 2000, KeepFirstTurns: &keepFirst, KeepLastTurns: &keepLast, Notes: true},
	}
	fan := policies.Definition{Name: "fan", Tools: []string{"probe"},
		Model: policies.Model{Provider: "scripted", ScriptScope: "run", Script: []policies.ScriptEntry{
			{Text: "Both.", ToolCalls: []policies.ScriptToolCall{{Name: "probe"}, {Name: "probe"}}},
			{Text: "Again.", ToolCalls: []policies.ScriptToolCall{{Name: "probe"}, {Name: "probe"}, {Name: "probe"}}},
			{Text: "Done <&>."},
		}},
	}
	e.start(t, worker.Config{Definitions: defs{"mon": mon, "fan": fan}, Tools: worker.RegistryTools(reg), Agents: []string{"mon", "fan"}})
	monRef, fanRef := e.ref(t, "mon", "health"), e.ref(t, "fan", "f")
	const events = 10
	for i := range events {
		e.send(t, monRef, "tick")
		e.send(t, fanRef, fmt.Sprintf("go %d", i))
		e.waitStatusTurns(t, monRef, record.StatusDone, 3*(i+1))
		e.waitStatusTurns(t, fanRef, record.StatusDone, 3*(i+1))
	}
	tr := e.waitStatus(t, monRef, record.StatusDone)
	summaries := 0
	for _, en := range tr.Transcript {
		if en.Kind == record.KindSummary {
			summaries++
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if summaries == 0 || built < 2*3*events {
		t.Fatalf("%d summaries, %d requests built: the session did not compact or call", summaries, built)
	}
	if differ > 0 {
		t.Fatalf("%d of %d requests differ from the whole build; the first, %s", differ, built, first)
	}
	// Each run's first call is built whole (the run loads its
	// definition), and so is the one after a compaction or a change of
	// the notes; the fan session's second and third calls of every run
	// go on from the call before.
	if appended < 2*events {
		t.Fatalf("%d of %d requests went on from the one before, want at least %d", appended, built, 2*events)
	}
}
