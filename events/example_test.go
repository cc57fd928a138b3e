package events_test

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jetloop/jetloop/events"
)

func Example() {
	e := event.New()
	e.SetID("0f8e3c1a-delivery")
	e.SetSource("https://github.com/octo/repo")
	e.SetType(events.GitHubType("issue_comment", "created"))
	e.SetSubject("pull/12")
	e.SetTime(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
	e.SetExtension(events.ExtAgent, "reviewer")
	e.SetExtension(events.ExtSession, "octo/repo#12")
	_ = e.SetData(event.ApplicationJSON, []byte(`{"body":"Looks good 👍"}`))

	// Package streams builds the subject; the session name becomes one token.
	subject := "jl.in.reviewer." + events.MustToken("octo/repo#12")

	m, err := events.ToMsg(subject, e)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(m.Subject)
	for _, k := range slices.Sorted(maps.Keys(m.Header)) {
		fmt.Printf("%s: %s\n", k, m.Header.Get(k))
	}
	fmt.Printf("%s\n\n", m.Data)

	got, err := events.FromMsg(m)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(got.Type(), got.Subject(), got.Extensions()[events.ExtSession])
	fmt.Printf("%s\n", got.Data())
	// Output:
	// jl.in.reviewer.octo=2Frepo=2312
	// Content-Type: application/json
	// Nats-Msg-Id: 8d5b472272b7baf6348b09cbdface5be
	// ce-datacontenttype: application/json
	// ce-id: 0f8e3c1a-delivery
	// ce-jlagent: reviewer
	// ce-jlsession: octo/repo#12
	// ce-source: https://github.com/octo/repo
	// ce-specversion: 1.0
	// ce-subject: pull/12
	// ce-time: 2026-03-04T05:06:07Z
	// ce-type: com.github.issue_comment.created
	// {"body":"Looks good 👍"}
	//
	// com.github.issue_comment.created pull/12 octo/repo#12
	// {"body":"Looks good 👍"}
}

func ExampleEncodeToken() {
	for _, name := range []string{"reviewer", "octo/repo#12", "feature/ü x", "a.b"} {
		tok, err := events.EncodeToken(name)
		if err != nil {
			fmt.Println(err)
			continue
		}
		back, _ := events.DecodeToken(tok)
		fmt.Printf("%-14q %-22s %q\n", name, tok, back)
	}
	// Output:
	// "reviewer"     reviewer               "reviewer"
	// "octo/repo#12" octo=2Frepo=2312       "octo/repo#12"
	// "feature/ü x"  feature=2F=C3=BC=20x   "feature/ü x"
	// "a.b"          a=2Eb                  "a.b"
}
