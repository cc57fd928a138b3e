package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
)

// A definition's limits are spend ceilings beyond one run. The session's
// lifetime spend is its state's (budget checks it before every model
// call); the day spends of the agent and of a limit key are counters in
// jl_spend that every worker adds each settled model call's cost to, by
// compare-and-set. They are read before a run starts and before each
// model call of an agent that has them: a run does not start once one is
// reached (the event is recorded, with the reason, and a decision in
// JL_AUDIT), and a run that reaches one ends as budget_exceeded.
//
// A call's cost is added when its answer comes, before its settlement,
// once per attempt (its session, step and attempt name the addition,
// remembered for a while): a worker that dies before the settlement has
// counted the call, and the call its successor makes again is counted
// too, as both were billed.

// Bounds of the spend counters.
const (
	maxSpendAttempts = 32
	// spendTTL keeps a day's counter past its day.
	spendTTL = 48 * time.Hour
	// maxSpendAdds bounds the additions a counter remembers.
	maxSpendAdds = 256
)

// spendCounter is one jl_spend key: the dollars spent, and the additions
// made lately, so an addition made again adds nothing.
type spendCounter struct {
	USD  float64  `json:"usd"`
	Adds []string `json:"adds,omitempty"`
}

// spend keeps the day counters in jl_spend.
type spend struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	names  streams.Names
	bucket string
}

// day is the UTC day of t, as SpendKey takes it.
func day(t time.Time) string { return t.UTC().Format("20060102") }

// get reads a counter; 0 when it has none.
func (s *spend) get(ctx context.Context, agent, day, key string) (float64, error) {
	k, err := s.names.SpendKey(agent, day, key)
	if err != nil {
		return 0, err
	}
	e, err := s.kv.Get(ctx, k)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("worker: read spend %s: %w", k, err)
	}
	var c spendCounter
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		return 0, fmt.Errorf("worker: spend %s: %w", k, err)
	}
	return c.USD, nil
}

// add adds usd to a counter once per id.
func (s *spend) add(ctx context.Context, agent, day, key, id string, usd float64) error {
	k, err := s.names.SpendKey(agent, day, key)
	if err != nil {
		return err
	}
	for attempt := range maxSpendAttempts {
		var c spendCounter
		var rev uint64
		e, err := s.kv.Get(ctx, k)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		case err != nil:
			return fmt.Errorf("worker: read spend %s: %w", k, err)
		default:
			rev = e.Revision()
			if err := json.Unmarshal(e.Value(), &c); err != nil {
				return fmt.Errorf("worker: spend %s: %w", k, err)
			}
		}
		if slices.Contains(c.Adds, id) {
			return nil
		}
		c.USD += usd
		c.Adds = append(c.Adds, id)
		if n := len(c.Adds) - maxSpendAdds; n > 0 {
			c.Adds = c.Adds[n:]
		}
		b, _ := json.Marshal(c)
		if rev == 0 {
			_, err = s.kv.Create(ctx, k, b, jetstream.KeyTTL(spendTTL))
		} else {
			m := &nats.Msg{Subject: streams.KVSubject(s.bucket, k), Header: nats.Header{}, Data: b}
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
			_, err = s.js.PublishMsg(ctx, m, jetstream.WithMsgTTL(spendTTL))
		}
		if err == nil {
			return nil
		}
		if !record.IsConflict(err) && !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("worker: write spend %s: %w", k, err)
		}
		d := time.Millisecond << min(attempt, 6)
		t := time.NewTimer(d/2 + rand.N(d))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("worker: spend %s: %w", k, ctx.Err())
		case <-t.C:
		}
	}
	return fmt.Errorf("worker: spend %s: too much contention", k)
}

// hasDayLimits reports whether l has a ceiling on a shared counter.
func hasDayLimits(l policies.Limits) bool { return l.AgentUSDPerDay > 0 || l.KeyUSDPerDay > 0 }

// ceiling returns the spend limit st has reached, and why: its lifetime
// spend, or today's spend of its agent or of its run's limit key.
func (s *session) ceiling(ctx context.Context, st record.State) (limit, reason string, err error) {
	l := st.Ceilings
	if l.SessionUSD > 0 && st.Usage.CostUSD >= l.SessionUSD {
		return "session_usd", fmt.Sprintf("limits.session_usd %.4f reached (%.4f spent over the session's life)", l.SessionUSD, st.Usage.CostUSD), nil
	}
	if !hasDayLimits(l) {
		return "", "", nil
	}
	today := day(time.Now())
	if l.AgentUSDPerDay > 0 {
		usd, err := s.w.spend.get(ctx, s.r.ref.Agent, today, "")
		if err != nil {
			return "", "", err
		}
		if usd >= l.AgentUSDPerDay {
			return "agent_usd_per_day", fmt.Sprintf("limits.agent_usd_per_day %.4f reached (%.4f spent by agent %s today, UTC)", l.AgentUSDPerDay, usd, s.r.ref.Agent), nil
		}
	}
	if l.KeyUSDPerDay > 0 {
		usd, err := s.w.spend.get(ctx, s.r.ref.Agent, today, st.SpendKey)
		if err != nil {
			return "", "", err
		}
		if usd >= l.KeyUSDPerDay {
			return "key_usd_per_day", fmt.Sprintf("limits.key_usd_per_day %.4f reached for key %q (%.4f spent today, UTC)", l.KeyUSDPerDay, st.SpendKey, usd), nil
		}
	}
	return "", "", nil
}

// spendKey is the limit key of a run of def started by ev, "" without a
// per-key limit. An event the key does not evaluate on counts under "".
func (s *session) spendKey(ctx context.Context, def *policies.Definition, ev event.Event) string {
	if def.Limits == nil || def.Limits.Key == "" {
		return ""
	}
	c, err := s.w.compiled(s.r.ref.Agent, *def)
	var key string
	if err == nil && c.LimitKey != nil {
		var vars policies.Vars
		if vars, err = policies.EventVars(ev); err == nil {
			key, err = c.LimitKey.EvalString(ctx, vars)
		}
	}
	if err != nil {
		s.log.Warn("limit key does not evaluate on this event; its spend counts under the empty key", "err", err)
	}
	return key
}

// addSpend adds the cost of an answered model call (its step and
// attempt) to the day counters its agent's limits keep. It is called as
// the answer comes, before its settlement is written: the call was billed
// whether or not the settlement follows, and a call made again after a
// crash is another attempt, added too; adopting a stored settlement adds
// the same attempt again, which adds nothing. A failure is logged: the
// counters miss that call.
func (s *session) addSpend(ctx context.Context, step uint64, attempt int, usd float64) {
	l := s.st.Ceilings
	if !hasDayLimits(l) || usd <= 0 {
		return
	}
	id := fmt.Sprintf("%s#%d.%d", s.r.ref.Session, step, attempt)
	today := day(time.Now())
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if l.AgentUSDPerDay > 0 {
		if err := s.w.spend.add(actx, s.r.ref.Agent, today, "", id, usd); err != nil {
			s.log.Warn("add to the agent's day spend", "err", err)
		}
	}
	if l.KeyUSDPerDay > 0 {
		if err := s.w.spend.add(actx, s.r.ref.Agent, today, s.st.SpendKey, id, usd); err != nil {
			s.log.Warn("add to the key's day spend", "key", s.st.SpendKey, "err", err)
		}
	}
}

// refuseRun ends, before it starts, a run a spend limit stops: the event's
// entries are recorded with the reason, the status says it, and the
// decision goes to JL_AUDIT beside admission's.
func (s *session) refuseRun(ctx context.Context, next record.State, entries []record.Entry, ev event.Event, limit, reason string) error {
	d := admission.Decision{Agent: s.r.ref.Agent, Session: s.r.ref.Session, Outcome: admission.LimitReached,
		Version: next.DefinitionVersion, Reason: reason}
	if t, ok := ev.Extensions()[admission.ExtTrigger].(string); ok {
		d.Trigger = t
	}
	m, err := admission.DecisionMessage(s.w.names, ev, d, time.Now())
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := admission.Publish(actx, s.w.js, []*nats.Msg{m}); err != nil {
		return fmt.Errorf("worker: record the refusal of event %s: %w", ev.ID(), err)
	}
	return s.stopBudget(ctx, next, entries, limit, reason)
}
