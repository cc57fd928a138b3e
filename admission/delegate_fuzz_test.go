package admission_test

import (
	"context"
	"errors"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/events"
)

// FuzzDecideDelegation feeds arbitrary delegate events to admission: a
// decision never panics, data that does not describe a delegation is
// ErrBadData (the sender's fault), and anything else is admitted to the
// session the event names or refused with a reason, by the host's rule.
func FuzzDecideDelegation(f *testing.F) {
	for _, s := range []struct{ session, parent, data string }{
		{"lead/s/call_1", "lead/s", `{"parent":"lead/s","call_id":"call_1","task":"review","inputs":[{"name":"diff","text":"-a\n+b","size":5}],"hops":1,"max_hops":4,"path":[{"session":"lead/s","run":"1"}]}`},
		{"lead/s/call_1", "lead/s", `{"parent":"lead/s","call_id":"call_1","task":"review","inputs":[{"name":"notes","text":"x","size":1}],"hops":1,"max_hops":4,"path":[{"session":"lead/s","run":"1"}]}`},
		{"lead/s/call_1", "lead/s", `{"parent":"lead/s","call_id":"call_1","task":"again","hops":5,"max_hops":4,"path":[{"session":"lead/s","run":"1"}]}`},
		{"x", "lead/s", `{"parent":"lead/s","task":"again","hops":1,"max_hops":4,"path":[{"session":"reviewer/x","task":"` + events.TaskDigest("again") + `","run":"1"}]}`},
		{"x", "other", `{"parent":"lead/s"}`}, {"", "", `{}`}, {"x", "lead/s", `[]`}, {"x", "lead/s", `{"path":[]}`},
	} {
		f.Add(s.session, s.parent, []byte(s.data))
	}
	e := setup(f)
	a := newAdmitter(f, e, nil, compile(f, "name: reviewer\nmodel: {provider: scripted}\nreads: [task, diff]\n"))
	f.Fuzz(func(t *testing.T, session, parent string, data []byte) {
		ev := event.New()
		ev.SetID("call_1")
		ev.SetSource("/agents/lead/sessions/s/calls")
		ev.SetType(events.TypeDelegate)
		ev.SetExtension(events.ExtAgent, "reviewer")
		if session != "" {
			ev.SetExtension(events.ExtSession, session)
		}
		if parent != "" {
			ev.SetExtension(events.ExtParent, parent)
		}
		if err := ev.SetData(event.ApplicationJSON, data); err != nil {
			t.Skip()
		}
		ds, err := a.Decide(context.Background(), ev)
		if err != nil {
			if !errors.Is(err, admission.ErrBadData) {
				t.Fatalf("Decide: %v, want ErrBadData or a decision", err)
			}
			return
		}
		if len(ds) != 1 || ds[0].Agent != "reviewer" || ds[0].Trigger != admission.DelegateRule {
			t.Fatalf("decisions %+v", ds)
		}
		switch d := ds[0]; d.Outcome {
		case admission.Admitted:
			if d.Session != session {
				t.Fatalf("admitted to %q, the event names %q", d.Session, session)
			}
		case admission.Refused:
			if d.Reason == "" {
				t.Fatalf("refused without a reason: %+v", d)
			}
		default:
			t.Fatalf("outcome %s", d.Outcome)
		}
	})
}
