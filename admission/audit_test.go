package admission_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/streams"
)

// recordsOf decides a pull request event with id for reviewer and
// returns its decision records.
func recordsOf(t *testing.T, a *admission.Admitter, id string) []*nats.Msg {
	t.Helper()
	ev := ghEvent(id, "com.github.pull_request.opened", `{"number": 12, "repository": {"full_name": "octo/repo"}}`)
	ds, err := a.Decide(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	recs, dls, err := a.Records(ev, ds, nil)
	if err != nil || len(recs) != 1 || len(dls) != 0 {
		t.Fatalf("records of %s: %d, dead letters %d, %v", id, len(recs), len(dls), err)
	}
	return recs
}

// auditMsgs returns every message stored in JL_AUDIT.
func auditMsgs(t *testing.T, e env) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	s, err := e.js.Stream(ctx, e.names.StreamAudit())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("JL_AUDIT %d: %v", seq, err)
		}
		out = append(out, m)
	}
	return out
}

// A lone decision is written exactly as it always was: one message, the
// record's JSON object, its own Nats-Msg-Id, nothing else.
func TestLoneRecordIsOneMessageAsBefore(t *testing.T) {
	e := setup(t)
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	a := newAdmitter(t, e, func() time.Time { return at }, compile(t, reviewer))
	recs := recordsOf(t, a, "lone")
	want := `{"time":"2026-05-01T12:00:00Z","event":{"id":"lone","source":"https://github.com/octo/repo","type":"com.github.pull_request.opened","subject":"pull/12"},"agent":"reviewer","trigger":"pr","decision":"admitted","session":"octo/repo#12","rule":"reviewer/pr"}`
	if got := string(recs[0].Data); got != want {
		t.Fatalf("record:\n%s\nwant\n%s", got, want)
	}
	id := recs[0].Header.Get(nats.MsgIdHdr)
	if err := a.WriteRecords(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	got := auditMsgs(t, e)
	if len(got) != 1 {
		t.Fatalf("%d messages in JL_AUDIT, want 1", len(got))
	}
	m := got[0]
	if m.Subject != "jl.audit.admission.reviewer" || string(m.Data) != want {
		t.Errorf("stored %s %s", m.Subject, m.Data)
	}
	if m.Header.Get(nats.MsgIdHdr) != id || id == "" {
		t.Errorf("stored headers %v, want Nats-Msg-Id %q", m.Header, id)
	}
	for k := range m.Header {
		if !strings.HasPrefix(k, "Nats-") {
			// The others are the server's, added as it reads it.
			t.Errorf("stored header %s: %v", k, m.Header[k])
		}
	}
	// Written again (a retry), the server drops it as before.
	if err := a.WriteRecords(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	if n := len(auditMsgs(t, e)); n != 1 {
		t.Errorf("%d messages after a repeat, want 1", n)
	}
}

// Records that arrive while a write is in flight are written together,
// one message per agent holding one record a line, and every caller
// returns once the message holding its record is stored.
func TestConcurrentRecordsAreWrittenTogether(t *testing.T) {
	e := setup(t)
	a := newAdmitter(t, e, nil, compile(t, reviewer))
	const callers = 64
	grouped, total := false, 0
	for burst := 0; burst < 5 && !grouped; burst++ {
		recs := make([][]*nats.Msg, callers)
		for i := range recs {
			recs[i] = recordsOf(t, a, fmt.Sprintf("b%d-%d", burst, i))
		}
		before := len(auditMsgs(t, e))
		release := make(chan struct{})
		errs := make(chan error, callers)
		var wg sync.WaitGroup
		for i := range recs {
			wg.Go(func() {
				<-release
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				errs <- a.WriteRecords(ctx, recs[i])
			})
		}
		close(release)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		total += callers
		msgs := auditMsgs(t, e)
		grouped = len(msgs)-before < callers
		for _, m := range msgs[before:] {
			lines := bytes.Count(m.Data, []byte("\n")) + 1
			n := m.Header.Get(admission.HeaderRecords)
			switch {
			case lines == 1 && (n != "" || m.Header.Get(nats.MsgIdHdr) == ""):
				t.Errorf("a message of one record has headers %v", m.Header)
			case lines > 1 && (n != strconv.Itoa(lines) || m.Header.Get(nats.MsgIdHdr) != ""):
				t.Errorf("a message of %d records has headers %v", lines, m.Header)
			case lines > admission.MaxGroupRecords:
				t.Errorf("a message of %d records", lines)
			}
		}
	}
	if !grouped {
		t.Fatalf("5 bursts of %d concurrent writes were each stored one record a message", callers)
	}
	got, err := admission.Recent(context.Background(), e.js, e.names, "reviewer", time.Time{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, r := range got {
		seen[r.Event.ID]++
		if r.Outcome != admission.Admitted || r.Rule != "reviewer/pr" || r.Seq == 0 {
			t.Errorf("record %+v", r)
		}
	}
	if len(got) != total || len(seen) != total {
		t.Fatalf("%d records of %d events read, want %d", len(got), len(seen), total)
	}
}

// A write that fails fails every caller whose record it held, and the
// writer goes on once the stream is back.
func TestFailedWriteFailsEveryCaller(t *testing.T) {
	e := setup(t)
	a := newAdmitter(t, e, nil, compile(t, reviewer))
	ctx := context.Background()
	if err := e.js.DeleteStream(ctx, e.names.StreamAudit()); err != nil {
		t.Fatal(err)
	}
	const callers = 32
	recs := make([][]*nats.Msg, callers)
	for i := range recs {
		recs[i] = recordsOf(t, a, fmt.Sprint("f", i))
	}
	release := make(chan struct{})
	errs := make(chan error, callers)
	var wg sync.WaitGroup
	for i := range recs {
		wg.Go(func() {
			<-release
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs <- a.WriteRecords(ctx, recs[i])
		})
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, jetstream.ErrNoStreamResponse) && !errors.Is(err, nats.ErrNoResponders) {
			t.Errorf("write without JL_AUDIT: %v, want no stream response", err)
		}
	}
	if _, err := streams.Provision(ctx, e.js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := a.WriteRecords(ctx, recordsOf(t, a, "after")); err != nil {
		t.Fatalf("write once JL_AUDIT is back: %v", err)
	}
}

// A caller's context bounds its wait for the message holding its record.
func TestRecordWaitEndsWithContext(t *testing.T) {
	e := setup(t)
	a := newAdmitter(t, e, nil, compile(t, reviewer))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.WriteRecords(ctx, recordsOf(t, a, "gone")); !errors.Is(err, context.Canceled) {
		t.Fatalf("write with an ended context: %v", err)
	}
	// The writer is not left busy by it.
	c2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	if err := a.WriteRecords(c2, recordsOf(t, a, "next")); err != nil {
		t.Fatal(err)
	}
}

// Recent reads messages of one record (as every message was before
// records were grouped) and of several, skips a line that is not a
// record while keeping the others, and shows a decision stored twice
// once.
func TestRecentReadsOneAndManyRecordsAMessage(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	at := time.Now().UTC().Truncate(time.Second)
	rec := func(id string, outcome admission.Outcome, trigger string, t0 time.Time) []byte {
		b, err := json.Marshal(admission.Record{Time: t0, Event: admission.EventInfo{ID: id, Source: "s", Type: "t"},
			Decision: admission.Decision{Agent: "reviewer", Trigger: trigger, Outcome: outcome}})
		if err != nil {
			panic(err)
		}
		return b
	}
	pub := func(data []byte) {
		t.Helper()
		if _, err := e.js.Publish(ctx, "jl.audit.admission.reviewer", data); err != nil {
			t.Fatal(err)
		}
	}
	pub(rec("old", admission.Admitted, "pr", at))
	pub(bytes.Join([][]byte{
		rec("a", admission.Admitted, "pr", at),
		[]byte(`{"time": not a record`),
		rec("b", admission.RateLimited, "pr", at),
		rec("old", admission.Admitted, "pr", at.Add(time.Second)), // stored twice
	}, []byte("\n")))
	pub(append(rec("c", admission.Admitted, "pr", at), '\n')) // a trailing newline
	pub(rec("b", admission.Admitted, "pr", at))               // another outcome: another decision
	pub(rec("old", admission.Admitted, "pr", at.Add(time.Hour)))
	got, err := admission.Recent(ctx, e.js, e.names, "", at.Add(-time.Minute), 100)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range got {
		ids = append(ids, r.Event.ID+"/"+string(r.Outcome))
	}
	want := []string{"old/admitted", "a/admitted", "b/rate_limited", "c/admitted", "b/admitted", "old/admitted"}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("records %v, want %v", ids, want)
	}
	if got[1].Seq != got[2].Seq || got[1].Seq == got[0].Seq {
		t.Errorf("sequences %d %d %d: the records of one message share theirs", got[0].Seq, got[1].Seq, got[2].Seq)
	}
	// The newest n are the newest n records, not messages.
	if got, _ := admission.Recent(ctx, e.js, e.names, "reviewer", at.Add(-time.Minute), 2); len(got) != 2 || got[0].Event.ID != "b" || got[1].Event.ID != "old" {
		t.Errorf("newest two: %+v", got)
	}
}
