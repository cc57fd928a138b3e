package examples_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jetloop/jetloop/examples"
	"github.com/jetloop/jetloop/policies"
)

// mention-responder answers with a comment of its own, which GitHub
// delivers back as an issue_comment: it must not wake the agent again,
// however the answer is worded, or it would answer itself for ever. A
// person's comment mentioning @jetloop wakes it; a bot's does not.
func TestMentionResponderDoesNotAnswerBots(t *testing.T) {
	b, err := fs.ReadFile(examples.FS, "mention-responder.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := policies.Parse("mention-responder.yaml", b)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("../ingest/testdata/github/issue_comment/created.payload.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		userType string
		want     bool
	}{{"User", true}, {"Bot", false}} {
		var p map[string]any
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatal(err)
		}
		cm := p["comment"].(map[string]any)
		cm["body"] = "Thanks for asking @jetloop about it."
		cm["user"].(map[string]any)["type"] = tc.userType
		p["sender"].(map[string]any)["type"] = tc.userType
		data, _ := json.Marshal(p)
		e := event.New()
		e.SetID("c1")
		e.SetSource("/github/Codertocat/Hello-World")
		e.SetType("com.github.issue_comment.created")
		if err := e.SetData(event.ApplicationJSON, data); err != nil {
			t.Fatal(err)
		}
		vars, err := policies.NewEventData(e).Vars(true)
		if err != nil {
			t.Fatal(err)
		}
		admitted := false
		for _, tr := range c.Triggers {
			ok, err := tr.Admits(context.Background(), vars)
			if err != nil {
				t.Fatal(err)
			}
			admitted = admitted || ok
		}
		if admitted != tc.want {
			t.Errorf("a comment by a %s mentioning @jetloop: admitted %v, want %v", tc.userType, admitted, tc.want)
		}
	}
}
