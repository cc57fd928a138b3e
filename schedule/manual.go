package schedule

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/streams"
)

// MaxBackfill bounds the slots of one backfill.
const MaxBackfill = 1000

// TriggerTick returns the message of a tick of s fired by hand now: what
// the server fires at a slot (the schedule message's event and headers)
// on the schedule's target subject, with slot now, an id of its own made
// from id (one trigger sent twice with one id fires once) and HeaderKind
// trigger.
func TriggerTick(names streams.Names, s Spec, id string, now time.Time) (*nats.Msg, Tick, error) {
	if id == "" {
		return nil, Tick{}, fmt.Errorf("schedule: trigger %s/%s: no id", s.Agent, s.Schedule)
	}
	return manualTick(names, s, KindTrigger, "trigger:"+id, now.UTC().Truncate(time.Second))
}

// BackfillTicks returns one tick of s for every slot from from (included)
// to to (excluded), oldest first, each the tick the server fires for that
// slot (so its id is the one the server's tick of the slot has: a slot
// that ran runs once) with HeaderKind backfill. At most MaxBackfill. An
// @every pattern is refused: its slots have no fixed times.
func BackfillTicks(names streams.Names, s Spec, from, to time.Time) ([]*nats.Msg, []Tick, error) {
	if !from.Before(to) {
		return nil, nil, fmt.Errorf("schedule: backfill %s/%s: from %s is not before to %s", s.Agent, s.Schedule, from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	if every := s.pattern.Every(); every > 0 {
		// The server counts an @every schedule's slots from its last fire
		// (from now after a restart): slots counted from from would carry
		// ids no tick that ran has, and run again.
		return nil, nil, fmt.Errorf("schedule: backfill %s/%s: the slots of %s have no fixed times (the server counts them from its last fire), so a backfill cannot tell those that ran: use a cron pattern, or schedules trigger", s.Agent, s.Schedule, s.pattern.Expr)
	}
	var msgs []*nats.Msg
	var ticks []Tick
	// The first slot at or after from.
	slot := s.pattern.Next(from.Add(-time.Second))
	for !slot.IsZero() && slot.Before(to) {
		if len(msgs) == MaxBackfill {
			return nil, nil, fmt.Errorf("schedule: backfill %s/%s: more than %d slots from %s to %s", s.Agent, s.Schedule, MaxBackfill, from.Format(time.RFC3339), to.Format(time.RFC3339))
		}
		next := s.pattern.Next(slot)
		m, t, err := manualTick(names, s, KindBackfill, next.UTC().Format(time.RFC3339), slot)
		if err != nil {
			return nil, nil, err
		}
		msgs, ticks = append(msgs, m), append(ticks, t)
		slot = next
	}
	return msgs, ticks, nil
}

// manualTick builds a tick of s for slot, named by scheduler and next as
// the server names its ticks.
func manualTick(names streams.Names, s Spec, kind, next string, slot time.Time) (*nats.Msg, Tick, error) {
	sm, err := s.Message(names)
	if err != nil {
		return nil, Tick{}, err
	}
	target := sm.Header.Get(hdrScheduleTarget)
	h := nats.Header{}
	for k, v := range sm.Header {
		// The schedule message's own directives stay behind.
		if strings.HasPrefix(k, "Nats-") || k == hdrSpec {
			continue
		}
		h[k] = v
	}
	Route(h, sm.Subject, next)
	h.Set(HeaderKind, kind)
	h.Set(HeaderSlot, slot.UTC().Format(time.RFC3339Nano))
	m := &nats.Msg{Subject: target, Header: h, Data: sm.Data}
	t, err := ParseTick(m)
	if err != nil {
		return nil, Tick{}, fmt.Errorf("schedule: %s tick of %s/%s: %w", kind, s.Agent, s.Schedule, err)
	}
	m.Header.Set(nats.MsgIdHdr, t.ID)
	return m, t, nil
}

// DedupeSource is the jl_dedupe source under which the worker remembers
// the ticks it consumed, by tick id: a slot runs once.
const DedupeSource = "tick"

// Fired is one tick published by hand.
type Fired struct {
	ID      string    `json:"id"`
	Slot    time.Time `json:"slot"`
	Session string    `json:"session"`
	// Seq is the tick's sequence in JL_IN; 0 when it was not published.
	Seq uint64 `json:"seq,omitempty"`
	// Duplicate: JL_IN had the tick already (the same trigger or backfill
	// inside the duplicate window).
	Duplicate bool `json:"duplicate,omitempty"`
	// Skipped says why it was not published: its slot ran before.
	Skipped string `json:"skipped,omitempty"`
}

// Publish publishes ticks made by TriggerTick or BackfillTicks, oldest
// first, skipping those seen reports consumed before, and returns what
// became of each once JetStream has stored them.
func Publish(ctx context.Context, js jetstream.JetStream, names streams.Names, msgs []*nats.Msg, ticks []Tick, seen func(ctx context.Context, id string) (bool, error)) ([]Fired, error) {
	out := make([]Fired, 0, len(msgs))
	for i, m := range msgs {
		t := ticks[i]
		f := Fired{ID: t.ID, Slot: t.Slot, Session: t.Session}
		if seen != nil {
			ok, err := seen(ctx, t.ID)
			if err != nil {
				return out, err
			}
			if ok {
				f.Skipped = "its slot ran before"
				out = append(out, f)
				continue
			}
		}
		ack, err := js.PublishMsg(ctx, m, jetstream.WithExpectStream(names.StreamIn()))
		if err != nil {
			return out, fmt.Errorf("schedule: publish %s tick of %s/%s for %s: %w", t.Kind, t.Spec.Agent, t.Spec.Schedule, t.Slot.Format(time.RFC3339), err)
		}
		f.Seq, f.Duplicate = ack.Sequence, ack.Duplicate
		out = append(out, f)
	}
	return out, nil
}
