package admission_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
)

// What a trigger makes of an event must be publishable, or that trigger's
// decision is Failed while other agents still decide; a prompt up to
// policies.MaxPromptLen, newlines and all, travels and reads back whole.
func TestStampedEventIsPublishable(t *testing.T) {
	e := setup(t)
	def := func(t *testing.T, name, session, prompt string) *policies.Compiled {
		return compile(t, "name: "+name+`
model: {provider: scripted}
triggers:
  - name: t
    when: "true"
    session: `+session+`
    prompt: `+prompt+"\n")
	}
	long := strings.Repeat("x", policies.MaxPromptLen-1)
	tests := []struct {
		name, session, prompt string
		want                  admission.Outcome
		wantPrompt            string
	}{
		{name: "multiline", session: `"'s'"`, prompt: `"line one\nline two\n"`, want: admission.Admitted, wantPrompt: "line one\nline two\n"},
		{name: "longest", session: `"'s'"`, prompt: `"` + long + `\n"`, want: admission.Admitted, wantPrompt: long + "\n"},
		{name: "too-long", session: `"'s'"`, prompt: `"` + long + `xy"`, want: admission.Failed},
		{name: "newline-session", session: `"'s\\n'"`, prompt: `"p"`, want: admission.Failed},
		{name: "delete-char-session", session: `"'s\\x7f'"`, prompt: `"p"`, want: admission.Failed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			other := compile(t, pusher)
			a := newAdmitter(t, e, nil, def(t, tt.name, tt.session, tt.prompt), other)
			ev := ghEvent("1", "com.github.push", `{}`)
			ds, err := a.Decide(context.Background(), ev)
			if err != nil {
				t.Fatal(err)
			}
			var got, pushed admission.Decision
			for _, d := range ds {
				switch d.Agent {
				case tt.name:
					got = d
				case "pusher":
					pushed = d
				}
			}
			if pushed.Outcome != admission.Admitted {
				t.Errorf("the other agent: %+v, want admitted", pushed)
			}
			if got.Outcome != tt.want {
				t.Fatalf("decision %+v, want %s", got, tt.want)
			}
			if tt.want != admission.Admitted {
				return
			}
			ref, err := streams.NewSessionRef(got.Agent, got.Session)
			if err != nil {
				t.Fatal(err)
			}
			m, err := events.ToMsg(e.names.In(ref), admission.Stamp(ev, got))
			if err != nil {
				t.Fatal(err)
			}
			back, err := events.FromMsg(m)
			if err != nil {
				t.Fatal(err)
			}
			if p, err := admission.Prompt(back); err != nil || p != tt.wantPrompt {
				t.Fatalf("prompt %q %v, want %q", p, err, tt.wantPrompt)
			}
		})
	}
}
