package tools_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools"
)

func provisioned(t *testing.T) jetstream.JetStream {
	t.Helper()
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s.ClientURL())
	if _, err := streams.Provision(t.Context(), js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	return js
}

// read_event reads a session's own event whole, a path of its data, or
// pages of either; another session's event, a missing one and a bad path
// are error results the model can act on.
func TestReadEvent(t *testing.T) {
	js := provisioned(t)
	ctx := t.Context()
	names := streams.Default()
	in, err := js.Stream(ctx, names.StreamIn())
	if err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile("../projection/testdata/github/pull_request/opened.payload.json")
	if err != nil {
		t.Fatal(err)
	}
	publish := func(session string) uint64 {
		e := event.New()
		e.SetID("d-" + session)
		e.SetSource("https://github.com/Codertocat/Hello-World")
		e.SetType("com.github.pull_request.opened")
		if err := e.SetData(event.ApplicationJSON, body); err != nil {
			t.Fatal(err)
		}
		ref, _ := streams.NewSessionRef("pr-reviewer", session)
		m, err := events.ToMsg(names.In(ref), e)
		if err != nil {
			t.Fatal(err)
		}
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	mine, theirs := publish("octo/repo#12"), publish("other")
	r, err := tools.NewRegistry(tools.RegistryOptions{}, tools.Builtins(tools.BuiltinConfig{Events: tools.Events(js, in), BlobReadLimit: 4096})...)
	if err != nil {
		t.Fatal(err)
	}
	run := func(args string) tools.Result {
		t.Helper()
		res, err := r.Run(ctx, "read_event", call(args))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := run(fmt.Sprintf(`{"seq": %d, "path": "pull_request.body"}`, mine))
	if res.IsError || !strings.HasSuffix(res.Content, "\nThis is a pretty simple change that we need to pull into master.") || !strings.Contains(res.Content, `"pull_request.body": bytes 0-64 of 64; end]`) {
		t.Fatalf("path: %+v", res)
	}
	res = run(fmt.Sprintf(`{"seq": %d, "path": "pull_request.labels.0"}`, mine))
	if res.IsError || !strings.Contains(res.Content, `"name": "bug"`) {
		t.Fatalf("list index: %+v", res)
	}
	var got strings.Builder
	for offset := 0; ; {
		res := run(fmt.Sprintf(`{"seq": %d, "offset": %d}`, mine, offset))
		header, data, _ := strings.Cut(res.Content, "\n")
		if res.IsError || len(data) > 4096 {
			t.Fatalf("page at %d: %s", offset, header)
		}
		got.WriteString(data)
		if strings.HasSuffix(header, "; end]") {
			break
		}
		if _, err := fmt.Sscanf(header[strings.Index(header, "next part at offset"):], "next part at offset %d]", &offset); err != nil {
			t.Fatalf("header %q: %v", header, err)
		}
	}
	if got.String() != string(body) {
		t.Fatalf("pages hold %d bytes, the event %d", got.Len(), len(body))
	}
	// A fork reads the events of the sessions it was forked from: its
	// transcript is theirs up to the fork, and names their sequences.
	fork := call(fmt.Sprintf(`{"seq": %d, "path": "pull_request.number"}`, theirs))
	fork.Session, fork.MayRead = "other-fork", func(_ context.Context, s string) bool { return s == "other" }
	if res, err := r.Run(ctx, "read_event", fork); err != nil || res.IsError || !strings.HasSuffix(res.Content, "\n2") {
		t.Fatalf("a fork reading its parent's event: %+v, %v", res, err)
	}
	fork.Args = []byte(fmt.Sprintf(`{"seq": %d}`, mine))
	if res, err := r.Run(ctx, "read_event", fork); err != nil || !res.IsError || !strings.Contains(res.Content, "not an event of this session") {
		t.Fatalf("a fork reading another session's event: %+v, %v", res, err)
	}
	for _, tt := range []struct{ args, want string }{
		{fmt.Sprintf(`{"seq": %d}`, theirs), "not an event of this session"},
		{`{"seq": 999}`, "no event 999"},
		{fmt.Sprintf(`{"seq": %d, "path": "pull_request.nope"}`, mine), `"pull_request" has no field "nope"`},
		{fmt.Sprintf(`{"seq": %d, "path": "pull_request.labels.7"}`, mine), "is a list of 1"},
		{fmt.Sprintf(`{"seq": %d, "offset": 100000}`, mine), "past the end"},
	} {
		if res := run(tt.args); !res.IsError || !strings.Contains(res.Content, tt.want) {
			t.Errorf("%s: %+v, want an error with %q", tt.args, res, tt.want)
		}
	}
}

// Notes are per session, bounded, appended or replaced, and a replay of
// the last write (the same call id) changes nothing.
func TestNotes(t *testing.T) {
	js := provisioned(t)
	ctx := t.Context()
	kv, err := js.KeyValue(ctx, streams.Default().BucketSessions())
	if err != nil {
		t.Fatal(err)
	}
	r, err := tools.NewRegistry(tools.RegistryOptions{}, tools.Builtins(tools.BuiltinConfig{Sessions: kv})...)
	if err != nil {
		t.Fatal(err)
	}
	run := func(tool, id, session, args string) tools.Result {
		t.Helper()
		c := call(args)
		c.ID, c.Session = id, session
		res, err := r.Run(ctx, tool, c)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := run("notes_read", "c0", "s1", `{}`); res.IsError || res.Content != "[no notes yet]" {
		t.Fatalf("empty notes: %+v", res)
	}
	run("notes_write", "c1", "s1", `{"text": "baseline: 200 OK"}`)
	run("notes_write", "c2", "s1", `{"text": "latency 40ms", "mode": "append"}`)
	run("notes_write", "c2", "s1", `{"text": "latency 40ms", "mode": "append"}`) // a replay
	if res := run("notes_read", "c3", "s1", `{}`); res.Content != "baseline: 200 OK\nlatency 40ms" {
		t.Fatalf("notes %q", res.Content)
	}
	if res := run("notes_read", "c3", "s2", `{}`); res.Content != "[no notes yet]" {
		t.Fatalf("another session's notes: %q", res.Content)
	}
	res := run("notes_write", "c4", "s1", fmt.Sprintf(`{"text": %q, "mode": "append"}`, strings.Repeat("x", tools.MaxNotesBytes)))
	if !res.IsError || !strings.Contains(res.Content, "condense") {
		t.Fatalf("oversized notes: %+v", res)
	}
	run("notes_write", "c5", "s1", `{"text": "condensed"}`)
	ref, _ := streams.NewSessionRef("pr-reviewer", "s1")
	n, _, err := tools.ReadNotes(ctx, kv, streams.Default(), ref)
	if err != nil || n.Text != "condensed" || n.Call != "c5" {
		t.Fatalf("stored notes %+v, %v", n, err)
	}
	if _, err := tools.Builtins(tools.BuiltinConfig{})[7].Call(context.Background(), tools.Call{Agent: "a", Session: "s", Args: []byte(`{"text":"x"}`)}); err != nil {
		t.Fatal(err)
	}
}

// Arguments with a key twice in one object are refused: the schema would
// check the last value and the tool decode the first.
func TestDuplicateKeysRefused(t *testing.T) {
	r, err := tools.NewRegistry(tools.RegistryOptions{}, echo())
	if err != nil {
		t.Fatal(err)
	}
	for args, dup := range map[string]bool{
		`{"text":"a","text":"b"}`:            true,
		`{"text":"a","x":{"t":1,"t":2}}`:     true,
		`{"text":"a","x":{"text":1}}`:        false,
		`{"text":"a","x":[{"t":1},{"t":2}]}`: false,
	} {
		err := r.Validate("echo", []byte(args))
		if dup != (err != nil && strings.Contains(err.Error(), "appears twice")) {
			t.Errorf("%s: %v", args, err)
		}
	}
}

// read_blob pages through a masked result by its transcript key, and an
// offset past the end of a result, an empty one included, is an error
// result.
func TestReadBlobMaskedResult(t *testing.T) {
	js := provisioned(t)
	ctx := t.Context()
	names := streams.Default()
	kv, err := js.KeyValue(ctx, names.BucketSessions())
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := streams.NewSessionRef("pr-reviewer", "octo/repo#12")
	put := func(id uint64, result string) string {
		key := names.LogKey(ref, id)
		b := fmt.Appendf(nil, `{"id":%d,"kind":"tool_result","turn":1,"call_id":"c%d","name":"probe","result":%q}`, id, id, result)
		if _, err := kv.Put(ctx, key, b); err != nil {
			t.Fatal(err)
		}
		return key
	}
	full, empty := put(3, strings.Repeat("ok ", 10)), put(4, "")
	r, err := tools.NewRegistry(tools.RegistryOptions{}, tools.Builtins(tools.BuiltinConfig{Sessions: kv, BlobReadLimit: 1000})...)
	if err != nil {
		t.Fatal(err)
	}
	run := func(args map[string]any) tools.Result {
		t.Helper()
		res, err := r.Run(ctx, "read_blob", call(argsJSON(t, args)))
		if err != nil {
			t.Fatalf("read_blob %v: %v", args, err)
		}
		return res
	}
	if res := run(map[string]any{"handle": full, "offset": 27}); res.IsError || !strings.HasSuffix(res.Content, "bytes 27-30 of 30; end of blob]\nok ") {
		t.Fatalf("last page: %+v", res)
	}
	if res := run(map[string]any{"handle": empty}); res.IsError || !strings.Contains(res.Content, "bytes 0-0 of 0") {
		t.Fatalf("empty result: %+v", res)
	}
	for _, args := range []map[string]any{{"handle": full, "offset": 31}, {"handle": empty, "offset": 5}} {
		if res := run(args); !res.IsError || !strings.Contains(res.Content, "past the end") {
			t.Fatalf("%v: %+v, want an error result", args, res)
		}
	}
}

// read_event reads an event where it is stored, whatever its sender set
// of the headers a direct get adds: an event of the session naming
// another session's subject, or without data and with a Status header,
// is the session's own, and another session's event naming this
// session's subject is not.
func TestReadEventTrustsTheServerOverTheEvent(t *testing.T) {
	js := provisioned(t)
	ctx := t.Context()
	names := streams.Default()
	in, err := js.Stream(ctx, names.StreamIn())
	if err != nil {
		t.Fatal(err)
	}
	mine, _ := streams.NewSessionRef("pr-reviewer", "octo/repo#12")
	other, _ := streams.NewSessionRef("pr-reviewer", "other")
	publish := func(ref streams.SessionRef, id, data string, h map[string]string) uint64 {
		e := event.New()
		e.SetID(id)
		e.SetSource("test")
		e.SetType("com.example.note")
		if data != "" {
			if err := e.SetData("text/plain", []byte(data)); err != nil {
				t.Fatal(err)
			}
		}
		m, err := events.ToMsg(names.In(ref), e)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range h {
			m.Header.Set(k, v)
		}
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	elsewhere := publish(mine, "e1", "mine, naming the other", map[string]string{jetstream.SubjectHeader: names.In(other)})
	status := publish(mine, "e2", "", map[string]string{"Status": "503"})
	intruder := publish(other, "e3", "the other's, naming mine", map[string]string{jetstream.SubjectHeader: names.In(mine)})
	r, err := tools.NewRegistry(tools.RegistryOptions{}, tools.Builtins(tools.BuiltinConfig{Events: tools.Events(js, in), BlobReadLimit: 4096})...)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		seq     uint64
		isError bool
		want    string
	}{
		{"own event naming another session", elsewhere, false, "mine, naming the other"},
		{"own event with a status", status, false, "bytes 0-0 of 0"},
		{"another session's event naming this one", intruder, true, "not an event of this session"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, err := r.Run(ctx, "read_event", call(fmt.Sprintf(`{"seq": %d}`, tt.seq)))
			if err != nil {
				t.Fatalf("event %d: %v", tt.seq, err)
			}
			if res.IsError != tt.isError || !strings.Contains(res.Content, tt.want) {
				t.Fatalf("event %d: %+v, want error %t with %q", tt.seq, res, tt.isError, tt.want)
			}
		})
	}
}
