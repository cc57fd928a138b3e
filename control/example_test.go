package control_test

import (
	"fmt"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/streams"
)

// A chat bot's "approve" rendered as the message Publish sends.
func ExampleNewMsg() {
	ref, _ := streams.NewSessionRef("pr-reviewer", "octo/repo#12")
	m, err := control.NewMsg(streams.Default(), ref, control.Message{
		Verb: control.Approve, CallID: "toolu_01", ID: "slack-Ev123", Source: "/chat/slack/T0123",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(m.Subject)
	fmt.Println(m.Header.Get("ce-type"))
	fmt.Println(string(m.Data))
	// Output:
	// jl.ctl.pr-reviewer.octo=2Frepo=2312
	// dev.jetloop.control.approve
	// {"call_id":"toolu_01"}
}

func ExampleMessage_Validate() {
	err := control.Message{Verb: control.Fork, Turn: 3}.Validate()
	fmt.Println(err)
	// Output:
	// invalid control message: fork needs as, the name of the session to create
}
