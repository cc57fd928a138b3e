package events_test

import (
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jetloop/jetloop/events"
)

// FuzzThreadOf: any payload and thread attribute give a thread that names
// something, or none; nothing panics.
func FuzzThreadOf(f *testing.F) {
	f.Add("com.github.pull_request.opened", `{"number":2,"repository":{"full_name":"o/r"},"installation":{"id":1},"pull_request":{"number":2,"head":{"sha":"abc"}}}`, "")
	f.Add("com.github.issue_comment.created", `{"issue":{"number":1},"repository":{"full_name":"o/r"}}`, "")
	f.Add("dev.jetloop.request", `hello`, "slack:C1:1.2")
	f.Add("com.github.push", `{"after":"0000000000000000000000000000000000000000"}`, "slack::")
	f.Fuzz(func(t *testing.T, typ, data, thread string) {
		e := event.New()
		e.SetID("1")
		e.SetSource("s")
		e.SetType(typ)
		_ = e.SetData("application/json", []byte(data))
		if thread != "" {
			e.SetExtension(events.ExtThread, thread)
		}
		if th := events.ThreadOf(e); th != nil && th.IsZero() {
			t.Fatal("a zero thread instead of none")
		}
	})
}
