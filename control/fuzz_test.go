package control_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/streams"
)

// FuzzParse feeds Parse messages as an outside sender could shape them: any
// subject, type, content type and body. Parse must never panic, must
// refuse with ErrInvalid, and every message it accepts must survive a round
// trip through NewMsg unchanged.
func FuzzParse(f *testing.F) {
	f.Add("jl.ctl.demo.main", "dev.jetloop.control.steer", "", []byte(`{"text":"focus on the tests"}`))
	f.Add("jl.ctl.demo.main", "dev.jetloop.control.cancel", "", []byte(``))
	f.Add("jl.ctl.demo.main", "dev.jetloop.control.approve", "application/json", []byte(`{"call_id":"toolu_1","text":"ok"}`))
	f.Add("jl.ctl.demo.main", "dev.jetloop.control.fork", "application/json", []byte(`{"turn":0,"as":"main-2"}`))
	f.Add("jl.ctl.pr-reviewer.octo=2Frepo=2312", "dev.jetloop.control.deny", "", []byte(`{"call_id":"c","text":"no"}`))
	f.Add("jl.ctl.demo.main", "", "", []byte(`{"specversion":"1.0","type":"dev.jetloop.control.resume","source":"/x","id":"1","data":{"text":"go"}}`))
	f.Add("jl.ctl.demo.main", "", "application/cloudevents+json", []byte(`{"specversion":"1.0","type":"dev.jetloop.control.interrupt","source":"/x","id":"1","data_base64":"e30="}`))
	f.Add("jl.ctl.demo.main", "dev.jetloop.control.steer", "text/plain", []byte(`hello`))
	f.Add("jl.in.demo.main", "dev.jetloop.control.steer", "", []byte(`{"text":"x","turn":1}`))
	f.Fuzz(func(t *testing.T, subject, typ, ct string, body []byte) {
		m := &nats.Msg{Subject: subject, Header: nats.Header{}, Data: body}
		if typ != "" {
			m.Header.Set("ce-specversion", "1.0")
			m.Header.Set("ce-type", typ)
			m.Header.Set("ce-source", "/fuzz")
			m.Header.Set("ce-id", "1")
		}
		if ct != "" {
			m.Header.Set("Content-Type", ct)
		}
		got, err := control.Parse(m)
		if err != nil {
			if !errors.Is(err, control.ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			return
		}
		names, err := streams.NewNames(prefixOf(subject))
		if err != nil {
			t.Fatalf("accepted subject %q with a bad prefix: %v", subject, err)
		}
		again, err := control.NewMsg(names, got.Ref, got)
		if err != nil {
			t.Fatalf("accepted %+v, but NewMsg refuses it: %v", got, err)
		}
		back, err := control.Parse(again)
		if err != nil {
			t.Fatalf("round trip of %+v: %v", got, err)
		}
		if got.Verb == control.Fork {
			// The session a fork makes is started with a resume on its
			// control subject: one that can be built.
			child, err := streams.NewSessionRef(got.Ref.Agent, got.As)
			if err != nil {
				t.Fatalf("accepted a fork as %q, which names no session: %v", got.As, err)
			}
			if _, err := control.NewMsg(names, child, control.Message{Verb: control.Resume}); err != nil {
				t.Fatalf("accepted a fork as %q, but its resume cannot be built: %v", got.As, err)
			}
		}
		if back.Verb != got.Verb || back.Text != got.Text || back.CallID != got.CallID || back.Turn != got.Turn ||
			back.As != got.As || back.ID != got.ID || back.Source != got.Source || back.Ref != got.Ref {
			t.Fatalf("round trip changed the message:\n got %+v\nback %+v", got, back)
		}
	})
}

func prefixOf(subject string) string {
	for i := range subject {
		if subject[i] == '.' {
			return subject[:i]
		}
	}
	return subject
}
