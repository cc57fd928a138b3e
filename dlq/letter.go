package dlq

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/streams"
)

// Reason is why a message was dead-lettered: the last token of its
// subject, jl.dlq.<reason>.
type Reason string

// The reasons. Each names one way a message could not be used; the
// letter's Detail says what exactly went wrong.
const (
	// RuleError: admission could not decide for an agent: a trigger's
	// rule did not evaluate, or named a session that cannot be addressed.
	RuleError Reason = "rule_error"
	// NotCloudEvent: an input is not a CloudEvent.
	NotCloudEvent Reason = "not_cloudevent"
	// BadSubject: an input's subject names no session.
	BadSubject Reason = "bad_subject"
	// SessionCancelled: an event reached a cancelled session, which takes
	// no more runs.
	SessionCancelled Reason = "session_cancelled"
	// NoDefinition: the agent has no definition (or none whose model can
	// be built) to run the event with.
	NoDefinition Reason = "no_definition"
	// BadTick: a schedule tick could not be read.
	BadTick Reason = "bad_tick"
	// InvalidControl: a control message does not parse.
	InvalidControl Reason = "invalid_control"
	// NoSession: a control message for a session that does not exist (and
	// that no event waits to start): a control message never creates one.
	NoSession Reason = "no_session"
	// NotApplicable: a control message the session cannot take as it
	// stands (an approve of a call that is not pending, an interrupt of a
	// session that is not working, a fork onto a session that exists…);
	// the session's transcript notes it too.
	NotApplicable Reason = "not_applicable"
	// NoRoom: JL_IN had no room for the message: the agent it was for held
	// its share of JL_IN, or a runtime writer (a timer, a delegation's
	// answer) found JL_IN full. A redrive once room is free delivers it.
	NoRoom Reason = "no_room"
)

var reasons = []Reason{RuleError, NotCloudEvent, BadSubject, SessionCancelled, NoDefinition, BadTick, InvalidControl, NoSession, NotApplicable, NoRoom}

// Reasons returns every reason.
func Reasons() []Reason { return append([]Reason(nil), reasons...) }

// ParseReason returns the reason named s.
func ParseReason(s string) (Reason, error) {
	for _, r := range reasons {
		if string(r) == s {
			return r, nil
		}
	}
	names := make([]string, len(reasons))
	for i, r := range reasons {
		names[i] = string(r)
	}
	return "", fmt.Errorf("dlq: unknown reason %q (want one of %s)", s, strings.Join(names, ", "))
}

// Headers of a dead letter.
const (
	// HeaderReason is the Reason code.
	HeaderReason = "Jl-Dlq-Reason"
	// HeaderDetail says what went wrong, on one line.
	HeaderDetail = "Jl-Dlq-Detail"
	// HeaderSubject is the subject the original message was on.
	HeaderSubject = "Jl-Dlq-Subject"
	// HeaderSeq is the original's sequence in its stream, when it was in
	// one.
	HeaderSeq = "Jl-Dlq-Seq"
	// OrigPrefix renames the server's Nats-* headers of the original (all
	// but Nats-Msg-Id), so the server neither acts on them nor refuses
	// the letter for them: a fired tick's Nats-Scheduler, Nats-TTL,
	// Nats-Rollup, Nats-Expected-*…
	OrigPrefix = "Jl-Orig-"
)

// MaxDetail bounds a letter's detail, in bytes.
const MaxDetail = 1024

// New returns the dead letter of a message on subject (seq in its stream;
// 0 when it was in none) with headers h and data, for reason: on
// jl.dlq.<reason>, keeping the data and headers as the package
// documentation says. Its Nats-Msg-Id is the original's, or one derived
// from subject and seq, so dead-lettering one message twice stores it
// once inside JL_DLQ's duplicate window.
func New(names streams.Names, reason Reason, detail, subject string, seq uint64, h nats.Header, data []byte) (*nats.Msg, error) {
	if _, err := ParseReason(string(reason)); err != nil {
		return nil, err
	}
	subj, err := names.DLQ(string(reason))
	if err != nil {
		return nil, fmt.Errorf("dlq: %w", err)
	}
	m := &nats.Msg{Subject: subj, Header: Header(h), Data: data}
	if m.Header.Get(nats.MsgIdHdr) == "" {
		m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("dlq-%s-%d", subject, seq))
	}
	m.Header.Set(HeaderReason, string(reason))
	m.Header.Set(HeaderDetail, oneLine(detail))
	m.Header.Set(HeaderSubject, subject)
	if seq > 0 {
		m.Header.Set(HeaderSeq, strconv.FormatUint(seq, 10))
	}
	return m, nil
}

// directGet are the headers the server adds to a message read by direct
// get (as the worker reads its inputs): they describe where the copy was
// read from, not the message.
var directGet = []string{"Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp", "Nats-Num-Pending", "Nats-Last-Sequence", "Nats-UpTo-Sequence"}

// isDirectGet reports whether k is one of directGet.
func isDirectGet(k string) bool {
	for _, d := range directGet {
		if strings.EqualFold(k, d) {
			return true
		}
	}
	return false
}

// statusHeaders are the headers a status reply of the server carries: a
// client reads a message that has one and no data (every message of a
// headers-only read) as that status, not as a message.
var statusHeaders = []string{"Status", "Description"}

// isStatus reports whether k is one of statusHeaders.
func isStatus(k string) bool {
	for _, d := range statusHeaders {
		if strings.EqualFold(k, d) {
			return true
		}
	}
	return false
}

// Header copies h for a dead letter: every Nats-* header but the message
// id, and a Status or Description its sender set, moves under an
// OrigPrefix name; those a direct get added are left out. A letter
// keeping the sender's Status: 503 would read, listed headers only, as no
// responders, and a 404 or 408 as the end of the listing.
func Header(h nats.Header) nats.Header {
	out := nats.Header{}
	for k, v := range h {
		if isDirectGet(k) {
			continue
		}
		if len(k) > 5 && strings.EqualFold(k[:5], "Nats-") && !strings.EqualFold(k, nats.MsgIdHdr) || isStatus(k) {
			k = OrigPrefix + k
		}
		out[k] = append(out[k], v...)
	}
	return out
}

// oneLine makes s fit one header line of at most MaxDetail bytes.
func oneLine(s string) string {
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == '\r' || r == '\n' }), "; ")
	if len(s) > MaxDetail {
		cut := MaxDetail - 3
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}
