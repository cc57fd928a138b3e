package worker

import (
	"context"
	"fmt"
	"slices"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/projection"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/tools"
	"github.com/jetloop/jetloop/window"
)

// eventText is what an input event puts into the context: the admitting
// trigger's prompt (rendered at admission) leading the event's payload
// (the latest of a debounced burst's, saying how many it stands for):
// the trigger's payload expression, else payload: full, else the default
// projection (a compact one for GitHub deliveries). A payload that fails
// to evaluate falls back to the projection and says so. The whole event
// stays in JL_IN, where read_event reads it.
func (s *session) eventText(ctx context.Context, ev event.Event, seq uint64, burst int) string {
	pe := projection.Event{
		Type: ev.Type(), Source: ev.Source(), Subject: ev.Subject(),
		Request:     ev.Type() == events.TypeRequest,
		ContentType: ev.DataContentType(), Data: ev.Data(),
	}
	var note string
	trigger := s.trigger(ev)
	body, mode := "", projection.Full
	switch {
	case trigger != nil && trigger.Payload == policies.PayloadFull:
		body = projection.DataText(pe.ContentType, pe.Data)
	case trigger != nil && trigger.HasPayload():
		v, err := s.payload(ctx, trigger, ev)
		if err == nil {
			var text string
			if text, err = policies.PayloadText(v); err == nil {
				body, mode = projection.Cut(text, policies.MaxPayloadLen), projection.Expressed
				break
			}
		}
		s.log.Warn("payload expression failed; the event goes as its default projection", "seq", seq, "trigger", trigger.Name, "err", err)
		note = fmt.Sprintf("\n[the payload of trigger %s failed (%v); this is the default projection]", trigger.Name, err)
		fallthrough
	default:
		if pe.Parsed == nil && !pe.Request {
			if vars, err := policies.EventVars(ev); err == nil {
				pe.Parsed = vars.Event()["data"]
			}
		}
		body, mode = projection.Default(pe)
	}
	text := projection.Text(pe, body+note, mode, seq, s.def != nil && slices.Contains(s.def.Tools, "read_event"))
	if burst > 1 {
		text = fmt.Sprintf("The latest of a burst of %d events:\n%s", burst, text)
	}
	if p, err := admission.Prompt(ev); err != nil {
		s.log.Warn("unreadable trigger prompt; the event goes without it", "seq", seq, "err", err)
	} else if p != "" {
		text = p + "\n\n" + text
	}
	return text
}

// trigger is the compiled trigger of the session's definition that
// admitted ev (by its jltrigger extension), nil when there is none.
func (s *session) trigger(ev event.Event) *policies.CompiledTrigger {
	name, _ := ev.Extensions()[admission.ExtTrigger].(string)
	if name == "" || s.def == nil {
		return nil
	}
	c, err := s.w.compiled(s.r.ref.Agent, *s.def)
	if err != nil {
		return nil
	}
	for _, t := range c.Triggers {
		if t.Name == name {
			return t
		}
	}
	return nil
}

func (s *session) payload(ctx context.Context, t *policies.CompiledTrigger, ev event.Event) (any, error) {
	vars, err := policies.EventVars(ev)
	if err != nil {
		return nil, err
	}
	return t.PayloadOf(ctx, vars)
}

// window builds the context of the model call of turn: the live entries
// with the policy's masking, the notes, the tools. It goes on from the
// request built for the call before (the session's window.Builder),
// which builds the whole request again whenever more than entries
// appended changed.
func (s *session) window(ctx context.Context, turn int) (window.Input, window.Context, error) {
	in, err := s.windowInput(ctx, turn)
	if err != nil {
		return in, window.Context{}, err
	}
	appended := s.reqs.Appended
	c := s.reqs.Request(in)
	if requestBuilt != nil {
		requestBuilt(c, window.BuildRequest(in), s.reqs.Appended > appended)
	}
	return in, c, nil
}

// requestBuilt, if set (by tests), hears every request window built
// beside the one BuildRequest builds whole from the same input, and
// whether it went on from the request before.
var requestBuilt func(got, whole window.Context, appended bool)

// windowInput is what window builds from.
func (s *session) windowInput(ctx context.Context, turn int) (window.Input, error) {
	in := window.Input{
		Names: s.w.names, Ref: s.r.ref, Def: s.def,
		State: s.st, Entries: s.live, Turn: turn,
		Tools: s.toolSpecs(),
	}
	if p := s.def.Context; p != nil && p.Notes {
		n, _, err := tools.ReadNotes(ctx, s.w.sessions, s.w.names, s.r.ref)
		if err != nil {
			return in, err
		}
		in.Notes = n.Text
	}
	return in, nil
}

// toolSpecs are the specs of the tools the definition's calls offer.
func (s *session) toolSpecs() []model.ToolSpec {
	var out []model.ToolSpec
	for _, name := range window.EffectiveTools(s.def) {
		if t, ok := s.w.toolOf(s.def, name); ok {
			sp := t.Spec()
			out = append(out, model.ToolSpec{Name: sp.Name, Description: sp.Description, Schema: sp.Schema})
		}
	}
	return out
}

// calibrate records the provider's count of a request's input tokens
// beside the request's size, so the next estimate uses the provider's
// rate. The scripted provider declares its usage rather than measuring
// it, so it calibrates nothing.
func (s *session) calibrate(next *record.State, c window.Context, u model.Usage) {
	if u.InputTokens <= 0 || s.def.Model.Provider == model.ProviderScripted || c.Bytes <= 0 {
		return
	}
	next.CalBytes, next.CalTokens = c.Bytes, u.InputTokens
}

// relive makes the in-memory context what st's window says: after a
// compaction, the head, the new summary and the tail.
func (s *session) relive(st record.State) {
	if st.Summary == 0 {
		return
	}
	var head, tail []record.Entry
	var summary *record.Entry
	for i, e := range s.live {
		switch {
		case e.ID == st.Summary:
			summary = &s.live[i]
		case e.ID < st.HeadEnd:
			head = append(head, e)
		case e.ID >= st.From && e.Kind != record.KindSummary:
			tail = append(tail, e)
		}
	}
	out := head
	if summary != nil {
		out = append(out, *summary)
	}
	s.live = append(out, tail...)
}
