package streams_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/streams"
)

func TestSubjects(t *testing.T) {
	n := streams.Default()
	r, err := streams.NewSessionRef("pr-reviewer", "octo/repo#12")
	if err != nil {
		t.Fatal(err)
	}
	sched, _ := n.Sched("mon", "drift")
	inAgent, _ := n.InAgent("mon")
	blob, _ := n.ResultBlob(r, "call/1", "00ff")
	eventBlob, _ := n.EventBlob(r, "0123abcd")
	tests := []struct {
		name, got, want string
	}{
		{name: "in", got: n.In(r), want: "jl.in.pr-reviewer.octo=2Frepo=2312"},
		{name: "ctl", got: n.Ctl(r), want: "jl.ctl.pr-reviewer.octo=2Frepo=2312"},
		{name: "status", got: n.Status(r), want: "jl.status.pr-reviewer.octo=2Frepo=2312"},
		{name: "state key", got: n.StateKey(r), want: "pr-reviewer.octo=2Frepo=2312.state"},
		{name: "log key", got: n.LogKey(r, 7), want: "pr-reviewer.octo=2Frepo=2312.log.7"},
		{name: "sched", got: sched, want: "jl.sched.mon.drift"},
		{name: "agent filter", got: inAgent, want: "jl.in.mon.>"},
		{name: "api", got: n.API("status"), want: "jl.api.status"},
		{name: "kv subject", got: streams.KVSubject(n.BucketSessions(), n.StateKey(r)), want: "$KV.jl_sessions.pr-reviewer.octo=2Frepo=2312.state"},
		{name: "state keys", got: n.StateKeys(), want: "*.*.state"},
		{name: "notes key", got: n.NotesKey(r), want: "pr-reviewer.octo=2Frepo=2312.notes"},
		{name: "result blob", got: blob, want: "pr-reviewer.octo=2Frepo=2312.result.call=2F1.00ff"},
		{name: "event blob", got: eventBlob, want: "pr-reviewer.octo=2Frepo=2312.event.0123abcd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Fatalf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
}

func TestParseSessionRoundTrip(t *testing.T) {
	n, err := streams.NewNames("acme")
	if err != nil {
		t.Fatal(err)
	}
	r, _ := streams.NewSessionRef("a.b", "feature/ü x")
	for _, subj := range []string{n.In(r), n.Ctl(r), n.Status(r), n.Debounce(r)} {
		got, err := n.ParseSession(subj)
		if err != nil {
			t.Fatalf("parse %q: %v", subj, err)
		}
		if got.Agent != "a.b" || got.Session != "feature/ü x" {
			t.Fatalf("parse %q = %q/%q", subj, got.Agent, got.Session)
		}
	}
	got, err := n.ParseSessionKey(n.LogKey(r, 3))
	if err != nil || got.String() != "a.b/feature/ü x" {
		t.Fatalf("parse key: %v %v", got, err)
	}
	for _, bad := range []string{"jl.in.a.b", "acme.in.a", "acme.dlq.a.b", "acme.in.a.b=zz"} {
		if _, err := n.ParseSession(bad); err == nil {
			t.Errorf("parse %q: no error", bad)
		}
	}
}

func TestParseSessionRefusesNamesNoEventCarries(t *testing.T) {
	n := streams.Default()
	for subj, want := range map[string]string{
		"jl.in.demo.=00":     "session name: control character U+0000",
		"jl.ctl.demo.a=1Fb":  "session name: control character U+001F",
		"jl.status.=7F.main": "agent name: control character U+007F",
	} {
		_, err := n.ParseSession(subj)
		if !errors.Is(err, streams.ErrBadSubject) || !strings.Contains(err.Error(), want) {
			t.Errorf("parse %q: %v, want ErrBadSubject saying %q", subj, err, want)
		}
	}
}

func TestNewNamesRejectsBadPrefix(t *testing.T) {
	for _, p := range []string{"JL", "j.l", "1x", "a-b", "waytoolongprefix_x"} {
		if _, err := streams.NewNames(p); err == nil {
			t.Errorf("NewNames(%q): no error", p)
		}
	}
}

func TestInConsumer(t *testing.T) {
	n := streams.Default()
	cfg, err := streams.InConsumer(n, "pr-reviewer")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Durable != "worker_pr-reviewer" || cfg.FilterSubject != "jl.in.pr-reviewer.>" || cfg.MaxDeliver != -1 {
		t.Fatalf("consumer config = %+v", cfg)
	}
	if _, err := streams.InConsumer(n, ""); err == nil {
		t.Fatal("empty agent: no error")
	}
}

func TestCtlConsumer(t *testing.T) {
	n := streams.Default()
	cfg, err := streams.CtlConsumer(n, "pr-reviewer")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Durable != "worker_pr-reviewer" || cfg.FilterSubject != "jl.ctl.pr-reviewer.>" || cfg.MaxDeliver != -1 ||
		cfg.AckPolicy != jetstream.AckExplicitPolicy {
		t.Fatalf("consumer config = %+v", cfg)
	}
	if _, err := streams.CtlConsumer(n, ""); err == nil {
		t.Fatal("empty agent: no error")
	}
}

func TestRateKeyIsDisjointFromDedupeKeys(t *testing.T) {
	n := streams.Default()
	k, err := n.RateKey("pr-reviewer", "pr-opened", "octo/repo")
	if err != nil {
		t.Fatal(err)
	}
	if got := len(strings.Split(k, ".")); got != 4 || !strings.HasPrefix(k, "rate.pr-reviewer.pr-opened.") {
		t.Fatalf("rate key %q", k)
	}
	if got := len(strings.Split(n.DedupeKey("rate", "x"), ".")); got != 2 {
		t.Fatalf("dedupe key has %d tokens, want 2", got)
	}
	if _, err := n.RateKey("", "t", "k"); err == nil {
		t.Fatal("empty agent accepted")
	}
}
