package events_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/events"
)

const testSubject = "jl.in.reviewer.octo=2Frepo=2312"

// newEvent returns a valid event with every kind of attribute set.
func newEvent(t testing.TB) event.Event {
	t.Helper()
	e := event.New()
	e.SetID("2d1c0a40-6b1f-11ef-8f4e-2f1b2d7f0e11")
	e.SetSource("https://github.com/octo/repo")
	e.SetType(events.GitHubType("pull_request", "opened"))
	e.SetSubject("pull/12")
	e.SetTime(time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.UTC))
	e.SetDataSchema("https://schemas.example.com/pull_request.json")
	e.SetExtension(events.ExtAgent, "reviewer")
	e.SetExtension(events.ExtSession, "octo/repo#12")
	e.SetExtension(events.ExtHops, int32(2))
	if err := e.SetData(event.ApplicationJSON, []byte(`{"action": "opened", "number": 12}`)); err != nil {
		t.Fatal(err)
	}
	return e
}

// canonical flattens an event into the strings that identify it: every
// attribute in canonical string form, extensions included, plus its data.
func canonical(t testing.TB, e event.Event) map[string]string {
	t.Helper()
	m := map[string]string{
		"specversion": e.SpecVersion(),
		"id":          e.ID(),
		"source":      e.Source(),
		"type":        e.Type(),
		"data":        hex.EncodeToString(e.Data()),
		"database64":  fmt.Sprint(e.DataBase64),
	}
	if ec, ok := e.Context.(*event.EventContextV1); ok {
		if ec.Subject != nil {
			m["subject"] = *ec.Subject
		}
		if ec.DataContentType != nil {
			m["datacontenttype"] = *ec.DataContentType
		}
		if ec.DataSchema != nil {
			m["dataschema"] = ec.DataSchema.String()
		}
		if ec.Time != nil {
			m["time"] = types.FormatTime(ec.Time.Time)
		}
	}
	for k, v := range e.Extensions() {
		s, err := types.Format(v)
		if err != nil {
			t.Fatalf("extension %q: %v", k, err)
		}
		m["ext:"+k] = s
	}
	return m
}

func requireSameEvent(t testing.TB, got, want event.Event) {
	t.Helper()
	g, w := canonical(t, got), canonical(t, want)
	if maps.Equal(g, w) {
		return
	}
	keys := maps.Clone(g)
	maps.Copy(keys, w)
	var diff strings.Builder
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if g[k] != w[k] {
			fmt.Fprintf(&diff, "\n  %s: got %q, want %q", k, g[k], w[k])
		}
	}
	t.Fatalf("events differ:%s", diff.String())
}

// overTheWire sends m's headers through the NATS wire format and back, as
// a publish and a delivery would. ToMsg's values never need the trimming or
// newline replacement nats.go applies, so writing them verbatim is faithful;
// the test checks that it is.
func overTheWire(t testing.TB, m *nats.Msg) *nats.Msg {
	t.Helper()
	var b strings.Builder
	b.WriteString("NATS/1.0\r\n")
	for _, k := range slices.Sorted(maps.Keys(m.Header)) {
		for _, v := range m.Header[k] {
			if strings.ContainsAny(v, "\r\n") || strings.TrimSpace(v) != v {
				t.Fatalf("header %q value %q would be altered on the wire", k, v)
			}
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	h, err := nats.DecodeHeadersMsg([]byte(b.String()))
	if err != nil {
		t.Fatalf("decode headers %q: %v", b.String(), err)
	}
	return &nats.Msg{Subject: m.Subject, Header: h, Data: bytes.Clone(m.Data)}
}

func TestToMsg(t *testing.T) {
	e := newEvent(t)
	e.SetSubject("Euro € 😀")
	m, err := events.ToMsg(testSubject, e)
	if err != nil {
		t.Fatal(err)
	}
	want := nats.Header{
		"ce-specversion":     {"1.0"},
		"ce-id":              {"2d1c0a40-6b1f-11ef-8f4e-2f1b2d7f0e11"},
		"ce-source":          {"https://github.com/octo/repo"},
		"ce-type":            {"com.github.pull_request.opened"},
		"ce-subject":         {"Euro%20%E2%82%AC%20%F0%9F%98%80"},
		"ce-time":            {"2026-03-04T05:06:07.123456789Z"},
		"ce-dataschema":      {"https://schemas.example.com/pull_request.json"},
		"ce-datacontenttype": {"application/json"},
		"ce-jlagent":         {"reviewer"},
		"ce-jlsession":       {"octo/repo#12"},
		"ce-jlhops":          {"2"},
		"Content-Type":       {"application/json"},
		"Nats-Msg-Id":        {events.SubjectMsgID(testSubject, e)},
	}
	if m.Subject != testSubject {
		t.Errorf("subject = %q, want %q", m.Subject, testSubject)
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if !slices.Equal(m.Header[k], want[k]) {
			t.Errorf("header %s = %q, want %q", k, m.Header[k], want[k])
		}
	}
	for k := range m.Header {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected header %s = %q", k, m.Header[k])
		}
	}
	if string(m.Data) != `{"action": "opened", "number": 12}` {
		t.Errorf("body = %q", m.Data)
	}
	m.Data[0] = 'X'
	if e.Data()[0] != '{' {
		t.Error("message body shares memory with the event's data")
	}
}

// TestToMsgSharing shows ToMsgSharing writes the message ToMsg writes,
// header for header and byte for byte, with the event's data as its body.
func TestToMsgSharing(t *testing.T) {
	e := newEvent(t)
	e.SetSubject("Euro € 😀")
	want, err := events.ToMsg(testSubject, e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := events.ToMsgSharing(testSubject, e)
	if err != nil {
		t.Fatal(err)
	}
	if got.Subject != want.Subject || !maps.EqualFunc(got.Header, want.Header, slices.Equal) || !bytes.Equal(got.Data, want.Data) {
		t.Fatalf("ToMsgSharing = %q %q %q, want %q %q %q", got.Subject, got.Header, got.Data, want.Subject, want.Header, want.Data)
	}
	if &got.Data[0] != &e.DataEncoded[0] {
		t.Error("message body is a copy of the event's data")
	}
	back, err := events.FromMsg(overTheWire(t, got))
	if err != nil {
		t.Fatal(err)
	}
	e.DataBase64 = false // JSON data comes back as JSON, as from ToMsg
	requireSameEvent(t, back, e)
}

func TestToMsgOmitsStructuredContentType(t *testing.T) {
	e := newEvent(t)
	inner := `{"specversion":"1.0","id":"1","source":"/x","type":"t"}`
	if err := e.SetData(event.ApplicationCloudEventsJSON, []byte(inner)); err != nil {
		t.Fatal(err)
	}
	m, err := events.ToMsg(testSubject, e)
	if err != nil {
		t.Fatal(err)
	}
	if ct, ok := m.Header["Content-Type"]; ok {
		t.Fatalf("Content-Type = %q would mark the message as structured", ct)
	}
	got, err := events.FromMsg(overTheWire(t, m))
	if err != nil {
		t.Fatal(err)
	}
	if got.DataBase64 {
		t.Error("JSON data marked for base64")
	}
	e.DataBase64 = false
	requireSameEvent(t, got, e)
}

func TestToMsgRejects(t *testing.T) {
	tests := []struct {
		name    string
		subject string
		edit    func(*event.Event)
		want    error
		attr    string
	}{
		{name: "empty subject", subject: "", want: events.ErrInvalidSubject},
		{name: "wildcard subject", subject: "jl.in.*", want: events.ErrInvalidSubject},
		{name: "empty token", subject: "jl..in", want: events.ErrInvalidSubject},
		{name: "space in subject", subject: "jl.in a", want: events.ErrInvalidSubject},
		{name: "no id", edit: func(e *event.Event) { e.Context.(*event.EventContextV1).ID = "" }, want: events.ErrInvalidEvent, attr: "id"},
		{name: "blank type", edit: func(e *event.Event) { e.Context.(*event.EventContextV1).Type = " " }, want: events.ErrInvalidEvent, attr: "type"},
		{name: "spec 0.3", edit: func(e *event.Event) { e.Context = e.Context.AsV03() }, want: events.ErrInvalidEvent, attr: "specversion"},
		{name: "no context", edit: func(e *event.Event) { e.Context = nil }, want: events.ErrInvalidEvent, attr: "specversion"},
		{name: "newline in subject attribute", edit: func(e *event.Event) { e.SetSubject("a\nb") }, want: events.ErrInvalidEvent, attr: "subject"},
		{name: "invalid UTF-8 in id", edit: func(e *event.Event) { e.SetID("a\xffb") }, want: events.ErrInvalidEvent, attr: "id"},
		{name: "upper-case extension", edit: func(e *event.Event) { e.Context.(*event.EventContextV1).Extensions["Foo"] = "x" }, want: events.ErrInvalidEvent, attr: "Foo"},
		{name: "extension named data", edit: func(e *event.Event) { e.SetExtension("data", "x") }, want: events.ErrInvalidEvent, attr: "data"},
		{name: "bad media type", edit: func(e *event.Event) { e.SetDataContentType("not a type") }, want: events.ErrInvalidEvent, attr: "datacontenttype"},
		{name: "huge attribute", edit: func(e *event.Event) { e.SetExtension("big", strings.Repeat("€", 3000)) }, want: events.ErrTooLarge, attr: "big"},
		{name: "huge data", edit: func(e *event.Event) { e.DataEncoded = make([]byte, events.MaxEventSize+1) }, want: events.ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEvent(t)
			if tt.edit != nil {
				tt.edit(&e)
			}
			subject := tt.subject
			if subject == "" && tt.want != events.ErrInvalidSubject {
				subject = testSubject
			}
			check := func(subject string, e event.Event) (*nats.Msg, error) { return nil, events.CheckMsg(subject, e) }
			for name, toMsg := range map[string]func(string, event.Event) (*nats.Msg, error){"ToMsg": events.ToMsg, "ToMsgSharing": events.ToMsgSharing, "CheckMsg": check} {
				m, err := toMsg(subject, e)
				if !errors.Is(err, tt.want) {
					t.Fatalf("%s = %v, %v; want %v", name, m, err, tt.want)
				}
				if tt.want == events.ErrTooLarge && !errors.Is(err, events.ErrInvalidEvent) {
					t.Errorf("%s: error %v does not wrap ErrInvalidEvent", name, err)
				}
				if tt.attr != "" {
					var ae *events.AttributeError
					if !errors.As(err, &ae) || ae.Attribute != tt.attr {
						t.Fatalf("%s: error %v does not name attribute %q", name, err, tt.attr)
					}
				}
			}
		})
	}
}

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		edit func(*event.Event)
	}{
		{name: "every attribute"},
		{name: "minimal", edit: func(e *event.Event) {
			*e = event.New()
			e.SetID("1")
			e.SetSource("/x")
			e.SetType(events.TypeTick)
		}},
		{name: "binary data", edit: func(e *event.Event) {
			_ = e.SetData("application/octet-stream", []byte{0, 0xff, 0xc0, 0xa0})
		}},
		{name: "text data", edit: func(e *event.Event) { _ = e.SetData("text/plain; charset=utf-8", []byte("héllo\n")) }},
		{name: "data without content type", edit: func(e *event.Event) {
			e.Context.(*event.EventContextV1).DataContentType = nil
			e.DataEncoded = []byte(`[1,2,3]`)
		}},
		{name: "awkward strings", edit: func(e *event.Event) {
			e.SetID(`100% "sure" ` + "€")
			e.SetSubject(`C:\path with spaces\ü`)
			e.SetExtension(events.ExtParent, "feature/ü x")
			e.SetExtension("empty", "")
		}},
		{name: "time with offset", edit: func(e *event.Event) {
			e.SetTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("", 5*3600)))
		}},
		{name: "typed extensions", edit: func(e *event.Event) {
			e.SetExtension("flag", true)
			e.SetExtension("blob", []byte{1, 2, 3})
			e.SetExtension("when", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		}},
		{name: "control", edit: func(e *event.Event) {
			e.SetType(events.ControlType("cancel"))
			_ = e.SetData(event.ApplicationJSON, []byte(`{"reason":"stop"}`))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEvent(t)
			if tt.edit != nil {
				tt.edit(&e)
			}
			m, err := events.ToMsg(testSubject, e)
			if err != nil {
				t.Fatal(err)
			}
			if err := events.CheckMsg(testSubject, e); err != nil {
				t.Fatalf("CheckMsg refuses what ToMsg renders: %v", err)
			}
			got, err := events.FromMsg(overTheWire(t, m))
			if err != nil {
				t.Fatal(err)
			}
			// The event's own DataBase64 is a hint for JSON encoding that a
			// binary-mode message cannot carry; FromMsg derives it.
			e.DataBase64 = got.DataBase64
			requireSameEvent(t, got, e)

			again, err := events.ToMsg(testSubject, got)
			if err != nil {
				t.Fatalf("ToMsg(FromMsg(m)): %v", err)
			}
			if !maps.EqualFunc(again.Header, m.Header, slices.Equal) || !bytes.Equal(again.Data, m.Data) {
				t.Fatalf("ToMsg(FromMsg(m)) differs from m:\n got %v\nwant %v", again.Header, m.Header)
			}
		})
	}
}

// binaryMsg is a valid binary-mode message with the given headers added.
func binaryMsg(extra nats.Header, body string) *nats.Msg {
	m := nats.NewMsg(testSubject)
	m.Header["ce-specversion"] = []string{"1.0"}
	m.Header["ce-id"] = []string{"42"}
	m.Header["ce-source"] = []string{"/tests"}
	m.Header["ce-type"] = []string{events.TypeRequest}
	for k, v := range extra {
		if v == nil {
			delete(m.Header, k)
			continue
		}
		m.Header[k] = v
	}
	m.Data = []byte(body)
	return m
}

func TestFromMsg(t *testing.T) {
	tests := []struct {
		name  string
		msg   *nats.Msg
		check func(t *testing.T, e event.Event)
	}{
		{
			name: "quoted value",
			msg:  binaryMsg(nats.Header{"ce-subject": {`"a b"`}}, ""),
			check: func(t *testing.T, e event.Event) {
				if e.Subject() != "a b" {
					t.Errorf("subject = %q, want %q", e.Subject(), "a b")
				}
			},
		},
		{
			name: "lower-case percent-encoding",
			msg:  binaryMsg(nats.Header{"ce-subject": {"%e2%82%ac"}}, ""),
			check: func(t *testing.T, e event.Event) {
				if e.Subject() != "€" {
					t.Errorf("subject = %q, want %q", e.Subject(), "€")
				}
			},
		},
		{
			name: "header names in any case",
			msg: binaryMsg(nats.Header{
				"ce-id": nil, "CE-ID": {"X"}, "ce-type": nil, "Ce-Type": {"t"}, "Ce-JLAgent": {"reviewer"},
			}, ""),
			check: func(t *testing.T, e event.Event) {
				if e.ID() != "X" || e.Type() != "t" || e.Extensions()[events.ExtAgent] != "reviewer" {
					t.Errorf("got %v", e)
				}
			},
		},
		{
			name: "unknown headers become extensions",
			msg:  binaryMsg(nats.Header{"ce-traceparent": {"00-abc-01"}, "X-Other": {"ignored"}}, ""),
			check: func(t *testing.T, e event.Event) {
				if want := map[string]any{"traceparent": "00-abc-01"}; !maps.Equal(e.Extensions(), want) {
					t.Errorf("extensions = %v, want %v", e.Extensions(), want)
				}
			},
		},
		{
			name: "content type from Content-Type",
			msg:  binaryMsg(nats.Header{"content-type": {"text/plain"}}, "hi"),
			check: func(t *testing.T, e event.Event) {
				if e.DataContentType() != "text/plain" || string(e.Data()) != "hi" {
					t.Errorf("datacontenttype = %q, data = %q", e.DataContentType(), e.Data())
				}
			},
		},
		{
			name: "ce-datacontenttype wins",
			msg:  binaryMsg(nats.Header{"Content-Type": {"text/plain"}, "ce-datacontenttype": {"application/json"}}, "{}"),
			check: func(t *testing.T, e event.Event) {
				if e.DataContentType() != "application/json" {
					t.Errorf("datacontenttype = %q", e.DataContentType())
				}
			},
		},
		{
			name: "empty optional attributes are absent",
			msg:  binaryMsg(nats.Header{"ce-subject": {""}, "ce-time": {""}}, ""),
			check: func(t *testing.T, e event.Event) {
				ec := e.Context.(*event.EventContextV1)
				if ec.Subject != nil || ec.Time != nil {
					t.Errorf("subject %v, time %v; want both absent", ec.Subject, ec.Time)
				}
			},
		},
		{
			name: "JSON body kept byte for byte",
			msg:  binaryMsg(nats.Header{"ce-datacontenttype": {"application/json"}}, "{ \"b\":2,\n \"a\":1 }"),
			check: func(t *testing.T, e event.Event) {
				if string(e.Data()) != "{ \"b\":2,\n \"a\":1 }" || e.DataBase64 {
					t.Errorf("data = %q, base64 %v", e.Data(), e.DataBase64)
				}
			},
		},
		{
			name: "binary body",
			msg:  binaryMsg(nats.Header{"ce-datacontenttype": {"application/octet-stream"}}, "\x00\xff"),
			check: func(t *testing.T, e event.Event) {
				if string(e.Data()) != "\x00\xff" || !e.DataBase64 {
					t.Errorf("data = %q, base64 %v", e.Data(), e.DataBase64)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := events.FromMsg(tt.msg)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, e)
		})
	}
}

func TestFromMsgRejects(t *testing.T) {
	tests := []struct {
		name     string
		msg      *nats.Msg
		attr     string // attribute the error must name, if any
		tooLarge bool
		contains string
	}{
		{name: "missing id", msg: binaryMsg(nats.Header{"ce-id": nil}, ""), attr: "id", contains: `"id"`},
		{name: "missing source", msg: binaryMsg(nats.Header{"ce-source": nil}, ""), attr: "source"},
		{name: "missing type", msg: binaryMsg(nats.Header{"ce-type": nil}, ""), attr: "type"},
		{name: "missing specversion", msg: binaryMsg(nats.Header{"ce-specversion": nil}, ""), attr: "specversion"},
		{name: "no headers", msg: &nats.Msg{Subject: testSubject, Data: []byte("x")}, attr: "specversion"},
		{name: "specversion 0.3", msg: binaryMsg(nats.Header{"ce-specversion": {"0.3"}}, ""), attr: "specversion", contains: "0.3"},
		{name: "blank id", msg: binaryMsg(nats.Header{"ce-id": {"%20"}}, ""), attr: "id"},
		{name: "overlong UTF-8", msg: binaryMsg(nats.Header{"ce-subject": {"%C0%A0"}}, ""), attr: "subject", contains: "%C0%A0"},
		{name: "control character", msg: binaryMsg(nats.Header{"ce-subject": {"a%0Ab"}}, ""), attr: "subject"},
		{name: "bad percent-encoding", msg: binaryMsg(nats.Header{"ce-id": {"50%"}}, ""), attr: "id"},
		{name: "bad time", msg: binaryMsg(nats.Header{"ce-time": {"yesterday"}}, ""), attr: "time"},
		{name: "bad source", msg: binaryMsg(nats.Header{"ce-source": {"%25zz"}}, ""), attr: "source"},
		{name: "relative dataschema", msg: binaryMsg(nats.Header{"ce-dataschema": {"/schema"}}, ""), attr: "dataschema"},
		{name: "bad media type", msg: binaryMsg(nats.Header{"Content-Type": {"no type"}}, ""), attr: "datacontenttype"},
		{name: "extension name with underscore", msg: binaryMsg(nats.Header{"ce-my_ext": {"x"}}, ""), attr: "my_ext"},
		{name: "empty extension name", msg: binaryMsg(nats.Header{"ce-": {"x"}}, ""), attr: ""},
		{name: "reserved extension name", msg: binaryMsg(nats.Header{"ce-data": {"x"}}, ""), attr: "data"},
		{name: "attribute twice", msg: binaryMsg(nats.Header{"CE-ID": {"43"}}, ""), attr: "id", contains: "twice"},
		{name: "attribute with two values", msg: binaryMsg(nats.Header{"ce-id": {"1", "2"}}, ""), attr: "id"},
		{name: "Content-Type twice", msg: binaryMsg(nats.Header{"content-type": {"a/b"}, "Content-Type": {"a/b"}}, ""), contains: "twice"},
		{name: "header too large", msg: binaryMsg(nats.Header{"ce-jlparent": {strings.Repeat("a", events.MaxHeaderValueLen+1)}}, ""), attr: "jlparent", tooLarge: true},
		{name: "decoded value too large", msg: binaryMsg(nats.Header{"ce-jlparent": {strings.Repeat("ü", events.MaxHeaderValueLen/2)}}, ""), attr: "jlparent", tooLarge: true},
		{name: "body too large", msg: binaryMsg(nil, strings.Repeat("a", events.MaxEventSize+1)), tooLarge: true},
		{name: "batch mode", msg: &nats.Msg{Header: nats.Header{"Content-Type": {event.ApplicationCloudEventsBatchJSON}}, Data: []byte("[]")}, contains: "batch"},
		{name: "structured not JSON", msg: &nats.Msg{Header: nats.Header{"Content-Type": {"application/cloudevents+json"}}, Data: []byte("{")}},
		{name: "structured missing id", msg: &nats.Msg{Header: nats.Header{"Content-Type": {"application/cloudevents+json"}}, Data: []byte(`{"specversion":"1.0","source":"/x","type":"t"}`)}, attr: "id"},
		{name: "structured 0.3", msg: &nats.Msg{Header: nats.Header{"Content-Type": {"application/cloudevents+json"}}, Data: []byte(`{"specversion":"0.3","id":"1","source":"/x","type":"t"}`)}, attr: "specversion"},
		{name: "structured nested extension", msg: &nats.Msg{Header: nats.Header{"Content-Type": {"application/cloudevents+json"}}, Data: []byte(`{"specversion":"1.0","id":"1","source":"/x","type":"t","ext":{"a":1}}`)}},
		{name: "nil message"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := events.FromMsg(tt.msg)
			if err == nil {
				t.Fatalf("FromMsg = %v, want an error", e)
			}
			if !errors.Is(err, events.ErrInvalidEvent) {
				t.Errorf("error %v does not wrap ErrInvalidEvent", err)
			}
			if tt.tooLarge != errors.Is(err, events.ErrTooLarge) {
				t.Errorf("error %v: errors.Is(ErrTooLarge) = %v, want %v", err, !tt.tooLarge, tt.tooLarge)
			}
			if tt.attr != "" {
				var ae *events.AttributeError
				if !errors.As(err, &ae) || ae.Attribute != tt.attr {
					t.Errorf("error %v does not name attribute %q", err, tt.attr)
				}
			}
			if !strings.Contains(err.Error(), tt.contains) {
				t.Errorf("error %q does not contain %q", err, tt.contains)
			}
		})
	}
}

func TestStructuredModeNormalised(t *testing.T) {
	tests := []struct {
		name       string
		structured string
		binary     *nats.Msg
	}{
		{
			name: "JSON data",
			structured: `{"specversion":"1.0","id":"42","source":"/tests","type":"dev.jetloop.request",
				"subject":"octo/repo#12","time":"2026-03-04T05:06:07.5Z","datacontenttype":"application/json",
				"jlagent":"reviewer","jlhops":3,"data":{"a": [1, 2]}}`,
			binary: binaryMsg(nats.Header{
				"ce-subject": {"octo/repo#12"}, "ce-time": {"2026-03-04T05:06:07.5Z"},
				"ce-datacontenttype": {"application/json"}, "ce-jlagent": {"reviewer"}, "ce-jlhops": {"3"},
			}, `{"a": [1, 2]}`),
		},
		{
			name:       "text data",
			structured: `{"specversion":"1.0","id":"42","source":"/tests","type":"dev.jetloop.request","datacontenttype":"text/plain","data":"hello\n€"}`,
			binary:     binaryMsg(nats.Header{"Content-Type": {"text/plain"}}, "hello\n€"),
		},
		{
			name:       "base64 data",
			structured: `{"specversion":"1.0","id":"42","source":"/tests","type":"dev.jetloop.request","datacontenttype":"application/octet-stream","data_base64":"AP8="}`,
			binary:     binaryMsg(nats.Header{"ce-datacontenttype": {"application/octet-stream"}}, "\x00\xff"),
		},
		{
			name:       "base64 text data",
			structured: `{"specversion":"1.0","id":"42","source":"/tests","type":"dev.jetloop.request","datacontenttype":"text/plain","data_base64":"aGk="}`,
			binary:     binaryMsg(nats.Header{"ce-datacontenttype": {"text/plain"}}, "hi"),
		},
		{
			name:       "no data, boolean extension, empty subject",
			structured: `{"specversion":"1.0","id":"42","source":"/tests","type":"dev.jetloop.request","subject":"","urgent":true}`,
			binary:     binaryMsg(nats.Header{"ce-urgent": {"true"}}, ""),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, ct := range []string{"application/cloudevents+json", "Application/CloudEvents+JSON; charset=utf-8", "application/cloudevents"} {
				sm := &nats.Msg{Subject: testSubject, Header: nats.Header{"content-type": {ct}}, Data: []byte(tt.structured)}
				fromStructured, err := events.FromMsg(sm)
				if err != nil {
					t.Fatalf("structured with %q: %v", ct, err)
				}
				fromBinary, err := events.FromMsg(tt.binary)
				if err != nil {
					t.Fatalf("binary: %v", err)
				}
				requireSameEvent(t, fromStructured, fromBinary)
			}
		})
	}
}

func TestMsgID(t *testing.T) {
	e := newEvent(t)
	sum := sha256.Sum256([]byte(e.Source() + "\x00" + e.ID()))
	if got, want := events.MsgID(e), hex.EncodeToString(sum[:])[:32]; got != want {
		t.Fatalf("MsgID = %q, want %q", got, want)
	}
	other := e.Clone()
	other.SetSubject("something else")
	other.SetExtension(events.ExtHops, int32(7))
	if events.MsgID(other) != events.MsgID(e) {
		t.Error("MsgID depends on more than source and id")
	}
	// The separator keeps ("ab", "c") and ("a", "bc") apart.
	a, b := event.New(), event.New()
	a.SetSource("/ab")
	a.SetID("c")
	b.SetSource("/a")
	b.SetID("bc")
	if events.MsgID(a) == events.MsgID(b) {
		t.Error("MsgID collides across the source/id boundary")
	}
}

func TestTypes(t *testing.T) {
	tests := []struct {
		name string
		got  string
		want string
	}{
		{name: "control", got: events.ControlType("cancel"), want: "dev.jetloop.control.cancel"},
		{name: "github with action", got: events.GitHubType("pull_request", "opened"), want: "com.github.pull_request.opened"},
		{name: "github without action", got: events.GitHubType("push", ""), want: "com.github.push"},
		{name: "tick", got: events.TypeTick, want: "dev.jetloop.tick"},
		{name: "request", got: events.TypeRequest, want: "dev.jetloop.request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Fatalf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
	for _, name := range []string{events.ExtAgent, events.ExtSession, events.ExtHops, events.ExtParent} {
		if !event.IsExtensionNameValid(name) || strings.ToLower(name) != name {
			t.Errorf("extension name %q is not valid", name)
		}
	}
}

func FuzzEventRoundTrip(f *testing.F) {
	f.Add("1", "/src", "t", "s", "reviewer", "application/json", []byte(`{"a":1}`))
	f.Fuzz(func(t *testing.T, id, source, typ, subject, ext, contentType string, data []byte) {
		e := event.New()
		e.SetID(id)
		e.SetSource(source)
		e.SetType(typ)
		e.SetSubject(subject)
		e.SetTime(time.Unix(1700000000, 123456789))
		e.SetExtension(events.ExtSession, ext)
		e.SetDataContentType(contentType)
		e.DataEncoded = data
		m, err := events.ToMsg(testSubject, e)
		if cerr := events.CheckMsg(testSubject, e); (cerr == nil) != (err == nil) || cerr != nil && cerr.Error() != err.Error() {
			t.Fatalf("CheckMsg = %v, ToMsg = %v", cerr, err)
		}
		if err != nil {
			if !errors.Is(err, events.ErrInvalidEvent) {
				t.Fatalf("ToMsg: error %v does not wrap ErrInvalidEvent", err)
			}
			return
		}
		got, err := events.FromMsg(overTheWire(t, m))
		if err != nil {
			t.Fatalf("FromMsg(ToMsg(e)): %v\nheaders %q", err, m.Header)
		}
		e.DataBase64 = got.DataBase64
		requireSameEvent(t, got, e)
	})
}

func FuzzFromMsg(f *testing.F) {
	f.Add("1.0", "42", "/tests", "t", "jlagent", "reviewer", "", []byte("body"))
	f.Fuzz(func(t *testing.T, specversion, id, source, typ, extName, extValue, contentType string, body []byte) {
		m := &nats.Msg{Subject: testSubject, Header: nats.Header{}, Data: body}
		for k, v := range map[string]string{
			"ce-specversion": specversion, "ce-id": id, "ce-source": source, "ce-type": typ,
			"ce-" + extName: extValue, "Content-Type": contentType,
		} {
			if v != "" {
				m.Header[k] = []string{v}
			}
		}
		e, err := events.FromMsg(m)
		if err != nil {
			if !errors.Is(err, events.ErrInvalidEvent) {
				t.Fatalf("FromMsg: error %v does not wrap ErrInvalidEvent", err)
			}
			return
		}
		// Whatever FromMsg accepts, ToMsg writes and FromMsg reads back the same.
		m2, err := events.ToMsg(testSubject, e)
		if err != nil {
			t.Fatalf("ToMsg(FromMsg(m)): %v\nevent %v", err, e)
		}
		again, err := events.FromMsg(overTheWire(t, m2))
		if err != nil {
			t.Fatalf("FromMsg(ToMsg(FromMsg(m))): %v\nheaders %q", err, m2.Header)
		}
		requireSameEvent(t, again, e)
	})
}

func TestSubjectMsgIDDiffersPerSubject(t *testing.T) {
	e := event.New()
	e.SetID("d1")
	e.SetSource("https://github.com/octo/repo")
	e.SetType("com.github.ping")
	a, _ := events.ToMsg("jl.in.reviewer.s", e)
	b, _ := events.ToMsg("jl.in.labeler.s", e)
	again, _ := events.ToMsg("jl.in.reviewer.s", e)
	if a.Header.Get("Nats-Msg-Id") == b.Header.Get("Nats-Msg-Id") {
		t.Fatal("one event admitted for two sessions gets one Nats-Msg-Id: the stream would drop the second")
	}
	if a.Header.Get("Nats-Msg-Id") != again.Header.Get("Nats-Msg-Id") {
		t.Fatal("the same event on the same subject gets two ids")
	}
}

func TestStructuredWithoutContentType(t *testing.T) {
	body := []byte(`{"specversion":"1.0","id":"x1","source":"/s","type":"t.x","data":{"a":1}}`)
	e, err := events.FromMsg(&nats.Msg{Subject: "jl.in.a.b", Data: body})
	if err != nil {
		t.Fatalf("structured event without Content-Type: %v", err)
	}
	if e.ID() != "x1" || string(e.Data()) != `{"a":1}` {
		t.Fatalf("got id %q data %s", e.ID(), e.Data())
	}
	// A body that is not an event, without ce- headers, still fails.
	if _, err := events.FromMsg(&nats.Msg{Subject: "jl.in.a.b", Data: []byte(`{"a":1}`)}); err == nil {
		t.Fatal("a plain JSON body was taken for an event")
	}
}

// Attribute reads what ToMsg wrote, and nothing that is ambiguous.
func TestAttribute(t *testing.T) {
	e := event.New()
	e.SetID("1")
	e.SetSource("/s")
	e.SetType("t")
	e.SetExtension("jlonbusy", "interrupt")
	e.SetExtension("jlnote", "a b%c")
	m, err := events.ToMsg("jl.in.a.s", e)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"jlonbusy": "interrupt", "jlnote": "a b%c", "type": "t"} {
		if v, ok := events.Attribute(m.Header, name); !ok || v != want {
			t.Errorf("%s: %q %v, want %q", name, v, ok, want)
		}
	}
	if _, ok := events.Attribute(m.Header, "jlmissing"); ok {
		t.Error("an absent attribute was found")
	}
	m.Header["CE-JLONBUSY"] = []string{"steer"}
	if _, ok := events.Attribute(m.Header, "jlonbusy"); ok {
		t.Error("an attribute given twice was read")
	}
}

// headerKey names the same header as headerPrefix+name for every name.
func TestHeaderKey(t *testing.T) {
	for _, name := range []string{"specversion", "id", "source", "type", "datacontenttype", "dataschema", "subject", "time",
		events.ExtAgent, events.ExtSession, events.ExtHops, "jltrigger", "traceparent", "tracestate", "x", ""} {
		if got := events.HeaderKey(name); got != "ce-"+name {
			t.Errorf("headerKey(%q) = %q", name, got)
		}
	}
}
