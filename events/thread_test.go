package events_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jetloop/jetloop/events"
)

func TestThreadOf(t *testing.T) {
	fixtures := filepath.Join("testdata", "github")
	for _, tc := range []struct {
		file, typ string
		want      events.Thread
	}{
		{"pull_request/opened.payload.json", "com.github.pull_request.opened",
			events.Thread{Repo: "Codertocat/Hello-World", Number: 2, Installation: 1, HeadSHA: "ec26c3e57ca3a959ca5aad62de7213c562f8c821"}},
		{"issue_comment/created.with-installation.payload.json", "com.github.issue_comment.created",
			events.Thread{Repo: "Codertocat/Hello-World", Number: 1, Installation: 1}},
		{"check_run/created.payload.json", "com.github.check_run.created",
			events.Thread{Repo: "Codertocat/Hello-World", Number: 2, HeadSHA: "ec26c3e57ca3a959ca5aad62de7213c562f8c821"}},
	} {
		b, err := os.ReadFile(filepath.Join(fixtures, tc.file))
		if err != nil {
			t.Fatal(err)
		}
		e := event.New()
		e.SetID("1")
		e.SetSource("github")
		e.SetType(tc.typ)
		if err := e.SetData("application/json", b); err != nil {
			t.Fatal(err)
		}
		got := events.ThreadOf(e)
		if got == nil {
			t.Fatalf("%s: no thread", tc.file)
		}
		if *got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.file, *got, tc.want)
		}
	}

	e := event.New()
	e.SetID("1")
	e.SetSource("slack")
	e.SetType(events.TypeRequest)
	e.SetExtension(events.ExtThread, events.SlackThread("C123", "1700000000.000100"))
	if got := events.ThreadOf(e); got == nil || got.SlackChannel != "C123" || got.SlackTS != "1700000000.000100" {
		t.Fatalf("slack thread: %+v", got)
	}
	e.SetExtension(events.ExtThread, "bogus")
	if got := events.ThreadOf(e); got != nil {
		t.Fatalf("bogus thread: %+v", got)
	}
}
