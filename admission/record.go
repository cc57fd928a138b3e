package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/dlq"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/streams"
)

// Audit kinds and dead-letter reasons admission writes.
const (
	// AuditKind is the kind token of admission's records in JL_AUDIT.
	AuditKind = "admission"
	// NoAgent stands for "every agent" in the agent token of a record
	// that no single agent made (a duplicate, or an event no agent
	// admitted). Agent names start with a letter or digit, so it names
	// none.
	NoAgent = "_"
	// DLQReason is the reason of admission's dead letters.
	DLQReason = dlq.RuleError
)

// Headers of a dead letter, beside the event's own ce-* headers.
const (
	// HeaderRule names the rule that failed, as "agent/trigger".
	HeaderRule = "Jetloop-Rule"
	// HeaderError is the evaluation error, on one line.
	HeaderError = "Jetloop-Error"
)

// maxReasonLen bounds the error text kept in records and headers.
const maxReasonLen = 1 << 10

// EventInfo identifies the event of a record.
type EventInfo struct {
	ID      string `json:"id"`
	Source  string `json:"source"`
	Type    string `json:"type"`
	Subject string `json:"subject,omitempty"`
}

// Record is one decision as stored in JL_AUDIT.
type Record struct {
	Time  time.Time `json:"time"`
	Event EventInfo `json:"event"`
	Decision
	// Rule is Decision.Rule(), stored for readers.
	Rule string `json:"rule,omitempty"`
	// Count is the burst's count so far of a debounced decision.
	Count int `json:"count,omitempty"`
	// Seq is the record's JL_AUDIT sequence, set when read.
	Seq uint64 `json:"-"`
}

func info(e event.Event) EventInfo {
	return EventInfo{ID: e.ID(), Source: e.Source(), Type: e.Type(), Subject: e.Subject()}
}

func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > maxReasonLen {
		s = s[:maxReasonLen] + "…"
	}
	return s
}

// Messages returns what records the decisions ds for e: Records' audit
// records and dead letters in one slice. Publish them and await every
// acknowledgement before answering the sender.
func (a *Admitter) Messages(e event.Event, ds []Decision, counts map[string]int) ([]*nats.Msg, error) {
	records, deadLetters, err := a.Records(e, ds, counts)
	if err != nil {
		return nil, err
	}
	return append(records, deadLetters...), nil
}

// Records returns what records the decisions ds for e: an audit record
// for every decision that is not "no trigger matched" (one record stands
// for all of those when nothing matched at all; a request an agent's
// requests setting refuses is recorded as such), and a dead letter with
// the event for every rule that failed to evaluate. counts gives the
// burst count of debounced decisions, by agent; it may be nil. Write the
// records with WriteRecords (or Publish them) and publish the dead
// letters, and await every acknowledgement before answering the sender;
// PublishDecided does all of it.
func (a *Admitter) Records(e event.Event, ds []Decision, counts map[string]int) (records, deadLetters []*nats.Msg, err error) {
	now := a.now().UTC()
	matched := false
	for _, d := range ds {
		if d.Outcome == Rejected && d.Trigger == "" {
			// No trigger matched: one record below says so for all.
			continue
		}
		matched = true
		rec := Record{Time: now, Event: info(e), Decision: d, Rule: d.Rule(), Count: counts[d.Agent]}
		rec.Reason = oneLine(rec.Reason)
		m, err := a.auditMsg(e, d.Agent, rec)
		if err != nil {
			return nil, nil, err
		}
		records = append(records, m)
		if d.Outcome == Failed || d.Outcome == NoRoom {
			dl, err := a.deadLetter(e, d)
			if err != nil {
				return nil, nil, err
			}
			deadLetters = append(deadLetters, dl)
		}
	}
	if !matched {
		reason := "no agents"
		if n := len(ds); n > 0 {
			reason = fmt.Sprintf("no trigger of %d agent(s) matched", n)
		}
		m, err := a.auditMsg(e, NoAgent, Record{Time: now, Event: info(e), Decision: Decision{Outcome: Rejected, Reason: reason}})
		if err != nil {
			return nil, nil, err
		}
		records = append(records, m)
	}
	return records, deadLetters, nil
}

// PublishDecided publishes msgs (admitted events, dead letters) as
// PublishSeqs does and, at the same time, the decision records through
// WriteRecords, and returns once JetStream has acknowledged all of them,
// with the stream sequence of each of msgs.
func (a *Admitter) PublishDecided(ctx context.Context, js jetstream.JetStream, msgs, records []*nats.Msg) ([]uint64, error) {
	futures, err := publishAsync(js, msgs)
	if err != nil {
		return nil, err
	}
	if err := a.WriteRecords(ctx, records); err != nil {
		return nil, err
	}
	return awaitAcks(ctx, futures)
}

// DuplicateMessage returns the audit record of a duplicate delivery of e.
func (a *Admitter) DuplicateMessage(e event.Event) (*nats.Msg, error) {
	return a.auditMsg(e, NoAgent, Record{Time: a.now().UTC(), Event: info(e), Decision: Decision{Outcome: Duplicate}})
}

// DecisionMessage returns the JL_AUDIT record of a decision made past
// admission, on the same subject and in the same form as admission's own:
// a worker's, for an event its session refused (Busy). now stamps it.
func DecisionMessage(names streams.Names, e event.Event, d Decision, now time.Time) (*nats.Msg, error) {
	rec := Record{Time: now.UTC(), Event: info(e), Decision: d, Rule: d.Rule()}
	rec.Reason = oneLine(rec.Reason)
	return auditMessage(names, e, d.Agent, rec)
}

func (a *Admitter) auditMsg(e event.Event, agent string, rec Record) (*nats.Msg, error) {
	return auditMessage(a.names, e, agent, rec)
}

func auditMessage(names streams.Names, e event.Event, agent string, rec Record) (*nats.Msg, error) {
	subject, err := names.Audit(AuditKind, agent)
	if err != nil {
		return nil, fmt.Errorf("admission: audit subject for %q: %w", agent, err)
	}
	body, ok := appendRecord(make([]byte, 0, 256), &rec)
	if !ok {
		var err error
		if body, err = json.Marshal(rec); err != nil {
			return nil, fmt.Errorf("admission: encode audit record: %w", err)
		}
	}
	m := nats.NewMsg(subject)
	m.Data = body
	m.Header.Set(nats.MsgIdHdr, dedupe.MsgID(e, subject+"|"+string(rec.Outcome)+"|"+rec.Trigger))
	return m, nil
}

func (a *Admitter) deadLetter(e event.Event, d Decision) (*nats.Msg, error) {
	reason := DLQReason
	if d.Outcome == NoRoom {
		reason = dlq.NoRoom
	}
	subject, err := a.names.DLQ(string(reason))
	if err != nil {
		return nil, fmt.Errorf("admission: dead letter subject: %w", err)
	}
	m, err := events.ToMsg(subject, e)
	if err != nil {
		return nil, fmt.Errorf("admission: dead letter of event %s: %w", e.ID(), err)
	}
	m.Header.Set(HeaderRule, d.Rule())
	m.Header.Set(HeaderError, oneLine(d.Reason))
	m.Header.Set(dlq.HeaderReason, string(reason))
	m.Header.Set(dlq.HeaderDetail, oneLine(d.Rule()+": "+d.Reason))
	m.Header.Set(nats.MsgIdHdr, dedupe.MsgID(e, subject+"|"+d.Rule()))
	return m, nil
}

// Publish publishes msgs concurrently and returns once JetStream has
// acknowledged every one, or with the first failure.
func Publish(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg) error {
	_, err := PublishSeqs(ctx, js, msgs)
	return err
}

// PublishSeqs is Publish returning each message's stream sequence, in
// the order of msgs.
func PublishSeqs(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg) ([]uint64, error) {
	futures, err := publishAsync(js, msgs)
	if err != nil {
		return nil, err
	}
	return awaitAcks(ctx, futures)
}

func publishAsync(js jetstream.JetStream, msgs []*nats.Msg) ([]jetstream.PubAckFuture, error) {
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			return nil, fmt.Errorf("publish on %s: %w", m.Subject, err)
		}
		futures = append(futures, f)
	}
	return futures, nil
}

func awaitAcks(ctx context.Context, futures []jetstream.PubAckFuture) ([]uint64, error) {
	seqs := make([]uint64, len(futures))
	var errs []error
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			seqs[i] = ack.Sequence
		case err := <-f.Err():
			errs = append(errs, fmt.Errorf("publish on %s: %w", f.Msg().Subject, err))
		case <-ctx.Done():
			return nil, fmt.Errorf("publish on %s: %w", f.Msg().Subject, ctx.Err())
		}
	}
	return seqs, errors.Join(errs...)
}

// Recent returns up to n of the newest admission records in JL_AUDIT
// written since the given time, oldest first; agent "" means every agent.
// A message may hold one record (a JSON object) or several (one a line,
// see HeaderRecords); a line that is not a decision record, or holds an
// empty one (ParseRecords), is skipped. A decision
// stored twice (the same event, source, agent, outcome and trigger within
// recordWindow, as a retry after a failed write stores it) is returned
// once, the first; every record of one message has its Seq.
//
// The window is measured on the records' own times, stamped by the
// clock of the process that decided, not on when JL_AUDIT stored them:
// a retry decided by another ingest whose clock is off from the first's
// by more than two minutes less the retry's delay is shown twice, and
// records stamped out of stream order by more than that (a process
// clock behind) are not matched against those read before them. Ingest
// processes whose clocks agree within seconds (NTP) show each stored
// decision once.
func Recent(ctx context.Context, js jetstream.JetStream, names streams.Names, agent string, since time.Time, n int) ([]Record, error) {
	read, err := ReadRecent(ctx, js, names, agent, since, n)
	return read.Records, err
}

// RecentRead is what ReadRecent read of JL_AUDIT.
type RecentRead struct {
	// Records are Recent's.
	Records []Record
	// Skipped counts the messages read that held a line of no decision
	// record (ParseRecords), skipped; Skip is the first one's error,
	// naming its sequence and line. A reader says so rather than drop
	// them without a word.
	Skipped int
	Skip    error
}

// ReadRecent is Recent, saying too what it skipped.
func ReadRecent(ctx context.Context, js jetstream.JetStream, names streams.Names, agent string, since time.Time, n int) (RecentRead, error) {
	var read RecentRead
	filter := names.AuditAll()
	if agent != "" {
		s, err := names.Audit(AuditKind, agent)
		if err != nil {
			return RecentRead{}, err
		}
		filter = s
	} else if s, err := names.Audit(AuditKind, NoAgent); err == nil {
		filter = strings.TrimSuffix(s, NoAgent) + ">"
	}
	cons, err := js.OrderedConsumer(ctx, names.StreamAudit(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &since,
	})
	if err != nil {
		return RecentRead{}, fmt.Errorf("admission: read %s: %w", names.StreamAudit(), err)
	}
	defer streams.DropConsumer(ctx, js, names.StreamAudit(), cons)
	info, err := cons.Info(ctx)
	if err != nil {
		return RecentRead{}, fmt.Errorf("admission: read %s: %w", names.StreamAudit(), err)
	}
	pending := info.NumPending
	var out []Record
	seen := newRecordsSeen()
	for pending > 0 {
		batch, err := cons.Fetch(int(min(pending, 256)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return RecentRead{}, fmt.Errorf("admission: read %s: %w", names.StreamAudit(), err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			pending = md.NumPending
			// What is not a record is skipped (ParseRecords): a
			// reader is shown decisions only, and told of the rest.
			recs, err := ParseRecords(m.Data())
			if err != nil {
				if read.Skipped++; read.Skip == nil {
					read.Skip = fmt.Errorf("%s message %d on %s: %w", names.StreamAudit(), md.Sequence.Stream, m.Subject(), err)
				}
			}
			for _, rec := range recs {
				if seen.repeats(rec) {
					continue
				}
				rec.Seq = md.Sequence.Stream
				out = append(out, rec)
				if len(out) > n {
					out = out[1:]
				}
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return RecentRead{}, fmt.Errorf("admission: read %s: %w", names.StreamAudit(), err)
		}
		if got == 0 {
			break
		}
	}
	read.Records = out
	return read, nil
}

// ParseRecords returns the decision records the body of a JL_AUDIT
// message holds: one JSON object (however laid out, as a message of one
// record was always read), or several, one a line (see HeaderRecords).
// A line that is not a decision record is skipped, and so is one that
// parses but holds none (`null`, `{}`, an object without a time or a
// decision), so a reader never shows an empty decision: the records
// returned are the others, and the error, nil when every line was a
// record, says how many lines were skipped, the first by its number and
// its start, quoted. An empty body is no record and an error too.
func ParseRecords(data []byte) ([]Record, error) {
	var one Record
	if json.Unmarshal(data, &one) == nil && isRecord(one) {
		return []Record{one}, nil
	}
	var (
		out     []Record
		lines   int
		skipped int
		first   error
	)
	for line := range bytes.Lines(data) {
		lines++
		var rec Record
		err := json.Unmarshal(line, &rec)
		if err == nil && !isRecord(rec) {
			err = errors.New("no time or decision: not a decision record")
		}
		if err != nil {
			if skipped++; first == nil {
				first = fmt.Errorf("line %d: %s: %w", lines, quoteStart(bytes.TrimRight(line, "\r\n")), err)
			}
			continue
		}
		out = append(out, rec)
	}
	if lines == 0 {
		// An empty body holds no decision either: said, not dropped.
		return nil, errors.New("admission: an empty JL_AUDIT message skipped: not a decision record")
	}
	if skipped > 0 {
		return out, fmt.Errorf("admission: %d of %d lines of a JL_AUDIT message skipped; %w", skipped, lines, first)
	}
	return out, nil
}

// quoteStart quotes b, or its first 80 bytes when it is longer.
func quoteStart(b []byte) string {
	const most = 80
	if len(b) > most {
		return strconv.Quote(string(b[:most])) + "…"
	}
	return strconv.Quote(string(b))
}

// isRecord reports whether rec, as decoded, is a decision record: one
// that says when and what was decided.
func isRecord(rec Record) bool {
	return !rec.Time.IsZero() && rec.Outcome != ""
}

// recordWindow is the span within which two records of one decision are
// one stored twice: JL_AUDIT's duplicate window (the server's default),
// inside which a lone record's Nats-Msg-Id would have dropped the second.
const recordWindow = 2 * time.Minute

// recordKey is what names a decision: its Nats-Msg-Id's parts.
type recordKey struct {
	id, source, agent, trigger string
	outcome                    Outcome
}

// recordsSeen remembers the records read, by key, to drop repeats, and
// forgets them once the window has passed, oldest first: a record costs
// the same however many were read before it.
type recordsSeen struct {
	at    map[recordKey]time.Time
	order []seenAt // the keys remembered, in the order they were
}

type seenAt struct {
	key recordKey
	at  time.Time
}

func newRecordsSeen() *recordsSeen {
	return &recordsSeen{at: map[recordKey]time.Time{}}
}

// repeats reports whether rec repeats a record seen within recordWindow,
// and remembers it otherwise.
func (s *recordsSeen) repeats(rec Record) bool {
	k := recordKey{id: rec.Event.ID, source: rec.Event.Source, agent: rec.Agent, trigger: rec.Trigger, outcome: rec.Outcome}
	if t, ok := s.at[k]; ok {
		if d := rec.Time.Sub(t); d < recordWindow && d > -recordWindow {
			return true
		}
	}
	// Records come about in time order: those older than the window can
	// repeat no more. (A record out of order only keeps the others
	// longer.)
	for len(s.order) > 0 && rec.Time.Sub(s.order[0].at) >= recordWindow {
		if o := s.order[0]; s.at[o.key].Equal(o.at) {
			delete(s.at, o.key)
		}
		s.order = s.order[1:]
	}
	s.at[k] = rec.Time
	s.order = append(s.order, seenAt{key: k, at: rec.Time})
	return false
}
