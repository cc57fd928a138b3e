package admission_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/natsd"
	"github.com/jetloop/jetloop/streams"
)

// heldAudit is JL_AUDIT taken away and its subjects answered by nobody
// but a plain subscriber that keeps what it receives: a write of records
// is in flight, its acknowledgement never coming, until release stores
// the message held and answers it with the stream's own acknowledgement.
type heldAudit struct {
	t    *testing.T
	e    env
	nc   *nats.Conn
	sub  *nats.Subscription
	msgs chan *nats.Msg
}

func holdAudit(t *testing.T, e env) *heldAudit {
	t.Helper()
	if err := e.js.DeleteStream(context.Background(), e.names.StreamAudit()); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(e.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	h := &heldAudit{t: t, e: e, nc: nc, msgs: make(chan *nats.Msg, 64)}
	if h.sub, err = nc.ChanSubscribe(e.names.AuditAll(), h.msgs); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return h
}

// next returns the next message written while held.
func (h *heldAudit) next() *nats.Msg {
	h.t.Helper()
	select {
	case m := <-h.msgs:
		return m
	case <-time.After(10 * time.Second):
		h.t.Fatal("no write of records reached JL_AUDIT's subjects")
		return nil
	}
}

// release brings JL_AUDIT back, stores m in it and answers m's writer
// with the stream's acknowledgement.
func (h *heldAudit) release(m *nats.Msg) {
	h.t.Helper()
	if err := h.sub.Unsubscribe(); err != nil {
		h.t.Fatal(err)
	}
	if _, err := streams.Provision(context.Background(), h.e.js, streams.Options{}); err != nil {
		h.t.Fatal(err)
	}
	ack, err := h.nc.RequestMsg(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}, 10*time.Second)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := m.Respond(ack.Data); err != nil {
		h.t.Fatal(err)
	}
}

// A write whose acknowledgement never comes, by a caller whose context
// has no deadline, ends after maxRecordWait as the writer's doc says,
// and the records queued behind it are written: one lost acknowledgement
// does not stop every later decision from being recorded.
func TestLoneWriteWithoutDeadlineEnds(t *testing.T) {
	e := setup(t)
	a := newAdmitter(t, e, nil, compile(t, reviewer))
	// Long enough for the second write to queue behind the first on a
	// loaded machine; its records are built before the first starts.
	a.SetMaxRecordWait(5 * time.Second)
	lost, behind := recordsOf(t, a, "lost"), recordsOf(t, a, "behind")
	h := holdAudit(t, e)
	lead := make(chan error, 1)
	go func() { lead <- a.WriteRecords(context.Background(), lost) }()
	h.next()
	queued := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		queued <- a.WriteRecords(ctx, behind)
	}()
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := a.QueuedRecordCalls(); n != 1 {
			return fmt.Errorf("%d calls queued", n)
		}
		return nil
	})
	if err := h.sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if _, err := streams.Provision(context.Background(), e.js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-lead:
		if err == nil {
			t.Fatal("a write never acknowledged succeeded")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a write never acknowledged, its context without deadline, still waits after 20s (maxRecordWait 5s)")
	}
	select {
	case err := <-queued:
		if err != nil {
			t.Fatalf("the record queued behind a lost acknowledgement: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the record queued behind a lost acknowledgement is not written")
	}
}

// Records queued behind a write whose caller gave up are written at
// once: they do not wait for an acknowledgement nobody awaits.
func TestRecordsQueuedBehindAnAbandonedWriteGoOn(t *testing.T) {
	e := setup(t)
	a := newAdmitter(t, e, nil, compile(t, reviewer))
	h := holdAudit(t, e)
	lead := make(chan error, 1)
	leadCtx, cancelLead := context.WithCancel(context.Background())
	defer cancelLead()
	go func() { lead <- a.WriteRecords(leadCtx, recordsOf(t, a, "abandoned")) }()
	h.next()
	queued := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		queued <- a.WriteRecords(ctx, recordsOf(t, a, "behind"))
	}()
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := a.QueuedRecordCalls(); n != 1 {
			return fmt.Errorf("%d calls queued", n)
		}
		return nil
	})
	// JL_AUDIT is back; the held write is never answered.
	if err := h.sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if _, err := streams.Provision(context.Background(), e.js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	cancelLead()
	select {
	case err := <-lead:
		if err == nil {
			t.Fatal("an abandoned write succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a write whose context ended still waits")
	}
	select {
	case err := <-queued:
		if err != nil {
			t.Fatalf("the record queued behind an abandoned write: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the record queued behind an abandoned write never returned")
	}
}

// A group never exceeds the server's max payload, however small it is
// configured: records queued behind a write are split to fit, and every
// caller's record is stored.
func TestGroupFitsServersMaxPayload(t *testing.T) {
	const maxPayload = 32 << 10
	s := natstest.RunServer(t, func(c *natsd.Config) { c.MaxPayload = maxPayload })
	_, js := natstest.Connect(t, s.ClientURL())
	if _, err := streams.Provision(context.Background(), js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	e := env{url: s.ClientURL(), js: js, names: streams.Default()}
	a := newAdmitter(t, e, nil, compile(t, reviewer))
	const callers = 200
	recs := make([][]*nats.Msg, callers)
	size := 0
	for i := range recs {
		recs[i] = recordsOf(t, a, fmt.Sprint("p", i))
		size += len(recs[i][0].Data) + 1
	}
	if size <= maxPayload {
		t.Fatalf("%d bytes of records fit one message of %d", size, maxPayload)
	}
	h := holdAudit(t, e)
	lead := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		lead <- a.WriteRecords(ctx, recordsOf(t, a, "lead"))
	}()
	held := h.next()
	errs := make(chan error, callers)
	for i := range recs {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs <- a.WriteRecords(ctx, recs[i])
		}()
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := a.QueuedRecordCalls(); n != callers {
			return fmt.Errorf("%d of %d calls queued", n, callers)
		}
		return nil
	})
	h.release(held)
	for range callers + 1 {
		var err error
		select {
		case err = <-lead:
		case err = <-errs:
		case <-time.After(30 * time.Second):
			t.Fatal("a write of records never returned")
		}
		if err != nil {
			t.Errorf("write of a queued record: %v", err)
		}
	}
	got, err := admission.Recent(context.Background(), e.js, e.names, "reviewer", time.Time{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != callers+1 {
		t.Errorf("%d records read, want %d", len(got), callers+1)
	}
	for _, m := range auditMsgs(t, e) {
		if len(m.Data) > maxPayload {
			t.Errorf("a message of %d bytes stored beyond the max payload %d", len(m.Data), maxPayload)
		}
	}
}

// A write of records that fails names what failed: a caller giving up
// names each subject its records were on and how many, and a group's
// messages that time out fail each caller with the message of its own
// records, not the first message of the group.
func TestFailedWritesNameTheirRecords(t *testing.T) {
	e := setup(t)
	a := newAdmitter(t, e, nil, compile(t, reviewer))
	a.SetMaxRecordWait(2 * time.Second)
	obs := &recordObserver{}
	a.ObserveRecords(obs)
	dup := func(id string) *nats.Msg {
		m, err := a.DuplicateMessage(ghEvent(id, "com.github.pull_request.opened", `{}`))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	agentSubject, err := e.names.Audit(admission.AuditKind, "reviewer")
	if err != nil {
		t.Fatal(err)
	}
	noneSubject, err := e.names.Audit(admission.AuditKind, admission.NoAgent)
	if err != nil {
		t.Fatal(err)
	}
	recA := recordsOf(t, a, "a")
	recB := []*nats.Msg{dup("b1"), dup("b2")}
	recC := append(recordsOf(t, a, "c"), dup("c2"))
	h := holdAudit(t, e)
	leadCtx, cancelLead := context.WithCancel(context.Background())
	defer cancelLead()
	lead := make(chan error, 1)
	go func() { lead <- a.WriteRecords(leadCtx, recordsOf(t, a, "lead")) }()
	h.next()
	queue := func(ctx context.Context, msgs []*nats.Msg, n int) chan error {
		errs := make(chan error, 1)
		go func() { errs <- a.WriteRecords(ctx, msgs) }()
		natstest.WaitFor(t, 10*time.Second, func() error {
			if q := a.QueuedRecordCalls(); q != n {
				return fmt.Errorf("%d calls queued, want %d", q, n)
			}
			return nil
		})
		return errs
	}
	errA := queue(context.Background(), recA, 1)
	errB := queue(context.Background(), recB, 2)
	ctxC, cancelC := context.WithCancel(context.Background())
	errC := queue(ctxC, recC, 3)
	await := func(name string, errs chan error) error {
		t.Helper()
		select {
		case err := <-errs:
			if err == nil {
				t.Fatalf("%s: a write never acknowledged succeeded", name)
			}
			return err
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: a write never acknowledged still waits after 20s", name)
			return nil
		}
	}
	cancelC()
	if err := await("caller gone", errC); !errors.Is(err, context.Canceled) ||
		!strings.Contains(err.Error(), "2 decisions on "+agentSubject+", "+noneSubject) {
		t.Fatalf("a caller gone with records on two subjects: %v", err)
	}
	cancelLead()
	if err := await("lead", lead); !strings.Contains(err.Error(), "a decision on "+agentSubject) {
		t.Fatalf("the lone write given up: %v", err)
	}
	// The group goes out (its messages held, never answered) and times
	// out after the writer's wait: each caller hears of its own message.
	if err := await("A", errA); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), agentSubject) || strings.Contains(err.Error(), noneSubject) {
		t.Fatalf("the records on %s timed out as %v", agentSubject, err)
	}
	if err := await("B", errB); !errors.Is(err, context.DeadlineExceeded) ||
		!strings.Contains(err.Error(), "message of 3 decisions on "+noneSubject) || strings.Contains(err.Error(), agentSubject) {
		t.Fatalf("the records on %s timed out as %v", noneSubject, err)
	}
	// What the observer was told: the lone write given up, then the
	// group's two messages timed out; nothing stored.
	if got, want := obs.String(), "failed reviewer 1 timeout; failed reviewer 2 timeout; failed _ 3 timeout"; got != want {
		t.Fatalf("observed %q, want %q", got, want)
	}
}

// recordObserver keeps what an admission.RecordObserver is told.
type recordObserver struct {
	mu     sync.Mutex
	events []string
}

func (o *recordObserver) add(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, fmt.Sprintf(format, args...))
}

func (o *recordObserver) RecordsStored(agent string, records int) {
	o.add("stored %s %d", agent, records)
}

func (o *recordObserver) RecordsWaited(n int, d time.Duration) {
	if d < 0 {
		o.add("waited %d for %v", n, d)
	}
}

func (o *recordObserver) RecordsFailed(agent string, records int, timeout bool) {
	reason := "error"
	if timeout {
		reason = "timeout"
	}
	o.add("failed %s %d %s", agent, records, reason)
}

func (o *recordObserver) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return strings.Join(o.events, "; ")
}
