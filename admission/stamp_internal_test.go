package admission

import (
	"reflect"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
)

// FuzzStamp holds Stamp to what the SDK's Clone and SetExtension make
// (stampSlow): the same event, whatever extensions the sender set
// (admission's own among them), with or without a time, a schema, an
// on_busy or a prompt; and the event stamped is left as it was.
func FuzzStamp(f *testing.F) {
	f.Add("id", "/s", "t", "subj", true, "https://x/schema", "jlprompt", "sent", "ext", "v", int32(7), "agent", "sess", "trig", "reject", "p\nq")
	f.Add("id", "/s", "t", "", false, "", "jlcount", "3", "jlagent", "other", int32(0), "a", "s", "t", "", "")
	f.Add("id", "/s", "t", "", false, "", "Bad-Name", "x", "jlonbusy", "drop", int32(-1), "a", "", "", "drop", "")
	f.Fuzz(func(t *testing.T, id, source, typ, subject string, withTime bool, schema, k1, v1, k2, v2 string, n int32, agent, session, trigger, onBusy, prompt string) {
		e := event.New()
		e.SetID(id)
		e.SetSource(source)
		e.SetType(typ)
		if subject != "" {
			e.SetSubject(subject)
		}
		if withTime {
			e.SetTime(time.Unix(int64(n), 0))
		}
		if schema != "" {
			e.SetDataSchema(schema)
		}
		e.SetExtension(k1, v1)
		e.SetExtension(k2, v2)
		e.SetExtension("jlnum", n)
		e.SetExtension("jlbool", n%2 == 0)
		_ = e.SetData(event.ApplicationJSON, []byte(`{"a":1}`))
		before := e.Clone()
		d := Decision{Agent: agent, Session: session, Trigger: trigger, OnBusy: onBusy, Prompt: prompt}
		got, want := Stamp(e, d), stampSlow(e, d)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Stamp\n%v\nstampSlow\n%v", got, want)
		}
		if !reflect.DeepEqual(e, before) {
			t.Fatalf("stamped event changed:\n%v\nwas\n%v", e, before)
		}
		if len(got.DataEncoded) > 0 && &got.DataEncoded[0] != &e.DataEncoded[0] {
			t.Fatal("data copied, not shared")
		}
	})
}
