package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/policies"
)

// Delivery is one event on its way through the pipeline.
type Delivery struct {
	// Event is the CloudEvent the receiver built.
	Event event.Event
	// Data is what rules read of the event, its data decoded by a
	// receiver that read it already; nil: admission decodes it if a rule
	// reads it.
	Data *policies.EventData
	// Receiver names the receiver it came through: github, events or
	// request.
	Receiver string
	// Decisions are admission's, set by the Admit step.
	Decisions []admission.Decision
	// Only, when set, keeps the decisions of that agent alone (a redrive
	// of a dead letter of admission for one agent's rule).
	Only string
	// Digest, when set, names the request the event's id is used for (a
	// hash of what the sender sent): an id used before for another digest
	// is refused with ErrConflict (409), never answered as a duplicate.
	Digest string
}

// Result is what the sender is told, as JSON.
type Result struct {
	ID        string   `json:"id"`
	Duplicate bool     `json:"duplicate"`
	Admitted  []Target `json:"admitted"`
	// Refused lists the agents whose rules for addressed events refused
	// it, with why (a delegation over its tree's hop limit, say).
	Refused []Refusal `json:"refused,omitempty"`
	// encoded is json.Marshal of the result, when a step made it already
	// (the dedupe record's outcome): the answer is written from it.
	encoded []byte
}

// Refusal is an agent's refusal of an event addressed to it.
type Refusal struct {
	Agent   string `json:"agent"`
	Session string `json:"session,omitempty"`
	Reason  string `json:"reason"`
}

// Target is one session an event was admitted to.
type Target struct {
	Agent   string `json:"agent"`
	Session string `json:"session"`
	// Seq is the event's sequence in JL_IN on the session's subject (the
	// session's state records it as in_seq once handled); 0 for an event
	// that waits as a burst or a throttled turn.
	Seq uint64 `json:"seq,omitempty"`
	// Debounced marks an event that joined a burst: the session gets one
	// event for the burst after the trigger's quiet window.
	Debounced bool `json:"debounced,omitempty"`
	// Throttled marks an event its trigger's throttle queued: it is
	// stored and goes to the session at At.
	Throttled bool      `json:"throttled,omitempty"`
	At        time.Time `json:"at,omitzero"`
}

// Handler handles one delivery.
type Handler func(ctx context.Context, d *Delivery) (*Result, error)

// Middleware wraps a Handler with one step of the pipeline.
type Middleware func(Handler) Handler

// Chain returns h wrapped by mws, the first outermost: Chain(h, a, b)
// runs a, then b, then h.
func Chain(h Handler, mws ...Middleware) Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// Errors the pipeline answers with; see respond for their HTTP statuses.
var (
	// ErrUnavailable means a dependency (NATS, a bucket, a stream) did not
	// answer or refused a write: the sender should retry (503).
	ErrUnavailable = errors.New("ingest: temporarily unavailable")
	// ErrBadRequest means the sender's request is malformed (400).
	ErrBadRequest = errors.New("ingest: bad request")
	// ErrTooLarge means the body or event exceeds a limit (413).
	ErrTooLarge = errors.New("ingest: too large")
	// ErrNotFound means the addressed agent does not exist (404).
	ErrNotFound = errors.New("ingest: not found")
	// ErrUnauthorized means the sender could not be verified (401).
	ErrUnauthorized = errors.New("ingest: unauthorized")
	// ErrNotAdmitted means an event addressed to an agent (a user
	// request, or a CloudEvent with jlagent) was admitted to no session:
	// the agent's triggers, or its requests setting, refused it (422).
	// The decision is recorded in JL_AUDIT; nothing else is stored.
	ErrNotAdmitted = errors.New("ingest: not admitted")
	// ErrRateLimited is ErrNotAdmitted for an event a rate limit dropped
	// (429).
	ErrRateLimited = fmt.Errorf("%w: rate limited", ErrNotAdmitted)
	// ErrConflict means the event's id (an Idempotency-Key) was used for
	// a different request (409).
	ErrConflict = errors.New("ingest: id used for a different request")
)
