package worker

import (
	"encoding/json"
	"fmt"
	"mime"
	"strings"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/tools"
)

// maxEventText bounds the text an event contributes to the context.
const maxEventText = 64 << 10

// buildRequest renders the transcript as the model's conversation: inputs
// and steers as user messages, each answer with its tool calls, and the
// calls' results right after it (inputs recorded while calls waited for
// their results follow the results). System entries are the runtime's
// notes, not context; of the control entries only steer and resume texts
// are.
func buildRequest(def *policies.Definition, toolOf func(*policies.Definition, string) (tools.Tool, bool), entries []record.Entry) model.Request {
	req := model.Request{
		Model:       def.Model.Name,
		System:      def.System,
		MaxTokens:   def.Model.MaxTokens,
		Temperature: def.Model.Temperature,
	}
	for _, name := range def.ToolNames() {
		if t, ok := toolOf(def, name); ok {
			sp := t.Spec()
			req.Tools = append(req.Tools, model.ToolSpec{Name: sp.Name, Description: sp.Description, Schema: sp.Schema})
		}
	}
	msgs := req.Messages
	last := func() *model.Message {
		if len(msgs) == 0 {
			return nil
		}
		return &msgs[len(msgs)-1]
	}
	user := func(text string) {
		if l := last(); l != nil && l.Role == model.RoleUser {
			l.Text += "\n\n" + text
			return
		}
		msgs = append(msgs, model.Message{Role: model.RoleUser, Text: text})
	}
	// open are the calls of the last answer still without a result. Inputs
	// recorded meanwhile (an event that reached a blocked session, a
	// resume's text) wait in held until every call is answered: providers
	// want an answer's tool calls followed by their results at once.
	open := map[string]bool{}
	var held []string
	release := func() {
		for _, text := range held {
			user(text)
		}
		held = nil
	}
	for _, e := range entries {
		switch e.Kind {
		case record.KindEvent, record.KindUser, record.KindControl:
			if e.Kind == record.KindControl && !(e.Name == "steer" || e.Name == "resume") || e.Kind == record.KindControl && e.Text == "" {
				// interrupt, cancel, approve and deny are the runtime's
				// business; the model sees their effects.
				continue
			}
			text := e.Text
			if e.Kind == record.KindControl {
				text = "[" + e.Name + "] " + text
			}
			if len(open) > 0 {
				held = append(held, text)
				continue
			}
			user(text)
		case record.KindAssistant:
			clear(open)
			release()
			msgs = append(msgs, model.Message{Role: model.RoleAssistant, Text: e.Text})
		case record.KindToolCall:
			if l := last(); l != nil && l.Role == model.RoleAssistant {
				l.ToolCalls = append(l.ToolCalls, model.ToolCall{ID: e.CallID, Name: e.Name, Args: e.Args})
				open[e.CallID] = true
			}
		case record.KindToolResult:
			r := model.ToolResult{CallID: e.CallID, Content: e.Result, IsError: e.IsError}
			if l := last(); l != nil && l.Role == model.RoleTool {
				l.ToolResults = append(l.ToolResults, r)
			} else {
				msgs = append(msgs, model.Message{Role: model.RoleTool, ToolResults: []model.ToolResult{r}})
			}
			delete(open, e.CallID)
			if len(open) == 0 {
				release()
			}
		}
	}
	release()
	req.Messages = msgs
	return req
}

// eventText renders an event for the model: a request's text as it is,
// any other event as its type, source and subject over its data.
func eventText(typ, contentType, source, subject string, data []byte) string {
	text := dataText(contentType, data)
	if typ == events.TypeRequest {
		return cut(text, maxEventText)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Event %s from %s", typ, source)
	if subject != "" {
		fmt.Fprintf(&b, " about %s", subject)
	}
	if text != "" {
		b.WriteString(":\n")
		b.WriteString(text)
	}
	return cut(b.String(), maxEventText)
}

// dataText is an event's data as text: a JSON object's "text" field when
// it has one and is a request, else the data itself.
func dataText(contentType string, data []byte) string {
	mt, _, _ := mime.ParseMediaType(contentType)
	if mt == "application/json" || strings.HasSuffix(mt, "+json") || (mt == "" && json.Valid(data)) {
		var v struct {
			Text *string `json:"text"`
		}
		if json.Unmarshal(data, &v) == nil && v.Text != nil {
			return *v.Text
		}
	}
	return string(data)
}
