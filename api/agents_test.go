package api_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/policies"
)

func agentFile(answer, extra string) api.File {
	return api.File{Name: "agents/a.yaml", Content: `name: a
model: {provider: scripted, script: [{text: ` + answer + `}]}
triggers:
  - {name: req, when: 'event.type == "dev.jetloop.request"', session: event.subject}
` + extra}
}

func TestVersionsThroughTheAPI(t *testing.T) {
	h := start(t, api.Config{})
	c := ctx(t)
	apply := func(f api.File) api.Applied {
		t.Helper()
		resp, err := h.client.Apply(c, api.ApplyRequest{Files: []api.File{f}, By: "alice@box"})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Applied[0]
	}
	if a := apply(agentFile("one", "")); a.Version != 1 || !a.Created || a.Unchanged || !strings.HasPrefix(a.Hash, "sha256:") {
		t.Fatalf("first apply: %+v", a)
	}
	if a := apply(agentFile("one", "")); a.Version != 1 || a.Created || !a.Unchanged {
		t.Fatalf("same file again: %+v", a)
	}
	if a := apply(agentFile("two", "rollout: {percent: 10, guard: {max_failure_rate: 0.2}}\n")); a.Version != 2 || a.Rollout == nil || a.Rollout.Stable != 1 || !strings.Contains(a.Summary, "canary v2 at 10% beside stable v1") {
		t.Fatalf("canary apply: %+v", a)
	}
	// A rollout the agent's state refuses is a 400 naming the file, line
	// and field, and nothing of the apply is stored.
	_, err := h.client.Apply(c, api.ApplyRequest{Files: []api.File{agentFile("three", ""), agentFile("four", "rollout: {version: 9, percent: 5}\n")}})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != 400 || len(ae.Problems) != 1 || !strings.HasPrefix(ae.Problems[0], "agents/a.yaml:5:20: rollout.version: 9") {
		t.Fatalf("refused rollout: %v %+v", err, ae)
	}

	hist, err := h.client.History(c, api.HistoryRequest{Agent: "a"})
	if err != nil || len(hist.Entries) != 2 || hist.Newest != 2 || hist.Rollout == nil || hist.Entries[0].By != "alice@box" || hist.Entries[0].Source != "agents/a.yaml" {
		t.Fatalf("history: %+v %v", hist, err)
	}
	def, err := h.client.Definition(c, api.DefinitionRequest{Agent: "a", Version: 1})
	if err != nil || def.Record.Version != 1 || !strings.Contains(def.YAML, "text: one") || !strings.HasPrefix(def.Serving, "stable") {
		t.Fatalf("definition v1: %+v %v", def, err)
	}
	if def, err := h.client.Definition(c, api.DefinitionRequest{Agent: "a"}); err != nil || def.Record.Version != 2 || !strings.HasPrefix(def.Serving, "canary at 10%") {
		t.Fatalf("newest definition: %+v %v", def, err)
	}
	d, err := h.client.Diff(c, api.DiffRequest{Agent: "a", From: 1, To: 2})
	if err != nil || d.Same || !strings.Contains(d.Diff, "--- a v1\n+++ a v2\n") || !strings.Contains(d.Diff, "-    - text: one\n+    - text: two\n") {
		t.Fatalf("diff: %+v %v", d, err)
	}

	// The rollout verb promotes; a rollback is a new version.
	pct := func(p float64) *float64 { return &p }
	r, err := h.client.Rollout(c, api.RolloutRequest{Agent: "a", Version: 2, Percent: pct(100), By: "ops"})
	if err != nil || r.Created || r.Entry.Ended == nil || r.Entry.Ended.Outcome != policies.RolloutPromoted {
		t.Fatalf("promote: %+v %v", r, err)
	}
	rb, err := h.client.Rollback(c, api.RollbackRequest{Agent: "a", By: "ops"})
	if err != nil || !rb.Created || rb.Version != 3 || rb.Entry.Restores != 1 || rb.Entry.By != "ops" {
		t.Fatalf("rollback: %+v %v", rb, err)
	}
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"rollback to what serves", func() error {
			_, err := h.client.Rollback(c, api.RollbackRequest{Agent: "a", To: 1})
			return err
		}, api.ErrConflict},
		{"rollout without percent", func() error { _, err := h.client.Rollout(c, api.RolloutRequest{Agent: "a", Version: 2}); return err }, api.ErrBadRequest},
		{"rollout of the stable content", func() error {
			_, err := h.client.Rollout(c, api.RolloutRequest{Agent: "a", Version: 1, Percent: pct(5)})
			return err
		}, api.ErrConflict},
		{"unknown agent", func() error { _, err := h.client.History(c, api.HistoryRequest{Agent: "zz"}); return err }, api.ErrNotFound},
		{"unknown version", func() error {
			_, err := h.client.Definition(c, api.DefinitionRequest{Agent: "a", Version: 42})
			return err
		}, api.ErrNotFound},
		{"diff without versions", func() error { _, err := h.client.Diff(c, api.DiffRequest{Agent: "a"}); return err }, api.ErrBadRequest},
	} {
		if err := tc.call(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}

	ev, err := h.client.Events(c, api.EventsRequest{Agent: "a", Since: time.Now().Add(-time.Minute)})
	if err != nil || len(ev.Changes) != 4 || ev.Changes[3].Restores != 1 || ev.Changes[2].Ended == nil {
		t.Fatalf("events: %+v %v", ev.Changes, err)
	}
}

// A change stored by a writer that stopped before recording it in
// JL_AUDIT is listed by events all the same, once.
func TestEventsListAChangeWhoseWriterStopped(t *testing.T) {
	h := start(t, api.Config{})
	c := ctx(t)
	resp, err := h.client.Apply(c, api.ApplyRequest{Files: []api.File{agentFile("one", "")}, By: "alice@box"})
	if err != nil {
		t.Fatal(err)
	}
	compiled, err := policies.Parse("agents/a.yaml", []byte(agentFile("two", "").Content))
	if err != nil {
		t.Fatal(err)
	}
	two := compiled.Definition
	rec := policies.Record{Definition: two, Version: 2, Hash: policies.ContentHash(two), AppliedBy: "bob@box", AppliedAt: time.Now().UTC(), Change: policies.ChangeApply}
	b, _ := json.Marshal(rec)
	kv, err := h.js.KeyValue(c, h.names.BucketAgents())
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(c, "a")
	if err != nil || resp.Applied[0].Version != 1 {
		t.Fatal(err)
	}
	if _, err := kv.Update(c, "a", b, e.Revision()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		ev, err := h.client.Events(c, api.EventsRequest{Agent: "a", Since: time.Now().Add(-time.Minute)})
		if err != nil || len(ev.Changes) != 2 || ev.Changes[1].Version != 2 || ev.Changes[1].By != "bob@box" {
			t.Fatalf("events: %+v %v", ev.Changes, err)
		}
	}
	ev, err := h.client.Events(c, api.EventsRequest{Since: time.Now().Add(-time.Minute)})
	if err != nil || len(ev.Changes) != 2 {
		t.Fatalf("events of every agent: %+v %v", ev.Changes, err)
	}
}

// A version that was accepted can be shown, however large: its content
// comes once, as YAML, when the record and the YAML would not both fit.
func TestDefinitionOfALargeVersion(t *testing.T) {
	h := start(t, api.Config{})
	c := ctx(t)
	system := strings.Repeat("review carefully. ", (520<<10)/18)
	if _, err := h.client.Apply(c, api.ApplyRequest{Files: []api.File{agentFile("one", "system: "+system+"\n")}}); err != nil {
		t.Fatal(err)
	}
	d, err := h.client.Definition(c, api.DefinitionRequest{Agent: "a"})
	if err != nil || !d.DefinitionOmitted || d.Record.Version != 1 || d.Record.Hash == "" || !strings.Contains(d.YAML, "review carefully.") {
		t.Fatalf("definition of a large version: omitted %v, version %d, %d bytes of YAML, %v", d.DefinitionOmitted, d.Record.Version, len(d.YAML), err)
	}
	back, err := policies.Parse("a.yaml", []byte(d.YAML))
	if err != nil || policies.ContentHash(back.Definition) != d.Record.Hash {
		t.Fatalf("the YAML reads back to another content: %v", err)
	}
	// A small one comes whole.
	if _, err := h.client.Apply(c, api.ApplyRequest{Files: []api.File{agentFile("two", "")}}); err != nil {
		t.Fatal(err)
	}
	if d, err := h.client.Definition(c, api.DefinitionRequest{Agent: "a"}); err != nil || d.DefinitionOmitted || d.Record.Definition.Model.Script[0].Text != "two" {
		t.Fatalf("definition of a small version: %+v %v", d, err)
	}
}
