package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/api"
	"github.com/jetloop/jetloop/cli"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
)

// fillIndex writes n sessions into the status index, one in every
// n/blocked of them blocked, the rest idle or done, as workers would.
func fillIndex(tb testing.TB, js jetstream.JetStream, names streams.Names, n, blocked int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	every := n / blocked
	since := time.Now().UTC().Add(-time.Hour)
	var futures []jetstream.PubAckFuture
	for i := range n {
		ref, _ := streams.NewSessionRef(fmt.Sprintf("agent-%d", i%10), fmt.Sprintf("session-%06d", i))
		st := record.StatusDone
		switch {
		case i%every == 0:
			st = record.StatusBlocked
		case i%3 == 0:
			st = record.StatusIdle
		}
		s := record.Summary{Agent: ref.Agent, Session: ref.Session, Status: st, Since: since.Add(time.Duration(i) * time.Millisecond), Turns: 3, Tokens: 1200}
		if st == record.StatusBlocked {
			s.WaitingFor = fmt.Sprintf("call_%d", i)
		}
		b, _ := json.Marshal(s)
		key, _ := names.StatusKey(string(st), ref)
		f, err := js.PublishAsync(streams.KVSubject(names.BucketStatus(), key), b)
		if err != nil {
			tb.Fatal(err)
		}
		futures = append(futures, f)
		if len(futures) == 4000 {
			wait(tb, ctx, futures)
			futures = futures[:0]
		}
	}
	wait(tb, ctx, futures)
}

func wait(tb testing.TB, ctx context.Context, fs []jetstream.PubAckFuture) {
	for _, f := range fs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			tb.Fatal(err)
		case <-ctx.Done():
			tb.Fatal(ctx.Err())
		}
	}
}

// BenchmarkStatusBlocked lists the blocked sessions among 100,000 (1,000
// of them) through the API, against the raw JetStream operation the best
// implementation needs (an ordered consumer of the index's blocked keys),
// and pages through all 100,000 through the API and with `jetloop status`
// (every session, then the blocked ones), as a user runs it.
//
//	go test ./api -run '^$' -bench BenchmarkStatusBlocked -benchtime 5x
func BenchmarkStatusBlocked(b *testing.B) {
	const total, blocked = 100_000, 1_000
	h := start(b, api.Config{})
	fillIndex(b, h.js, h.names, total, blocked)
	ctx := context.Background()

	raw := func() int {
		filter, _ := h.names.StatusKeys(string(record.StatusBlocked), "")
		cons, err := h.js.OrderedConsumer(ctx, streams.KVStream(h.names.BucketStatus()), jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{streams.KVSubject(h.names.BucketStatus(), filter)}})
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for got < blocked {
			batch, err := cons.Fetch(blocked-got, jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			for range batch.Messages() {
				got++
			}
			if err := batch.Error(); err != nil && err != nats.ErrTimeout {
				b.Fatal(err)
			}
		}
		return got
	}
	var rawTotal, apiTotal time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		resp, err := h.client.Status(ctx, api.StatusRequest{Status: string(record.StatusBlocked)})
		apiTotal += time.Since(t0)
		if err != nil || len(resp.Sessions) != blocked || resp.Next != 0 {
			b.Fatalf("blocked: %d sessions, next %d, %v", len(resp.Sessions), resp.Next, err)
		}
		t0 = time.Now()
		if n := raw(); n != blocked {
			b.Fatalf("raw: %d", n)
		}
		rawTotal += time.Since(t0)
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(apiTotal.Seconds()*1000/n, "api-ms/list")
	b.ReportMetric(rawTotal.Seconds()*1000/n, "raw-ms/list")
	b.ReportMetric(rawTotal.Seconds()/apiTotal.Seconds(), "raw/api")

	t0 := time.Now()
	seen, pages := 0, 0
	req := api.StatusRequest{}
	for {
		resp, err := h.client.Status(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		seen += len(resp.Sessions)
		pages++
		if resp.Next == 0 {
			break
		}
		req.Cursor = resp.Next
	}
	if seen != total {
		b.Fatalf("paged through %d sessions of %d", seen, total)
	}
	b.ReportMetric(time.Since(t0).Seconds(), "all-pages-s")
	b.ReportMetric(float64(pages), "pages")

	// `jetloop status` as a user runs it: every session, a page at a time,
	// and the blocked ones.
	jetloop := func(args ...string) (int, time.Duration) {
		var out, errb bytes.Buffer
		t0 := time.Now()
		code := cli.Main(ctx, append([]string{"status", "--server", h.nc.ConnectedUrl()}, args...), &out, &errb)
		d := time.Since(t0)
		if code != 0 {
			b.Fatalf("jetloop status %v: exit %d: %s", args, code, errb.String())
		}
		return strings.Count(out.String(), "\n") - 1, d // less the header
	}
	listed, d := jetloop()
	if listed != total {
		b.Fatalf("jetloop status listed %d sessions of %d", listed, total)
	}
	b.ReportMetric(d.Seconds(), "cli-all-s")
	listed, d = jetloop("--status", "blocked")
	if listed != blocked {
		b.Fatalf("jetloop status --status blocked listed %d sessions of %d", listed, blocked)
	}
	b.ReportMetric(d.Seconds()*1000, "cli-blocked-ms")
}

// BenchmarkShowAmongSessions shows a session that delegated to two
// children among 20,000 unrelated sessions through the API, against the
// raw JetStream operations the best implementation needs (its state, its
// child keys, its children's states) and against one listing of every
// state (what a show that looked its children up in a listing would
// read).
//
//	go test ./api -run '^$' -bench BenchmarkShowAmongSessions -benchtime 20x
func BenchmarkShowAmongSessions(b *testing.B) {
	const others = 20_000
	h := start(b, api.Config{})
	ctx := context.Background()
	now := time.Now().UTC()
	var futures []jetstream.PubAckFuture
	for i := range others {
		ref, _ := streams.NewSessionRef(fmt.Sprintf("agent-%d", i%10), fmt.Sprintf("session-%06d", i))
		st := record.NewState(ref.Agent, ref.Session, now)
		data, _ := json.Marshal(st)
		f, err := h.js.PublishAsync(streams.KVSubject(h.names.BucketSessions(), h.names.StateKey(ref)), data)
		if err != nil {
			b.Fatal(err)
		}
		if futures = append(futures, f); len(futures) == 4000 {
			wait(b, ctx, futures)
			futures = futures[:0]
		}
	}
	wait(b, ctx, futures)
	store, err := record.Open(ctx, h.js, h.names)
	if err != nil {
		b.Fatal(err)
	}
	lead, _ := streams.NewSessionRef("lead", "s")
	if _, err := store.Create(ctx, lead, record.NewState(lead.Agent, lead.Session, now)); err != nil {
		b.Fatal(err)
	}
	for _, call := range []string{"call_0", "call_1"} {
		child, _ := streams.NewSessionRef("rev", events.ChildSession(lead.Agent, lead.Session, call))
		st := record.NewState(child.Agent, child.Session, now)
		st.Delegation = &record.Delegation{Parent: lead.String(), CallID: call}
		if _, err := store.Create(ctx, child, st); err != nil {
			b.Fatal(err)
		}
		if err := store.NoteChild(ctx, lead, child, call); err != nil {
			b.Fatal(err)
		}
	}
	raw := func() int {
		if _, _, err := store.Load(ctx, lead); err != nil {
			b.Fatal(err)
		}
		refs, err := record.ChildRefs(ctx, h.js, h.names, lead)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range refs {
			if _, _, err := store.Load(ctx, r); err != nil {
				b.Fatal(err)
			}
		}
		return len(refs)
	}
	var rawTotal, apiTotal time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		sh, err := h.client.Show(ctx, api.ShowRequest{Agent: lead.Agent, Session: lead.Session})
		apiTotal += time.Since(t0)
		if err != nil || len(sh.Children) != 2 {
			b.Fatalf("show: %+v, %v", sh.Children, err)
		}
		t0 = time.Now()
		if n := raw(); n != 2 {
			b.Fatalf("raw: %d children", n)
		}
		rawTotal += time.Since(t0)
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(apiTotal.Seconds()*1000/n, "api-ms/show")
	b.ReportMetric(rawTotal.Seconds()*1000/n, "raw-ms/show")
	b.ReportMetric(rawTotal.Seconds()/apiTotal.Seconds(), "raw/api")
	t0 := time.Now()
	if all, err := record.List(ctx, h.js, h.names); err != nil || len(all) != others+3 {
		b.Fatalf("list: %d, %v", len(all), err)
	}
	b.ReportMetric(time.Since(t0).Seconds()*1000, "list-all-ms")
}
