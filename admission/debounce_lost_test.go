package admission_test

import (
	"context"
	"errors"
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

// errAckLost is what a publish whose acknowledgement never came returns.
var errAckLost = errors.New("nats: timeout")

// heldPublish is a JetStream whose next publish on the debounce subject,
// once armed with the pending burst the server copied to fire, is stored
// only after that copy: it stores the message, then (at once, or when
// fireLate is set, a moment after answering) the copied burst's fire,
// which purges the debounce subject. The clock of the admitter jumps to
// ackAfter past the copied burst's @at; with ackLost the publish answers
// with a timeout, as a client whose publish was held longer than it
// waits.
type heldPublish struct {
	jetstream.JetStream
	heldOpts
	t               *testing.T
	subject, target string
	skew            *atomic.Int64

	mu     sync.Mutex
	copied *nats.Msg
	fired  sync.WaitGroup
}

func (h *heldPublish) arm(m *nats.Msg) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.copied = m
}

func (h *heldPublish) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	h.mu.Lock()
	copied := h.copied
	if m.Subject == h.subject {
		h.copied = nil
	}
	h.mu.Unlock()
	if copied == nil || m.Subject != h.subject {
		return h.JetStream.PublishMsg(ctx, m, opts...)
	}
	at, err := time.Parse(time.RFC3339, strings.TrimPrefix(copied.Header.Get("Nats-Schedule"), "@at "))
	if err != nil {
		return nil, err
	}
	h.skew.Store(int64(time.Until(at) + h.ackAfter))
	fire := func() {
		f := nats.NewMsg(h.target)
		for k, v := range copied.Header {
			if !strings.HasPrefix(k, "Nats-") {
				f.Header[k] = v
			}
		}
		f.Header.Set("Nats-Scheduler", h.subject)
		f.Header.Set("Nats-Schedule-Next", "purge")
		f.Data = copied.Data
		if _, err := h.JetStream.PublishMsg(context.Background(), f); err != nil {
			h.t.Errorf("fire the copied burst: %v", err)
		}
	}
	if h.fireFirst {
		fire()
		opts = nil
	}
	ack, err := h.JetStream.PublishMsg(ctx, m, opts...)
	if err != nil {
		return nil, err
	}
	switch {
	case h.fireFirst:
	case h.fireLate:
		h.fired.Go(func() {
			time.Sleep(50 * time.Millisecond) // the fire becomes readable a moment after the acknowledgement
			fire()
		})
	default:
		fire()
	}
	if h.ackLost {
		return nil, fmt.Errorf("publish on %s: %w", m.Subject, errAckLost)
	}
	return ack, nil
}

// heldOpts say how the held publish is answered.
type heldOpts struct {
	ackAfter time.Duration
	ackLost  bool
	fireLate bool
	// fireFirst stores the fire before the message, which is stored
	// although its expected last sequence is gone: a clustered stream's
	// leader checked it when it proposed the message, after proposing the
	// fire and before applying it.
	fireFirst bool
}

// lostEnv is one debounced session whose second event's publish is held
// past the fire of the burst it replaced.
type lostEnv struct {
	e    env
	held *heldPublish
	a    *admission.Admitter
	dec  admission.Decision
	in   jetstream.Stream
}

func newLostEnv(t *testing.T, opts heldOpts) *lostEnv {
	e := setup(t)
	ref, _ := streams.NewSessionRef("deb", "main")
	h := &heldPublish{JetStream: e.js, heldOpts: opts, t: t, subject: e.names.Debounce(ref), target: e.names.In(ref), skew: &atomic.Int64{}}
	t.Cleanup(h.fired.Wait)
	now := func() time.Time { return time.Now().Add(time.Duration(h.skew.Load())) }
	a, err := admission.New(context.Background(), h, admission.NewRules(), admission.Config{Names: e.names, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	in, err := e.js.Stream(context.Background(), e.names.StreamIn())
	if err != nil {
		t.Fatal(err)
	}
	// A window long enough that nothing fires by itself while the test
	// runs.
	dec := admission.Decision{Agent: "deb", Trigger: "t", Session: "main", Outcome: admission.Debounced, Window: time.Minute}
	return &lostEnv{e: e, held: h, a: a, dec: dec, in: in}
}

// first debounces e1 and arms the held publish with its pending burst.
func (l *lostEnv) first(t *testing.T, ctx context.Context) {
	if n, err := l.a.Debounce(ctx, ghEvent("e1", "x", `{"n":1}`), l.dec); err != nil || n != 1 {
		t.Fatalf("first event: count %d, %v", n, err)
	}
	raw, err := l.in.GetLastMsgForSubject(ctx, l.held.subject)
	if err != nil {
		t.Fatal(err)
	}
	l.held.arm(&nats.Msg{Subject: raw.Subject, Header: raw.Header, Data: raw.Data})
}

// wantPending fails unless e2 is pending alone, in the burst after e1's.
func (l *lostEnv) wantPending(t *testing.T, ctx context.Context) {
	l.held.fired.Wait()
	pending, err := l.in.GetLastMsgForSubject(ctx, l.held.subject)
	if err != nil {
		t.Fatalf("e2 is in no pending burst: %v", err)
	}
	if id, count := pending.Header.Get("ce-id"), pending.Header.Get("ce-"+admission.ExtCount); id != "e2" || count != "1" {
		t.Fatalf("pending burst: latest %q count %q, want e2 counting 1", id, count)
	}
}

// A replacement whose publish was held past the fire of the burst it
// replaced, and whose acknowledgement never came, is purged with that
// fire; the sender's retry of it is a duplicate of the purged message,
// and is debounced again rather than answered as counted.
func TestDebounceRetryOfAPurgedReplacementIsDebouncedAgain(t *testing.T) {
	l := newLostEnv(t, heldOpts{ackLost: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l.first(t, ctx)
	e2 := ghEvent("e2", "x", `{"n":2}`)
	if _, err := l.a.Debounce(ctx, e2, l.dec); !errors.Is(err, errAckLost) {
		t.Fatalf("second event: %v, want its lost acknowledgement", err)
	}
	// The sender retries.
	if _, err := l.a.Debounce(ctx, e2, l.dec); err != nil {
		t.Fatalf("second event again: %v", err)
	}
	l.wantPending(t, ctx)
	// And a retry after that is the duplicate of a counted event.
	if n, err := l.a.Debounce(ctx, e2, l.dec); err != nil || n != 1 {
		t.Fatalf("second event a third time: count %d, %v", n, err)
	}
	l.wantPending(t, ctx)
}

// A replacement acknowledged well past the @at of the burst it replaced
// (held for longer than maxFireWait) still finds the fire that purged
// it, though that fire is readable only a moment after the
// acknowledgement.
func TestDebounceReplacementAcknowledgedLongAfterTheFireIsDebouncedAgain(t *testing.T) {
	l := newLostEnv(t, heldOpts{ackAfter: 8 * time.Second, fireLate: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l.first(t, ctx)
	if _, err := l.a.Debounce(ctx, ghEvent("e2", "x", `{"n":2}`), l.dec); err != nil {
		t.Fatalf("second event: %v", err)
	}
	l.wantPending(t, ctx)
}

// A replacement stored after the fire of the burst it replaced (in a
// cluster, proposed after that fire and before it was applied) would
// count the fired burst's events again: it is debounced alone.
func TestDebounceReplacementStoredAfterTheFireCountsItsEventAlone(t *testing.T) {
	l := newLostEnv(t, heldOpts{fireFirst: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l.first(t, ctx)
	if n, err := l.a.Debounce(ctx, ghEvent("e2", "x", `{"n":2}`), l.dec); err != nil || n != 1 {
		t.Fatalf("second event: count %d, %v", n, err)
	}
	l.wantPending(t, ctx)
	// A retry of it is counted in that burst.
	if n, err := l.a.Debounce(ctx, ghEvent("e2", "x", `{"n":2}`), l.dec); err != nil || n != 1 {
		t.Fatalf("second event again: count %d, %v", n, err)
	}
	l.wantPending(t, ctx)
}
