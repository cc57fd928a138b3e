package events

import (
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
)

// FuzzValidV1 holds validV1 to sdk-go's Validate: an event validV1 passes
// is one Validate passes, so checkedAttributes, which skips Validate for
// it, refuses nothing Validate would not and accepts nothing it refuses.
func FuzzValidV1(f *testing.F) {
	f.Add("d1", "https://github.com/octo/repo", "com.github.pull_request.opened", "pull/1", "application/json", true, true)
	f.Add(" ", "/src", "t", "\u00a0", "text/plain", true, false)
	f.Add("1", " \u0085", "t", "s", "text/json", false, true)
	f.Add("1", "/s", "\t\r\n", "", "application/json; charset=utf-8", true, true)
	f.Fuzz(func(t *testing.T, id, source, typ, subject, contentType string, withSubject, withContentType bool) {
		e := event.New()
		e.SetID(id)
		e.SetType(typ)
		if err := e.Context.SetSource(source); err != nil {
			return // no event has it
		}
		e.SetTime(time.Unix(1700000000, 0))
		ec := e.Context.(*event.EventContextV1)
		// Set as a decoder may set them: the setters drop a blank subject.
		if withSubject {
			ec.Subject = &subject
		}
		if withContentType {
			ec.DataContentType = &contentType
		}
		err := e.Validate()
		if validV1(e, ec, ec.Source.String()) && err != nil {
			t.Fatalf("validV1 passes an event Validate refuses: %v", err)
		}
		for _, s := range []string{id, source, typ, subject} {
			if got, want := blank(s), strings.TrimSpace(s) == ""; got != want {
				t.Fatalf("blank(%q) = %v, strings.TrimSpace gives %v", s, got, want)
			}
		}
	})
}

// TestValidV1LeavesTheRestToValidate: what validV1 is not sure of it
// leaves to Validate, whose error checkedAttributes returns.
func TestValidV1LeavesTheRestToValidate(t *testing.T) {
	base := func() event.Event {
		e := event.New()
		e.SetID("d1")
		e.SetSource("https://github.com/octo/repo")
		e.SetType("com.github.push")
		return e
	}
	e := base()
	ec := e.Context.(*event.EventContextV1)
	if !validV1(e, ec, ec.Source.String()) {
		t.Fatal("validV1 refuses a plain webhook event")
	}
	for name, change := range map[string]func(*event.Event){
		"field errors":   func(e *event.Event) { e.FieldErrors = map[string]error{"x": nil} },
		"odd media type": func(e *event.Event) { e.SetDataContentType("application/json; charset=utf-8") },
		"bad media type": func(e *event.Event) { e.SetDataContentType("not a type/") },
		"blank id":       func(e *event.Event) { e.SetID(" ") },
		"blank subject": func(e *event.Event) {
			s := "\u00a0" // SetSubject would drop it
			e.Context.(*event.EventContextV1).Subject = &s
		},
		"another version": func(e *event.Event) { e.Context = e.Context.AsV03() },
	} {
		e := base()
		change(&e)
		ec, _ := e.Context.(*event.EventContextV1)
		if ec == nil {
			ec = e.Context.AsV1()
		}
		if validV1(e, ec, ec.Source.String()) {
			t.Errorf("%s: validV1 passes it, not leaving it to Validate", name)
		}
	}
	e = base()
	e.SetDataContentType("not a type/")
	if _, err := checkedAttributes(e, nil); err == nil {
		t.Fatal("checkedAttributes accepts a media type Validate refuses")
	}
}
