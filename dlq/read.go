package dlq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/streams"
)

// Bounds of a listing.
const (
	// DefaultLimit is how many letters a listing without a limit returns.
	DefaultLimit = 50
	// MaxLimit bounds the letters of one listing.
	MaxLimit = 1000
)

// ErrNotFound: no dead letter has that sequence.
var ErrNotFound = errors.New("dlq: no such dead letter")

// Letter is one dead letter as `jetloop dlq ls --json` lists it: a
// contract, fields may be added, never renamed.
type Letter struct {
	// Seq is the letter's sequence in JL_DLQ: what show and redrive take.
	Seq    uint64    `json:"seq"`
	Time   time.Time `json:"time"`
	Reason Reason    `json:"reason"`
	Detail string    `json:"detail,omitempty"`
	// Subject and OrigSeq are where the original was (a worker's input on
	// jl.in.* or jl.ctl.*); empty for an event admission could not
	// decide, which was in no stream.
	Subject string `json:"subject,omitempty"`
	OrigSeq uint64 `json:"orig_seq,omitempty"`
	// Agent and Session are the session the original was for: the one
	// its subject names; for an event admission could not decide, the
	// one its extensions name, or its rule's agent. A letter whose
	// subject names no session (bad_subject) has none, whatever session
	// its event claims (that stays in Header).
	Agent   string `json:"agent,omitempty"`
	Session string `json:"session,omitempty"`
	// EventID, EventType and Source are the original CloudEvent's.
	EventID   string `json:"event_id,omitempty"`
	EventType string `json:"event_type,omitempty"`
	Source    string `json:"source,omitempty"`
	// Rule is the rule admission could not evaluate, "agent/trigger".
	Rule string `json:"rule,omitempty"`
	// Header and Data are the letter's, for show.
	Header nats.Header `json:"header,omitempty"`
	Data   []byte      `json:"data,omitempty"`
}

// Filter selects letters.
type Filter struct {
	// Reason: only letters of this reason.
	Reason Reason
	// Since: only letters stored at or after it.
	Since time.Time
	// Agent: only letters for this agent's sessions.
	Agent string
	// From: only letters at or after this JL_DLQ sequence (the Next of an
	// earlier page).
	From uint64
	// Limit: at most this many, the oldest first. Default DefaultLimit, at
	// most MaxLimit.
	Limit int
}

// RuleHeader is the header admission names the rule of its letters with
// (admission.HeaderRule).
const RuleHeader = "Jetloop-Rule"

// List returns the letters f selects, oldest first, and the From of the
// next page (0 when there is none).
func List(ctx context.Context, js jetstream.JetStream, names streams.Names, f Filter) ([]Letter, uint64, error) {
	if f.Limit == 0 {
		f.Limit = DefaultLimit
	}
	if f.Limit < 0 || f.Limit > MaxLimit {
		return nil, 0, fmt.Errorf("dlq: limit %d: want 1 to %d", f.Limit, MaxLimit)
	}
	filter := names.DLQAll()
	if f.Reason != "" {
		if _, err := ParseReason(string(f.Reason)); err != nil {
			return nil, 0, err
		}
		s, err := names.DLQ(string(f.Reason))
		if err != nil {
			return nil, 0, fmt.Errorf("dlq: %w", err)
		}
		filter = s
	}
	// A consumer of its own, not the client's ordered consumer: every
	// delivery of a headers-only read has no data, and the client's Fetch
	// takes one with a Status header (a letter stored before its
	// original's moved under OrigPrefix) for no responders or the end of
	// the batch, so listing failed or stopped there. streams.Fetch hands
	// it on.
	cfg := jetstream.ConsumerConfig{FilterSubjects: []string{filter}, HeadersOnly: true, AckPolicy: jetstream.AckNonePolicy,
		InactiveThreshold: 5 * time.Minute, MemoryStorage: true, Replicas: 1}
	switch {
	case f.From > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, f.From
	case !f.Since.IsZero():
		since := f.Since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	cons, err := js.CreateConsumer(ctx, names.StreamDLQ(), cfg)
	if err != nil {
		return nil, 0, fmt.Errorf("dlq: read %s: %w", names.StreamDLQ(), err)
	}
	defer streams.DropConsumer(ctx, js, names.StreamDLQ(), cons)
	pending := cons.CachedInfo().NumPending
	var out []Letter
	for pending > 0 {
		got := 0
		var next uint64
		full := false
		err := streams.Fetch(ctx, js, names.StreamDLQ(), cons.CachedInfo().Name, int(min(pending, 256)), 2*time.Second, func(m *nats.Msg) {
			got++
			if full {
				return
			}
			md, err := m.Metadata()
			if err != nil {
				return
			}
			pending = md.NumPending
			if !f.Since.IsZero() && md.Timestamp.Before(f.Since) {
				return
			}
			l := letter(names, md.Sequence.Stream, md.Timestamp, m.Subject, m.Header)
			if f.Agent != "" && l.Agent != f.Agent {
				return
			}
			if len(out) == f.Limit {
				full, next = true, l.Seq
				return
			}
			out = append(out, l)
		})
		if full {
			return out, next, nil
		}
		if err != nil {
			return nil, 0, fmt.Errorf("dlq: read %s: %w", names.StreamDLQ(), err)
		}
		if got == 0 {
			break
		}
	}
	return out, 0, nil
}

// Get returns the letter at seq with its headers and data.
func Get(ctx context.Context, js jetstream.JetStream, names streams.Names, seq uint64) (Letter, error) {
	s, err := js.Stream(ctx, names.StreamDLQ())
	if err != nil {
		return Letter{}, fmt.Errorf("dlq: open %s: %w", names.StreamDLQ(), err)
	}
	// A letter stored before its sender's Status moved under OrigPrefix
	// still holds it: GetMsg reads it as a message.
	m, err := streams.GetMsg(ctx, js, s, seq, "")
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return Letter{}, fmt.Errorf("%w: %d", ErrNotFound, seq)
	case err != nil:
		return Letter{}, fmt.Errorf("dlq: read letter %d: %w", seq, err)
	}
	if _, err := names.DLQReason(m.Subject); err != nil {
		return Letter{}, fmt.Errorf("%w: %d", ErrNotFound, seq)
	}
	l := letter(names, m.Sequence, m.Time, m.Subject, m.Header)
	l.Header, l.Data = nats.Header{}, m.Data
	for k, v := range m.Header {
		if !isDirectGet(k) {
			l.Header[k] = v
		}
	}
	return l, nil
}

// letter reads what a letter's subject and headers say.
func letter(names streams.Names, seq uint64, t time.Time, subject string, h nats.Header) Letter {
	l := Letter{Seq: seq, Time: t.UTC(), Reason: Reason(h.Get(HeaderReason)), Detail: h.Get(HeaderDetail),
		Subject: h.Get(HeaderSubject), Rule: h.Get(RuleHeader),
		EventID: hget(h, "ce-id"), EventType: hget(h, "ce-type"), Source: hget(h, "ce-source")}
	if r, err := names.DLQReason(subject); err == nil && l.Reason == "" {
		l.Reason = Reason(r)
	}
	l.OrigSeq, _ = strconv.ParseUint(h.Get(HeaderSeq), 10, 64)
	if l.Subject != "" {
		// A worker's input: its subject is where it was, and says whose
		// it is. One whose subject names no session (bad_subject) is
		// nobody's: the session its event claims is only the sender's
		// word, and stays in its headers, for show.
		if ref, err := names.ParseSession(l.Subject); err == nil {
			l.Agent, l.Session = ref.Agent, ref.Session
		}
		return l
	}
	// An event admission could not decide was in no stream: the session
	// its extensions name (a request's), or its rule's agent.
	l.Agent, l.Session = hget(h, "ce-"+events.ExtAgent), hget(h, "ce-"+events.ExtSession)
	if l.Agent == "" && l.Rule != "" {
		for i := range len(l.Rule) {
			if l.Rule[i] == '/' {
				l.Agent = l.Rule[:i]
				break
			}
		}
	}
	return l
}

// hget reads a header whatever the case of its name.
func hget(h nats.Header, key string) string {
	if v := h.Get(key); v != "" {
		return v
	}
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}
