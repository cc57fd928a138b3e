package admission

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Bounds of one JL_AUDIT message that holds the decision records of
// several events, far below the server's max payload (1 MiB by default).
const (
	// MaxGroupRecords is the most records one message holds.
	MaxGroupRecords = 256
	// MaxGroupBytes is the most bytes of records one message holds; on a
	// server whose max payload is smaller, that payload less
	// groupHeaderRoom is.
	MaxGroupBytes = 256 << 10
)

// groupHeaderRoom is what a group's message keeps of the server's max
// payload for its headers (Jetloop-Records and the framing).
const groupHeaderRoom = 1 << 10

// groupBytes returns the most bytes of records one message holds on the
// connection of js.
func groupBytes(js jetstream.JetStream) int {
	limit := MaxGroupBytes
	if nc := js.Conn(); nc != nil {
		if mp := int(nc.MaxPayload()) - groupHeaderRoom; mp > 0 && mp < limit {
			limit = mp
		}
	}
	return limit
}

// HeaderRecords is set on a JL_AUDIT message that holds more than one
// decision record: how many it holds, one JSON object a line.
const HeaderRecords = "Jetloop-Records"

// maxRecordWait bounds how long a write of decision records waits for
// JetStream's acknowledgement (a lone write, whatever its caller's
// context allows; a group, when none of its callers' contexts ends
// sooner): after it, the write fails and the next one starts.
const maxRecordWait = 30 * time.Second

// auditWriter writes decision records with group commit. While no write
// is in flight, a caller's records are published at once, each alone, as
// Record builds them; records that arrive while one is in flight wait,
// and are published together once it is acknowledged (or its caller
// stops waiting for it, its context or maxRecordWait ended): one message
// per subject (per agent), its body their records one a line (JSON lines; a
// single record is the plain object it always was). So under concurrency
// a burst of events costs JL_AUDIT one stored message per agent and
// round trip, not one per event, and a lone event is written exactly as
// before.
//
// A group carries no Nats-Msg-Id: what it holds depends on which events
// happened to arrive together, so no retry would send the same group
// again. A record whose write failed after the server had stored it (its
// acknowledgement lost, the caller's deadline passed) is stored again by
// the sender's retry, alone or in another group: the same decision twice.
// Recent shows such a record once.
//
// A lone write is awaited by its caller; a goroutine runs only while
// records queued behind a write are on their way. Idle, the writer holds
// nothing but its mutex and needs no closing.
type auditWriter struct {
	js   jetstream.JetStream
	wait time.Duration // maxRecordWait, shorter in tests
	obs  atomic.Pointer[RecordObserver]

	mu    sync.Mutex
	busy  bool
	queue []*recordCall
}

// RecordObserver is told what the writer of decision records
// (WriteRecords) stored and what it failed to: the ingest's metrics.
// Its methods are called from the goroutines that await the writes, and
// must not block. agent is the agent token of the records' subject
// (NoAgent for a record no single agent made).
type RecordObserver interface {
	// RecordsStored reports a JL_AUDIT message holding records
	// decision records of agent stored. A lone record the server
	// drops as a duplicate of one it holds (its Nats-Msg-Id seen
	// within the stream's duplicate window) is not reported again.
	RecordsStored(agent string, records int)
	// RecordsWaited reports that n of them, of one caller, waited d
	// from its WriteRecords until the message holding them was stored.
	RecordsWaited(n int, d time.Duration)
	// RecordsFailed reports a message holding records decision records
	// of agent not stored: refused, or not acknowledged while anyone
	// waited (timeout; the records may still be stored).
	RecordsFailed(agent string, records int, timeout bool)
}

// ObserveRecords has o told of every message of decision records a's
// WriteRecords stores or fails to store, from now on; nil: none.
func (a *Admitter) ObserveRecords(o RecordObserver) {
	if o == nil {
		a.audit.obs.Store(nil)
		return
	}
	a.audit.obs.Store(&o)
}

// recordAgent is the agent token of a record's subject, its last.
func recordAgent(subject string) string {
	return subject[strings.LastIndexByte(subject, '.')+1:]
}

// recordCall is one caller's records on their way.
type recordCall struct {
	start    time.Time
	msgs     []*nats.Msg
	deadline time.Time // zero: the caller has none
	done     chan error
	err      error // the first failure of a message holding its records
}

// WriteRecords publishes the decision records msgs (the JL_AUDIT
// messages of Records) and returns once JetStream has acknowledged every
// message holding them, or with an error naming what failed: the
// records' message was refused or not acknowledged within
// maxRecordWait, or ctx ended first (the records may still be stored). Under concurrency the records of
// several callers are written together (see auditWriter); each caller
// waits for its own.
func (a *Admitter) WriteRecords(ctx context.Context, msgs []*nats.Msg) error {
	if len(msgs) == 0 {
		return nil
	}
	c := &recordCall{start: time.Now(), msgs: msgs, done: make(chan error, 1)}
	c.deadline, _ = ctx.Deadline()
	w := a.audit
	w.mu.Lock()
	if w.busy {
		w.queue = append(w.queue, c)
		w.mu.Unlock()
		select {
		case err := <-c.done:
			return err
		case <-ctx.Done():
			return fmt.Errorf("admission: record %s: %w", describeRecords(msgs), ctx.Err())
		}
	}
	w.busy = true
	w.mu.Unlock()
	// Nothing in flight: published at once, each alone, and awaited
	// here, as any publish is.
	r := round{obs: w.observer()}
	holders, counts := []*recordCall{c}, []int{1}
	for _, m := range msgs {
		r.publish(w.js, m, 1, holders, counts)
	}
	// Bounded like a group's wait: records queued behind this write wait
	// for it, so an acknowledgement that never comes must not hold them
	// for longer than maxRecordWait, whatever ctx allows.
	wctx := ctx
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > w.wait {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, w.wait)
		defer cancel()
	}
	if !r.awaitCtx(wctx) {
		// Nobody waits for this write any more: what queued behind it
		// is written now, not after an acknowledgement that may never
		// come.
		r.gaveUp()
		if calls := w.next(); calls != nil {
			go w.run(group(w.js, w.observer(), calls), calls)
		}
		return fmt.Errorf("admission: record %s: %w", describeRecords(msgs), wctx.Err())
	}
	if calls := w.next(); calls != nil {
		go w.run(group(w.js, w.observer(), calls), calls)
	}
	return c.err
}

// next takes what queued while a round was in flight, or marks the
// writer idle when nothing did.
func (w *auditWriter) next() []*recordCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	calls := w.queue
	w.queue = nil
	if len(calls) == 0 {
		w.busy = false
	}
	return calls
}

// run awaits the round r of calls, answers them, and publishes what
// queued meanwhile, until nothing did.
func (w *auditWriter) run(r round, calls []*recordCall) {
	for {
		r.await(calls, w.wait)
		for _, c := range calls {
			c.done <- c.err
		}
		if calls = w.next(); calls == nil {
			return
		}
		r = group(w.js, w.observer(), calls)
	}
}

// observer is what the writer tells of its writes, or nil.
func (w *auditWriter) observer() RecordObserver {
	if o := w.obs.Load(); o != nil {
		return *o
	}
	return nil
}

// round is the messages of one write in flight.
type round struct {
	obs     RecordObserver // nil: none
	futures []jetstream.PubAckFuture
	holders [][]*recordCall // the calls whose records each future holds
	counts  [][]int         // how many records of each of those calls
	records []int           // how many records each future holds
}

func (r *round) publish(js jetstream.JetStream, m *nats.Msg, records int, holders []*recordCall, counts []int) {
	f, err := js.PublishMsgAsync(m)
	if err != nil {
		fail(holders, messageError(m, records, err))
		if r.obs != nil {
			r.obs.RecordsFailed(recordAgent(m.Subject), records, false)
		}
		return
	}
	r.futures = append(r.futures, f)
	r.holders = append(r.holders, holders)
	r.counts = append(r.counts, counts)
	r.records = append(r.records, records)
}

// stored tells the observer that future i of r was acknowledged with
// ack: stored, or, a duplicate (a lone record whose Nats-Msg-Id the
// stream holds already, as a retry's), dropped by the server as stored
// before, so waited for but not counted again.
func (r *round) stored(i int, ack *jetstream.PubAck) {
	if r.obs == nil {
		return
	}
	if ack == nil || !ack.Duplicate {
		r.obs.RecordsStored(recordAgent(r.futures[i].Msg().Subject), r.records[i])
	}
	now := time.Now()
	for k, c := range r.holders[i] {
		r.obs.RecordsWaited(r.counts[i][k], now.Sub(c.start))
	}
}

// failed fails the calls future i of r holds with err, and tells the
// observer.
func (r *round) failed(i int, err error, timeout bool) {
	fail(r.holders[i], messageError(r.futures[i].Msg(), r.records[i], err))
	if r.obs != nil {
		r.obs.RecordsFailed(recordAgent(r.futures[i].Msg().Subject), r.records[i], timeout)
	}
}

// gaveUp tells the observer that what r still awaits is not awaited
// any more.
func (r *round) gaveUp() {
	if r.obs == nil {
		return
	}
	for i, f := range r.futures {
		r.obs.RecordsFailed(recordAgent(f.Msg().Subject), r.records[i], true)
	}
}

// messageError is the failure err of the message m holding records
// decision records.
func messageError(m *nats.Msg, records int, err error) error {
	if records == 1 {
		return fmt.Errorf("admission: record a decision on %s: %w", m.Subject, err)
	}
	return fmt.Errorf("admission: record a message of %d decisions on %s: %w", records, m.Subject, err)
}

// describeRecords names the records msgs: how many, and on which
// subjects (which agents).
func describeRecords(msgs []*nats.Msg) string {
	var subjects []string
	for _, m := range msgs {
		if !slices.Contains(subjects, m.Subject) {
			subjects = append(subjects, m.Subject)
		}
	}
	const most = 4
	list := strings.Join(subjects[:min(len(subjects), most)], ", ")
	if len(subjects) > most {
		list += fmt.Sprintf(" and %d more", len(subjects)-most)
	}
	if len(msgs) == 1 {
		return "a decision on " + list
	}
	return fmt.Sprintf("%d decisions on %s", len(msgs), list)
}

// await waits for every acknowledgement of r, until the latest deadline
// of calls (or wait, maxRecordWait), and sets each call's error.
func (r *round) await(calls []*recordCall, wait time.Duration) {
	limit := time.Now().Add(wait)
	var latest time.Time
	if len(calls) == 0 {
		latest = limit
	}
	for _, c := range calls {
		if c.deadline.IsZero() {
			latest = limit
			break
		}
		latest = later(latest, c.deadline)
	}
	if latest.After(limit) {
		latest = limit
	}
	t := time.NewTimer(time.Until(latest))
	defer t.Stop()
	for i, f := range r.futures {
		select {
		case ack := <-f.Ok():
			r.stored(i, ack)
		case err := <-f.Err():
			r.failed(i, err, false)
		case <-t.C:
			// Nobody waits any more: the rest fail alike, each
			// caller with the message of its own records.
			for j := i; j < len(r.futures); j++ {
				r.failed(j, context.DeadlineExceeded, true)
			}
			return
		}
	}
}

// awaitCtx awaits every acknowledgement of r, setting the error of the
// calls each one holds, and reports false, r left with what it still
// awaits, if ctx ended first.
func (r *round) awaitCtx(ctx context.Context) bool {
	for i, f := range r.futures {
		select {
		case ack := <-f.Ok():
			r.stored(i, ack)
		case err := <-f.Err():
			r.failed(i, err, false)
		case <-ctx.Done():
			r.futures, r.holders, r.counts, r.records = r.futures[i:], r.holders[i:], r.counts[i:], r.records[i:]
			return false
		}
	}
	return true
}

func fail(calls []*recordCall, err error) {
	for _, c := range calls {
		if c.err == nil {
			c.err = err
		}
	}
}

// group publishes the records of calls, one message per subject and
// bound (MaxGroupRecords, groupBytes), in the order they came.
func group(js jetstream.JetStream, obs RecordObserver, calls []*recordCall) round {
	type part struct {
		msgs    []*nats.Msg
		bytes   int
		holders []*recordCall
		counts  []int
	}
	r := round{obs: obs}
	maxBytes := groupBytes(js)
	open := map[string]*part{}
	var order []string
	flush := func(subject string) {
		p := open[subject]
		delete(open, subject)
		m := p.msgs[0]
		if len(p.msgs) > 1 {
			m = nats.NewMsg(subject)
			m.Data = make([]byte, 0, p.bytes)
			for i, one := range p.msgs {
				if i > 0 {
					m.Data = append(m.Data, '\n')
				}
				m.Data = append(m.Data, one.Data...)
			}
			m.Header.Set(HeaderRecords, strconv.Itoa(len(p.msgs)))
		}
		r.publish(js, m, len(p.msgs), p.holders, p.counts)
	}
	for _, c := range calls {
		for _, m := range c.msgs {
			p := open[m.Subject]
			if p != nil && (len(p.msgs) == MaxGroupRecords || p.bytes+1+len(m.Data) > maxBytes) {
				flush(m.Subject)
				p = nil
			}
			if p == nil {
				p = &part{}
				open[m.Subject] = p
				order = append(order, m.Subject)
			}
			p.msgs = append(p.msgs, m)
			p.bytes += 1 + len(m.Data)
			if n := len(p.holders); n == 0 || p.holders[n-1] != c {
				p.holders = append(p.holders, c)
				p.counts = append(p.counts, 0)
			}
			p.counts[len(p.counts)-1]++
		}
	}
	for _, s := range order {
		if open[s] != nil {
			flush(s)
		}
	}
	return r
}
