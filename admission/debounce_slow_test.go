package admission_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/streams"
)

// slowPublish is a JetStream whose publishes on the debounce subject are
// acknowledged late, as in a cluster that lost its quorum for a while:
// after the one it holds is stored, the server's timer for the burst it
// replaced goes off (the clock of the admitter jumps to that burst's @at)
// and, when fire is set, the burst the server had copied before the
// message was stored is fired: stored on jl.in with the headers the
// server gives a fire, which purge the whole debounce subject.
type slowPublish struct {
	jetstream.JetStream
	subject, target string
	fire            bool
	skew            *atomic.Int64 // added to the admitter's clock

	mu     sync.Mutex
	held   bool
	copied *nats.Msg // the pending burst as the server copied it
}

func (s *slowPublish) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	hold := m.Subject == s.subject && s.copied != nil && !s.held
	ack, err := s.JetStream.PublishMsg(ctx, m, opts...)
	if err != nil || !hold {
		return ack, err
	}
	s.held = true
	at, err := time.Parse(time.RFC3339, strings.TrimPrefix(s.copied.Header.Get("Nats-Schedule"), "@at "))
	if err != nil {
		return nil, err
	}
	s.skew.Store(int64(time.Until(at)))
	if s.fire {
		f := nats.NewMsg(s.target)
		for k, v := range s.copied.Header {
			if !strings.HasPrefix(k, "Nats-") {
				f.Header[k] = v
			}
		}
		f.Header.Set("Nats-Scheduler", s.subject)
		f.Header.Set("Nats-Schedule-Next", "purge")
		f.Data = s.copied.Data
		if _, err := s.JetStream.PublishMsg(ctx, f); err != nil {
			return nil, fmt.Errorf("fire the copied burst: %w", err)
		}
	}
	return ack, nil
}

// An event whose replacement of the pending burst is stored only after the
// server has copied that burst to fire it is not lost with the purge that
// follows: the debounce finds the fire, sees it does not count the event,
// and debounces the event again. Without the fire, a late replacement is
// kept as it is.
func TestDebounceSlowReplacementSurvivesTheFire(t *testing.T) {
	for _, fire := range []bool{true, false} {
		t.Run(fmt.Sprintf("fire=%v", fire), func(t *testing.T) {
			e := setup(t)
			ref, _ := streams.NewSessionRef("deb", "main")
			subject, target := e.names.Debounce(ref), e.names.In(ref)
			skew := &atomic.Int64{}
			slow := &slowPublish{JetStream: e.js, subject: subject, target: target, fire: fire, skew: skew}
			now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
			a, err := admission.New(context.Background(), slow, admission.NewRules(), admission.Config{Names: e.names, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			// A window long enough that nothing fires by itself while the
			// test runs.
			dec := admission.Decision{Agent: "deb", Trigger: "t", Session: "main", Outcome: admission.Debounced, Window: time.Minute}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if n, err := a.Debounce(ctx, ghEvent("e1", "x", `{"n":1}`), dec); err != nil || n != 1 {
				t.Fatalf("first event: count %d, %v", n, err)
			}
			in, err := e.js.Stream(ctx, e.names.StreamIn())
			if err != nil {
				t.Fatal(err)
			}
			raw, err := in.GetLastMsgForSubject(ctx, subject)
			if err != nil {
				t.Fatal(err)
			}
			slow.mu.Lock()
			slow.copied = &nats.Msg{Subject: raw.Subject, Header: raw.Header, Data: raw.Data}
			slow.mu.Unlock()

			n, err := a.Debounce(ctx, ghEvent("e2", "x", `{"n":2}`), dec)
			if err != nil {
				t.Fatalf("second event: %v", err)
			}
			pending, err := in.GetLastMsgForSubject(ctx, subject)
			if err != nil {
				t.Fatalf("second event: no burst pending: %v", err)
			}
			id, count := pending.Header.Get("ce-id"), pending.Header.Get("ce-"+admission.ExtCount)
			want := "2"
			if fire {
				// e1 fired alone; e2 starts the next burst.
				want = "1"
			}
			if id != "e2" || count != want || fmt.Sprint(n) != want {
				t.Fatalf("pending burst: latest %q count %q (Debounce said %d), want e2 counting %s", id, count, n, want)
			}
		})
	}
}
