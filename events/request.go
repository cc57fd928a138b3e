package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
)

// MaxRequestText bounds the text of a user request, in bytes.
const MaxRequestText = 512 << 10

// Request is a user's message to an agent's session: what `jetloop send`,
// jl.api.send, POST /v1/agents/{agent}/sessions/{session}/messages and a
// chat message carry. Every way in builds its event with RequestEvent, so
// the same request is the same event, decided and recorded alike.
type Request struct {
	Agent, Session, Text string
	// ID is the idempotency key, the event's id: a request sent twice with
	// one id (and one source) runs once. Empty: a new id.
	ID string
	// Source is the event's source; empty: RequestSource(Agent, Session),
	// which scopes the id to the session.
	Source string
	// Thread is the chat thread the request came from (ExtThread), where
	// its answer goes; empty: none.
	Thread string
}

// RequestSource is the source of a request to a session unless its
// sender names another: /agents/<agent>/sessions/<session>, path-escaped.
func RequestSource(agent, session string) string {
	return "/agents/" + url.PathEscape(agent) + "/sessions/" + url.PathEscape(session)
}

// ErrBadRequest marks a request that cannot be an event: no text, text
// over MaxRequestText or not UTF-8, an id or session no event can carry.
var ErrBadRequest = errors.New("events: bad request")

// RequestEvent builds the dev.jetloop.request CloudEvent of r at now:
// addressed to its agent and session (jlagent, jlsession), its data the
// JSON object {"text": …}.
func RequestEvent(r Request, now time.Time) (event.Event, error) {
	switch {
	case r.Agent == "" || r.Session == "":
		return event.Event{}, fmt.Errorf("%w: agent and session are required", ErrBadRequest)
	case strings.TrimSpace(r.Text) == "":
		return event.Event{}, fmt.Errorf("%w: text is empty", ErrBadRequest)
	case len(r.Text) > MaxRequestText:
		return event.Event{}, fmt.Errorf("%w: text of %d bytes, max %d", ErrBadRequest, len(r.Text), MaxRequestText)
	case !utf8.ValidString(r.Text):
		return event.Event{}, fmt.Errorf("%w: text is not valid UTF-8", ErrBadRequest)
	}
	if r.ID == "" {
		r.ID = uuid.NewString()
	}
	if r.Source == "" {
		r.Source = RequestSource(r.Agent, r.Session)
	}
	data, err := json.Marshal(struct {
		Text string `json:"text"`
	}{r.Text})
	if err != nil {
		return event.Event{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	e := event.New()
	e.SetID(r.ID)
	e.SetSource(r.Source)
	e.SetType(TypeRequest)
	e.SetSubject(r.Session)
	e.SetTime(now.UTC())
	e.SetExtension(ExtAgent, r.Agent)
	e.SetExtension(ExtSession, r.Session)
	if r.Thread != "" {
		e.SetExtension(ExtThread, r.Thread)
	}
	if err := e.SetData(event.ApplicationJSON, data); err != nil {
		return event.Event{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	// What no message can carry (a control character in the session, an
	// id too long for a header) is the sender's fault.
	if _, err := ToMsg("request.check", e); err != nil {
		return event.Event{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return e, nil
}
