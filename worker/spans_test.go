package worker_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/tracing"
	"github.com/jetloop/jetloop/worker"
)

// spansOf returns the ended spans of rec by name, waiting until every
// name in want has one.
func spansOf(t *testing.T, rec *tracetest.SpanRecorder, want ...string) map[string][]sdktrace.ReadOnlySpan {
	t.Helper()
	var out map[string][]sdktrace.ReadOnlySpan
	natstest.WaitFor(t, 30*time.Second, func() error {
		out = map[string][]sdktrace.ReadOnlySpan{}
		for _, s := range rec.Ended() {
			out[s.Name()] = append(out[s.Name()], s)
		}
		for _, n := range want {
			if len(out[n]) == 0 {
				var got []string
				for k := range out {
					got = append(got, k)
				}
				return fmt.Errorf("no span %q yet; have %v", n, got)
			}
		}
		return nil
	})
	return out
}

func attr(s sdktrace.ReadOnlySpan, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// TestRunSpans runs a session whose event carries a traceparent: the run's
// span is the child of the sender's, the model calls' and the tool call's
// spans are the run's, with the GenAI attributes; the state records the
// run's traceparent.
func TestRunSpans(t *testing.T) {
	e := setup(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	led := &ledger{path: filepath.Join(t.TempDir(), "ledger")}
	d := defs{"demo": {Name: "demo", Tools: []string{"ledger"}, Model: scripted(
		callLedger("Looking."),
		policies.ScriptEntry{Text: "LGTM.", Usage: policies.Usage{InputTokens: 100, OutputTokens: 10}},
	)}}
	e.start(t, worker.Config{Definitions: d, Tools: worker.ToolMap{"ledger": led}, Agents: []string{"demo"}, Tracer: tp})
	ref := e.ref(t, "demo", "s1")

	sender, span := tp.Tracer("test").Start(context.Background(), "sender")
	if _, err := worker.Send(sender, e.js, e.names, ref, worker.Request{Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	span.End()
	e.waitStatus(t, ref, record.StatusDone)
	got := spansOf(t, rec, "run demo", "chat", "execute_tool ledger")
	root := span.SpanContext()
	run := got["run demo"][0]
	if run.Parent().SpanID() != root.SpanID() || run.SpanContext().TraceID() != root.TraceID() {
		t.Fatalf("run span's parent %v, want the sender's %v", run.Parent(), root)
	}
	if run.SpanKind() != trace.SpanKindConsumer || attr(run, tracing.AttrStatus).AsString() != "done" || attr(run, tracing.AttrSession).AsString() != "s1" {
		t.Fatalf("run span: kind %v, attributes %v", run.SpanKind(), run.Attributes())
	}
	chats := got["chat"]
	if len(chats) != 2 {
		t.Fatalf("%d model call spans, want 2", len(chats))
	}
	for _, c := range chats {
		if c.Parent().SpanID() != run.SpanContext().SpanID() || c.SpanKind() != trace.SpanKindClient {
			t.Fatalf("model span %s: parent %v, kind %v", c.Name(), c.Parent(), c.SpanKind())
		}
		if attr(c, tracing.GenAIOperation).AsString() != "chat" || attr(c, tracing.GenAIProvider).AsString() != "scripted" || attr(c, tracing.GenAISystem).AsString() != "scripted" {
			t.Fatalf("model span attributes %v", c.Attributes())
		}
	}
	last := chats[len(chats)-1]
	if attr(last, tracing.GenAIInputTokens).AsInt64() != 100 || attr(last, tracing.GenAIOutputTokens).AsInt64() != 10 {
		t.Fatalf("model span tokens: %v", last.Attributes())
	}
	tool := got["execute_tool ledger"][0]
	if tool.Parent().SpanID() != run.SpanContext().SpanID() || attr(tool, tracing.GenAIToolName).AsString() != "ledger" ||
		!strings.HasPrefix(attr(tool, tracing.GenAIToolCallID).AsString(), "call_") {
		t.Fatalf("tool span: parent %v, attributes %v", tool.Parent(), tool.Attributes())
	}
	if st := state(t, e, ref); tracing.SpanContextOf(st.Trace).SpanID() != run.SpanContext().SpanID() {
		t.Fatalf("state trace %q, want the run span %v", st.Trace, run.SpanContext())
	}
	// No span carries what was said: the request, the model's answers,
	// a tool's arguments (the ledger's note is the answer's text).
	for _, sp := range rec.Ended() {
		kvs := sp.Attributes()
		for _, ev := range sp.Events() {
			kvs = append(kvs, ev.Attributes...)
		}
		for _, kv := range kvs {
			if v := kv.Value.Emit(); strings.Contains(v, "hello") || strings.Contains(v, "Looking.") || strings.Contains(v, "LGTM.") {
				t.Errorf("span %s: attribute %s=%q carries the conversation", sp.Name(), kv.Key, v)
			}
		}
	}
}

// TestApprovalContinuesTrace blocks a run for an approval: its span ends
// blocked; the approve's application is a span of the approve's own
// trace linked to the run; the run's remaining steps continue the run's
// trace.
func TestApprovalContinuesTrace(t *testing.T) {
	e := setup(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	led := &ledger{path: filepath.Join(t.TempDir(), "ledger")}
	e.start(t, worker.Config{Definitions: defs{"gated": gatedDef()}, Tools: worker.ToolMap{"ledger": led}, Agents: []string{"gated"}, Tracer: tp})
	ref := e.ref(t, "gated", "s1")
	sender, span := tp.Tracer("test").Start(context.Background(), "sender")
	if _, err := worker.Send(sender, e.js, e.names, ref, worker.Request{Text: "write it"}); err != nil {
		t.Fatal(err)
	}
	span.End()
	tr := e.waitStatus(t, ref, record.StatusBlocked)
	first := spansOf(t, rec, "run gated")["run gated"][0]
	if attr(first, tracing.AttrStatus).AsString() != "blocked" {
		t.Fatalf("run span ended %v", first.Attributes())
	}
	approver, aspan := tp.Tracer("test").Start(context.Background(), "approver")
	if _, err := control.Publish(approver, e.js, e.names, ref, control.Message{Verb: control.Approve, CallID: tr.WaitingFor}); err != nil {
		t.Fatal(err)
	}
	aspan.End()
	e.waitStatus(t, ref, record.StatusDone)
	got := spansOf(t, rec, "control approve", "execute_tool ledger")
	ctl := got["control approve"][0]
	if ctl.Parent().SpanID() != aspan.SpanContext().SpanID() || len(ctl.Links()) != 1 || ctl.Links()[0].SpanContext.SpanID() != first.SpanContext().SpanID() {
		t.Fatalf("control span: parent %v (approver %v), links %v", ctl.Parent(), aspan.SpanContext(), ctl.Links())
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := len(spansOf(t, rec, "run gated")["run gated"]); n != 2 {
			return fmt.Errorf("%d run spans", n)
		}
		return nil
	})
	cont := spansOf(t, rec)["run gated"][1]
	tool := got["execute_tool ledger"][0]
	if cont.Parent().SpanID() != first.SpanContext().SpanID() || cont.SpanContext().TraceID() != span.SpanContext().TraceID() ||
		tool.Parent().SpanID() != cont.SpanContext().SpanID() || attr(cont, tracing.AttrStatus).AsString() != "done" {
		t.Fatalf("continued run %v (parent %v), tool parent %v", cont.Attributes(), cont.Parent(), tool.Parent())
	}
}

// A delegated child's run is in its parent's trace: the delegate call's
// span publishes the child's event through admission, and the child's
// run span is the child of that publish.
func TestDelegationIsOneTrace(t *testing.T) {
	e := setup(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	lead := policies.Definition{Name: "lead", Tools: []string{"delegate"}, Model: policies.Model{Provider: "scripted", Script: []policies.ScriptEntry{
		{Text: "One review.", ToolCalls: []policies.ScriptToolCall{delegateCall("rev", "review it", nil, nil)}},
		{Text: "Reviewed."},
	}}}
	rev := policies.Definition{Name: "rev", Model: scripted(policies.ScriptEntry{Text: "Fine."})}
	d := defs{"lead": lead, "rev": rev}
	e.start(t, worker.Config{Definitions: d, Tools: builtinTools(t, "delegate"), Agents: []string{"lead", "rev"},
		Admit: admitWith(t, e, d), Tracer: tp})
	ref := e.ref(t, "lead", "pr-1")
	sender, span := tp.Tracer("test").Start(context.Background(), "sender")
	if _, err := worker.Send(sender, e.js, e.names, ref, worker.Request{Text: "review"}); err != nil {
		t.Fatal(err)
	}
	span.End()
	e.waitStatus(t, ref, record.StatusDone)
	got := spansOf(t, rec, "run rev", "execute_tool delegate", "publish")
	tool, child := got["execute_tool delegate"][0], got["run rev"][0]
	var pub sdktrace.ReadOnlySpan
	for _, p := range got["publish"] {
		if p.Parent().SpanID() == tool.SpanContext().SpanID() {
			pub = p
		}
	}
	if pub == nil {
		t.Fatalf("no publish span under the delegate call's")
	}
	if child.Parent().SpanID() != pub.SpanContext().SpanID() || child.SpanContext().TraceID() != span.SpanContext().TraceID() {
		t.Fatalf("child run: parent %v trace %v; want the delegate's publish %v in trace %v",
			child.Parent(), child.SpanContext().TraceID(), pub.SpanContext(), span.SpanContext().TraceID())
	}
}

// A compaction is a model call: it has its span, marked, in the run's
// trace.
func TestCompactionSpan(t *testing.T) {
	e := setup(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	var script []policies.ScriptEntry
	for i := 1; i <= 8; i++ {
		script = append(script,
			policies.ScriptEntry{Text: "Measuring.", ToolCalls: []policies.ScriptToolCall{{Name: "probe", Args: map[string]any{"n": i}}}},
			policies.ScriptEntry{Text: fmt.Sprintf("Measured %d.", i)})
	}
	keepFirst, keepLast := 1, 2
	def := policies.Definition{Name: "mon", Tools: []string{"probe"}, Model: policies.Model{Provider: "scripted", Script: script},
		Context: &policies.ContextPolicy{CompactAtTokens: 2000, KeepFirstTurns: &keepFirst, KeepLastTurns: &keepLast}}
	e.start(t, worker.Config{Definitions: defs{"mon": def}, Tools: worker.ToolMap{"probe": big{}}, Agents: []string{"mon"}, Tracer: tp})
	ref := e.ref(t, "mon", "health")
	for i := 1; i <= 8; i++ {
		e.send(t, ref, "tick")
		e.waitStatusTurns(t, ref, record.StatusDone, 2*i)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		for _, s := range rec.Ended() {
			if s.Name() == "chat" && attr(s, "jetloop.compaction").AsBool() {
				if s.Parent().IsValid() && attr(s, tracing.GenAIOperation).AsString() == "chat" {
					return nil
				}
			}
		}
		var names []string
		for _, s := range rec.Ended() {
			names = append(names, s.Name()+fmt.Sprint(s.Attributes()))
		}
		return fmt.Errorf("no compaction span among %v", names)
	})
}
