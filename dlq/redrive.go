package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/schedule"
	"github.com/jetloop/jetloop/streams"
)

// HeaderRedriveOf marks a message put back by a redrive with the JL_DLQ
// sequence of its letter.
const HeaderRedriveOf = "Jl-Redrive-Of"

// redriveSource is the jl_dedupe source of redrive records.
const redriveSource = "dlq-redrive"

// ErrNoReadmit: a letter of admission needs the ingest's admission to be
// redriven, and this process has none.
var ErrNoReadmit = errors.New("dlq: redriving an event admission could not decide needs the ingest's admission, which this process does not run")

// ErrCannotRedrive: the letter names nowhere to put its original back (its
// subject names no session, as a bad_subject letter's does, or it is a
// letter of admission that names no rule). Redriving it again meets the
// same answer; the letter stays in JL_DLQ for show.
var ErrCannotRedrive = errors.New("dlq: dead letter cannot be redriven")

// Readmit runs e, an event admission could not decide for agent, through
// admission again for that agent alone, publishes what it admits (with
// the Nats-Msg-Id the first admission would have used) and returns the
// sessions it went to, as "agent/session".
type Readmit func(ctx context.Context, e event.Event, agent string) ([]string, error)

// Redriven is what a redrive did with one letter.
type Redriven struct {
	// Letter is the letter's JL_DLQ sequence.
	Letter uint64 `json:"letter"`
	// Subject and Seq are where the original went back: its jl.in.* or
	// jl.ctl.* subject and its new sequence there. A letter of admission
	// lists the sessions admission admitted it to instead.
	Subject  string   `json:"subject,omitempty"`
	Seq      uint64   `json:"seq,omitempty"`
	Admitted []string `json:"admitted,omitempty"`
	// Duplicate: the letter was redriven before; this is what that
	// redrive did, and nothing was published again.
	Duplicate bool `json:"duplicate,omitempty"`
}

// Redriver puts dead letters back into the pipeline, once each.
type Redriver struct {
	js      jetstream.JetStream
	names   streams.Names
	seen    *dedupe.Store
	readmit Readmit
	// room is JL_IN's: a redrive to it is new input like any other.
	room *streams.Room
}

// NewRedriver binds a redriver to the deployment's JL_DLQ and jl_dedupe.
// readmit may be nil: letters of admission are then refused with
// ErrNoReadmit.
func NewRedriver(ctx context.Context, js jetstream.JetStream, names streams.Names, readmit Readmit) (*Redriver, error) {
	seen, err := dedupe.New(ctx, js, dedupe.Config{Names: names})
	if err != nil {
		return nil, fmt.Errorf("dlq: %w", err)
	}
	return &Redriver{js: js, names: names, seen: seen, readmit: readmit, room: streams.NewRoom(js, names.StreamIn())}, nil
}

// Redrive puts the letter at seq back where it came from: a worker's input
// on its jl.in.* or jl.ctl.* subject, with its headers and data and its
// original event id, so the worker handles it as it would have (a fired
// tick keeps its slot); an event admission could not decide back through
// admission for the rule's agent. The published message's Nats-Msg-Id
// names the letter, and the redrive is recorded in jl_dedupe: a second
// redrive of one letter publishes nothing and answers the first's
// Redriven with Duplicate set. A letter that names nowhere to go back to
// is refused with ErrCannotRedrive.
func (r *Redriver) Redrive(ctx context.Context, seq uint64) (Redriven, error) {
	id := strconv.FormatUint(seq, 10)
	if ent, ok, err := r.seen.Seen(ctx, redriveSource, id); err != nil {
		return Redriven{}, err
	} else if ok {
		var first Redriven
		_ = json.Unmarshal(ent.Outcome, &first)
		first.Letter, first.Duplicate = seq, true
		return first, nil
	}
	l, err := Get(ctx, r.js, r.names, seq)
	if err != nil {
		return Redriven{}, err
	}
	out := Redriven{Letter: seq}
	if l.Subject == "" {
		if out.Admitted, err = r.redriveAdmission(ctx, l); err != nil {
			return Redriven{}, err
		}
	} else {
		m, stream, err := r.original(l)
		if err != nil {
			return Redriven{}, err
		}
		if stream == r.names.StreamIn() {
			// JL_IN's server limits drop its oldest: a redrive waits for
			// room like the ingest's events do.
			if err := r.room.Check(ctx, 1, len(m.Data)+1024); err != nil {
				return Redriven{}, fmt.Errorf("dlq: redrive letter %d to %s: %w", seq, m.Subject, err)
			}
		}
		ack, err := r.js.PublishMsg(ctx, m, jetstream.WithExpectStream(stream))
		if err != nil {
			return Redriven{}, fmt.Errorf("dlq: redrive letter %d to %s: %w", seq, m.Subject, err)
		}
		out.Subject, out.Seq = m.Subject, ack.Sequence
	}
	b, _ := json.Marshal(out)
	if err := r.seen.Record(ctx, redriveSource, id, b); err != nil {
		// Published: a second redrive inside the stream's duplicate window
		// is still dropped by its message id.
		return out, fmt.Errorf("dlq: letter %d redriven, but recording it failed (a second redrive after %s may publish it again): %w", seq, streams.DefaultDedupeWindow, err)
	}
	return out, nil
}

// original rebuilds the message a worker's letter keeps, for the stream it
// came from.
func (r *Redriver) original(l Letter) (*nats.Msg, string, error) {
	ref, err := r.names.ParseSession(l.Subject)
	if err != nil {
		return nil, "", fmt.Errorf("%w: letter %d: its subject names no session to put it back to (%w)", ErrCannotRedrive, l.Seq, err)
	}
	var stream string
	switch l.Subject {
	case r.names.In(ref):
		stream = r.names.StreamIn()
	case r.names.Ctl(ref):
		stream = r.names.StreamCtl()
	default:
		return nil, "", fmt.Errorf("%w: letter %d came from %s, which is neither an input nor a control subject", ErrCannotRedrive, l.Seq, l.Subject)
	}
	h := nats.Header{}
	var scheduler, next string
	for k, v := range l.Header {
		switch {
		case strings.EqualFold(k, OrigPrefix+schedule.HeaderScheduler):
			scheduler = v[0]
		case strings.EqualFold(k, OrigPrefix+schedule.HeaderNext):
			next = v[0]
		case strings.HasPrefix(k, OrigPrefix), strings.HasPrefix(k, "Jl-Dlq-"), len(k) > 5 && strings.EqualFold(k[:5], "Nats-"),
			strings.EqualFold(k, HeaderRedriveOf):
			// The server's directives of the original (TTL, rollup,
			// expectations), the letter's own headers and those the
			// letter was read with do not go back.
		default:
			h[k] = append([]string(nil), v...)
		}
	}
	if scheduler != "" && next != "" {
		// A fired tick goes back as the same tick, slot and id included.
		schedule.Route(h, scheduler, next)
	}
	h.Set(nats.MsgIdHdr, "jl-redrive-"+strconv.FormatUint(l.Seq, 10))
	h.Set(HeaderRedriveOf, strconv.FormatUint(l.Seq, 10))
	return &nats.Msg{Subject: l.Subject, Header: h, Data: l.Data}, stream, nil
}

// redriveAdmission runs a letter of admission through admission again for
// its rule's agent.
func (r *Redriver) redriveAdmission(ctx context.Context, l Letter) ([]string, error) {
	if r.readmit == nil {
		return nil, ErrNoReadmit
	}
	agent, _, ok := strings.Cut(l.Rule, "/")
	if !ok || agent == "" {
		return nil, fmt.Errorf("%w: letter %d names no rule (%s header) to admit it again for", ErrCannotRedrive, l.Seq, RuleHeader)
	}
	e, err := events.FromMsg(&nats.Msg{Subject: l.Subject, Header: l.Header, Data: l.Data})
	if err != nil {
		return nil, fmt.Errorf("dlq: letter %d: %w", l.Seq, err)
	}
	targets, err := r.readmit(ctx, e, agent)
	if err != nil {
		return nil, fmt.Errorf("dlq: redrive letter %d through admission: %w", l.Seq, err)
	}
	if targets == nil {
		targets = []string{}
	}
	return targets, nil
}
