package control_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

func ref(t testing.TB, agent, session string) streams.SessionRef {
	t.Helper()
	r, err := streams.NewSessionRef(agent, session)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func provisioned(t *testing.T) jetstream.JetStream {
	t.Helper()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	return js
}

// TestPublishLandsInJLCtlAndParsesBack publishes every verb and reads each
// back from JL_CTL through a consumer, in order, with its sequence.
func TestPublishLandsInJLCtlAndParsesBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := provisioned(t)
	names := streams.Default()
	r := ref(t, "pr-reviewer", "octo/repo#12")
	sent := []control.Message{
		{Verb: control.Steer, Text: "focus on the tests <and> & the docs"},
		{Verb: control.Interrupt},
		{Verb: control.Resume, Text: "go on"},
		{Verb: control.Approve, CallID: "toolu_01A09q90qw90lq917835lq9"},
		{Verb: control.Deny, CallID: "call_abc", Text: "not on main"},
		{Verb: control.Fork, Turn: 0, As: "octo/repo#12-retry"},
		{Verb: control.Fork, Turn: 3, As: "b", Text: "try again"},
		{Verb: control.Cancel, Text: "enough", ID: "chat-1", Source: "/chat/slack/T1"},
	}
	var seqs []uint64
	for _, m := range sent {
		seq, err := control.Publish(ctx, js, names, r, m)
		if err != nil {
			t.Fatalf("publish %s: %v", m.Verb, err)
		}
		seqs = append(seqs, seq)
	}
	cons, err := js.OrderedConsumer(ctx, names.StreamCtl(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{names.Ctl(r)}})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range sent {
		jm, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		got, err := control.ParseJS(jm)
		if err != nil {
			t.Fatalf("parse message %d: %v", i, err)
		}
		if got.Verb != want.Verb || got.Text != want.Text || got.CallID != want.CallID || got.Turn != want.Turn || got.As != want.As {
			t.Errorf("message %d: got %+v, want %+v", i, got, want)
		}
		if got.Seq != seqs[i] {
			t.Errorf("message %d: seq %d, Publish returned %d", i, got.Seq, seqs[i])
		}
		if got.Ref.Agent != r.Agent || got.Ref.Session != r.Session {
			t.Errorf("message %d: ref %v, want %v", i, got.Ref, r)
		}
		if got.ID == "" || got.Source == "" || got.Time.IsZero() {
			t.Errorf("message %d: envelope not filled in: %+v", i, got)
		}
		if want.ID != "" && (got.ID != want.ID || got.Source != want.Source) {
			t.Errorf("message %d: id %q source %q, want %q %q", i, got.ID, got.Source, want.ID, want.Source)
		}
	}
}

// TestPublishSameIDOnce shows that a sender retrying with one id is stored
// once, per session: the same id on another session is another message.
func TestPublishSameIDOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := provisioned(t)
	names := streams.Default()
	m := control.Message{Verb: control.Steer, Text: "hi", ID: "retry-1"}
	a := ref(t, "a", "s1")
	s1, err := control.Publish(ctx, js, names, a, m)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := control.Publish(ctx, js, names, a, m)
	if err != nil {
		t.Fatal(err)
	}
	if s1 != s2 {
		t.Errorf("second publish of id retry-1: seq %d, want the first's %d", s2, s1)
	}
	s3, err := control.Publish(ctx, js, names, ref(t, "a", "s2"), m)
	if err != nil {
		t.Fatal(err)
	}
	if s3 == s1 {
		t.Errorf("the same id on another session was dropped as a duplicate")
	}
	info, err := js.Stream(ctx, names.StreamCtl())
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 2 {
		t.Errorf("JL_CTL holds %d messages, want 2", n)
	}
}

func TestPublishRefusesInvalid(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := provisioned(t)
	names := streams.Default()
	r := ref(t, "a", "s")
	tests := []struct {
		name string
		m    control.Message
		want string
	}{
		{name: "unknown verb", m: control.Message{Verb: "pause"}, want: `unknown verb "pause"`},
		{name: "upper-case verb", m: control.Message{Verb: "STEER", Text: "x"}, want: "unknown verb"},
		{name: "steer without text", m: control.Message{Verb: control.Steer, Text: "  \n"}, want: "steer needs text"},
		{name: "approve without call id", m: control.Message{Verb: control.Approve}, want: "approve needs call_id"},
		{name: "deny without call id", m: control.Message{Verb: control.Deny, Text: "no"}, want: "deny needs call_id"},
		{name: "call id with space", m: control.Message{Verb: control.Approve, CallID: "a b"}, want: "call_id"},
		{name: "call id too long", m: control.Message{Verb: control.Approve, CallID: strings.Repeat("x", control.MaxCallID+1)}, want: "max 256"},
		{name: "call id on steer", m: control.Message{Verb: control.Steer, Text: "x", CallID: "c"}, want: "steer does not take call_id"},
		{name: "fork without as", m: control.Message{Verb: control.Fork, Turn: 2}, want: "fork needs as"},
		{name: "fork negative turn", m: control.Message{Verb: control.Fork, Turn: -1, As: "b"}, want: "fork turn -1"},
		{name: "fork as itself", m: control.Message{Verb: control.Fork, Turn: 1, As: "s"}, want: "session being forked"},
		{name: "fork as a control character", m: control.Message{Verb: control.Fork, Turn: 1, As: "b\x00"}, want: "session name: control character U+0000"},
		{name: "fork as invalid UTF-8", m: control.Message{Verb: control.Fork, Turn: 1, As: "b\xff"}, want: "session name: invalid UTF-8"},
		{name: "turn on cancel", m: control.Message{Verb: control.Cancel, Turn: 3}, want: "cancel does not take turn"},
		{name: "as on resume", m: control.Message{Verb: control.Resume, As: "b"}, want: "resume does not take as"},
		{name: "text too long", m: control.Message{Verb: control.Steer, Text: strings.Repeat("é", control.MaxText)}, want: "max 32768"},
		{name: "text not utf-8", m: control.Message{Verb: control.Steer, Text: "a\xffb"}, want: "not valid UTF-8"},
		{name: "text with NUL", m: control.Message{Verb: control.Steer, Text: "a\x00b"}, want: "NUL"},
		{name: "id with newline", m: control.Message{Verb: control.Cancel, ID: "a\nb"}, want: "id"},
		{name: "bad source", m: control.Message{Verb: control.Cancel, Source: "%zz"}, want: "source"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := control.Publish(ctx, js, names, r, tt.m)
			if !errors.Is(err, control.ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
		})
	}
	info, err := js.Stream(ctx, names.StreamCtl())
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 0 {
		t.Errorf("JL_CTL holds %d messages after refusals, want 0", n)
	}
}

// msg builds a raw message as an outside sender (a chat bot, `nats pub`)
// would.
func msg(subject string, headers map[string]string, body string) *nats.Msg {
	m := nats.NewMsg(subject)
	for k, v := range headers {
		m.Header.Set(k, v)
	}
	m.Data = []byte(body)
	return m
}

func ce(verb string) map[string]string {
	return map[string]string{
		"ce-specversion": "1.0",
		"ce-type":        "dev.jetloop.control." + verb,
		"ce-source":      "/chatbot",
		"ce-id":          "m-1",
	}
}

func with(h map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(out, kv[i])
		} else {
			out[kv[i]] = kv[i+1]
		}
	}
	return out
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		m       *nats.Msg
		want    control.Message
		wantErr string
	}{
		{name: "binary steer", m: msg("jl.ctl.demo.main", ce("steer"), `{"text":"focus on the tests"}`),
			want: control.Message{Verb: control.Steer, Text: "focus on the tests"}},
		{name: "binary cancel without data", m: msg("jl.ctl.demo.main", ce("cancel"), ``),
			want: control.Message{Verb: control.Cancel}},
		{name: "structured approve without content type",
			m:    msg("jl.ctl.demo.main", nil, `{"specversion":"1.0","type":"dev.jetloop.control.approve","source":"/chatbot","id":"a1","data":{"call_id":"toolu_1"}}`),
			want: control.Message{Verb: control.Approve, CallID: "toolu_1"}},
		{name: "structured fork at turn 0",
			m:    msg("jl.ctl.demo.main", map[string]string{"Content-Type": "application/cloudevents+json"}, `{"specversion":"1.0","type":"dev.jetloop.control.fork","source":"/x","id":"f","datacontenttype":"application/json","data":{"turn":0,"as":"main-2"}}`),
			want: control.Message{Verb: control.Fork, As: "main-2"}},
		{name: "encoded session", m: msg("jl.ctl.pr-reviewer.octo=2Frepo=2312", with(ce("interrupt"), "ce-jlsession", "octo/repo#12", "ce-jlagent", "pr-reviewer"), `{}`),
			want: control.Message{Verb: control.Interrupt}},
		{name: "json with charset", m: msg("jl.ctl.demo.main", with(ce("resume"), "Content-Type", "application/json; charset=utf-8"), `{"text":"go"}`),
			want: control.Message{Verb: control.Resume, Text: "go"}},
		{name: "other prefix", m: msg("acme.ctl.demo.main", ce("cancel"), ``), want: control.Message{Verb: control.Cancel}},

		{name: "unknown verb", m: msg("jl.ctl.demo.main", ce("stop"), `{}`), wantErr: `unknown verb "stop"`},
		{name: "not a control type", m: msg("jl.ctl.demo.main", with(ce("x"), "ce-type", "dev.jetloop.request"), `{}`), wantErr: "is not dev.jetloop.control.<verb>"},
		{name: "no ce headers", m: msg("jl.ctl.demo.main", nil, `{"text":"x"}`), wantErr: "specversion"},
		{name: "input subject", m: msg("jl.in.demo.main", ce("cancel"), ``), wantErr: "not a control subject"},
		{name: "wildcard subject", m: msg("jl.ctl.demo.>", ce("cancel"), ``), wantErr: "ctl"},
		{name: "short subject", m: msg("jl.ctl.demo", ce("cancel"), ``), wantErr: "not jl.<kind>.<agent>.<session>"},
		{name: "bad prefix", m: msg("JL.ctl.demo.main", ce("cancel"), ``), wantErr: "prefix"},
		{name: "non-canonical token", m: msg("jl.ctl.demo.a=2fb", ce("cancel"), ``), wantErr: ""},
		{name: "control character in session", m: msg("jl.ctl.demo.a=00", ce("cancel"), ``), wantErr: "session name: control character U+0000"},
		{name: "control character in agent", m: msg("jl.ctl.a=1Fb.main", ce("cancel"), ``), wantErr: "agent name: control character U+001F"},
		{name: "agent extension elsewhere", m: msg("jl.ctl.demo.main", with(ce("cancel"), "ce-jlagent", "other"), ``), wantErr: `jlagent is "other"`},
		{name: "session extension elsewhere", m: msg("jl.ctl.demo.main", with(ce("cancel"), "ce-jlsession", "x"), ``), wantErr: `jlsession is "x"`},
		{name: "text content type", m: msg("jl.ctl.demo.main", with(ce("steer"), "ce-datacontenttype", "text/plain"), `focus`), wantErr: "want application/json"},
		{name: "data not an object", m: msg("jl.ctl.demo.main", ce("steer"), `"focus"`), wantErr: "must be a JSON object"},
		{name: "two objects", m: msg("jl.ctl.demo.main", ce("steer"), `{"text":"a"}{"text":"b"}`), wantErr: "more than one JSON value"},
		{name: "unknown field", m: msg("jl.ctl.demo.main", ce("steer"), `{"text":"a","urgent":true}`), wantErr: `unknown field "urgent"`},
		{name: "steer empty", m: msg("jl.ctl.demo.main", ce("steer"), `{}`), wantErr: "steer needs text"},
		{name: "approve no call id", m: msg("jl.ctl.demo.main", ce("approve"), `{"text":"ok"}`), wantErr: "approve needs call_id"},
		{name: "fork no turn", m: msg("jl.ctl.demo.main", ce("fork"), `{"as":"b"}`), wantErr: "fork needs turn"},
		{name: "fork no as", m: msg("jl.ctl.demo.main", ce("fork"), `{"turn":2}`), wantErr: "fork needs as"},
		{name: "fork fractional turn", m: msg("jl.ctl.demo.main", ce("fork"), `{"turn":2.5,"as":"b"}`), wantErr: "turn"},
		{name: "fork as a control character", m: msg("jl.ctl.demo.main", ce("fork"), `{"turn":0,"as":"b\n"}`), wantErr: "session name: control character U+000A"},
		{name: "turn on steer", m: msg("jl.ctl.demo.main", ce("steer"), `{"text":"a","turn":0}`), wantErr: "steer does not take turn"},
		{name: "text too long", m: msg("jl.ctl.demo.main", ce("steer"), `{"text":"`+strings.Repeat("a", control.MaxText+1)+`"}`), wantErr: "max 32768"},
		{name: "data too large", m: msg("jl.ctl.demo.main", ce("steer"), `{"text":"a"}`+strings.Repeat(" ", control.MaxData)), wantErr: "max"},
		{name: "nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := control.Parse(tt.m)
			if tt.wantErr != "" || tt.m == nil || tt.name == "non-canonical token" {
				if !errors.Is(err, control.ErrInvalid) {
					t.Fatalf("got %+v, %v; want ErrInvalid", got, err)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %q does not say %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Verb != tt.want.Verb || got.Text != tt.want.Text || got.CallID != tt.want.CallID || got.Turn != tt.want.Turn || got.As != tt.want.As {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestVerbs(t *testing.T) {
	var got []string
	for _, v := range control.Verbs() {
		if _, err := control.ParseVerb(string(v)); err != nil {
			t.Error(err)
		}
		got = append(got, string(v))
	}
	if want := "steer interrupt resume cancel approve deny fork"; strings.Join(got, " ") != want {
		t.Errorf("verbs %q, want %q", got, want)
	}
}
