package policies_test

import (
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jetloop/jetloop/policies"
)

// TestReadsData tells the triggers that read event.data from those that
// do not, so admission decodes an event's data only for the first; when
// in doubt (event passed whole) it says they read it.
func TestReadsData(t *testing.T) {
	tests := []struct {
		name, trigger string
		want          bool
	}{
		{name: "type alone", trigger: `when: event.type == "x"`, want: false},
		{name: "subject session", trigger: "when: event.type == \"x\"\n    session: event.subject", want: false},
		{name: "extensions", trigger: `when: event.extensions.jlagent == "a"`, want: false},
		{name: "data in the condition", trigger: `when: "!event.data.pull_request.draft"`, want: true},
		{name: "has on data", trigger: `when: has(event.data.x)`, want: true},
		{name: "data in the session", trigger: "when: \"true\"\n    session: event.data.repository.full_name", want: true},
		{name: "event indexed", trigger: `when: event["data"] != null`, want: true},
		{name: "data in the prompt", trigger: "when: \"true\"\n    prompt: \"{{ event.data.title }}\"", want: true},
		{name: "event whole in the prompt", trigger: "when: \"true\"\n    prompt: \"{{ event }}\"", want: true},
		{name: "prompt of the type", trigger: "when: \"true\"\n    prompt: \"new {{ event.type }} at {{ event.subject }}\"", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := policies.Parse("a.yaml", []byte("name: a\nmodel: {provider: scripted}\ntriggers:\n  - name: t\n    "+tt.trigger+"\n"))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.ReadsData(); got != tt.want {
				t.Errorf("ReadsData %v, want %v", got, tt.want)
			}
		})
	}
}

// TestEventDataDecodedOnce: the data is decoded on the first Vars that
// needs it, not for those that do not, and a receiver's decoding is used
// as it is.
func TestEventDataDecodedOnce(t *testing.T) {
	e := event.New()
	e.SetID("1")
	e.SetSource("/s")
	e.SetType("t")
	if err := e.SetData(event.ApplicationJSON, []byte(`{"broken`)); err != nil {
		t.Fatal(err)
	}
	d := policies.NewEventData(e)
	v, err := d.Vars(false)
	if err != nil || v.Event()["data"] != nil || v.Event()["type"] != "t" {
		t.Fatalf("without data: %v %v", v, err)
	}
	if _, err := d.Vars(true); err == nil {
		t.Fatal("data that does not parse: no error")
	}
	given := map[string]any{"n": int64(1)}
	v, err = policies.DecodedEventData(e, given).Vars(true)
	if err != nil || v.Event()["data"].(map[string]any)["n"] != int64(1) {
		t.Fatalf("decoded data: %v %v", v, err)
	}
}

// TestParseJSONRefusesTrailingData refuses anything but space after the
// value, a closing bracket too.
func TestParseJSONRefusesTrailingData(t *testing.T) {
	for _, raw := range []string{`{"a":1}}`, `{"a":1}]`, `{"a":1} x`, `1 2`} {
		if _, err := policies.ParseJSON([]byte(raw)); err == nil {
			t.Errorf("%s: parsed", raw)
		}
	}
	if _, err := policies.ParseJSON([]byte("{\"a\":1} \n")); err != nil {
		t.Errorf("trailing space: %v", err)
	}
}
