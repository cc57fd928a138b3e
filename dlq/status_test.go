package dlq_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/dlq"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

// A worker's input whose sender set a Status header, dead-lettered, is
// listed and shown like any letter: listed headers only, a letter
// keeping Status: 503 read as no responders, and a 404 or 408 as the end
// of the listing. A letter stored with one before (its Status not moved
// aside) is still shown and listed.
func TestLettersOfInputsWithAStatus(t *testing.T) {
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s.ClientURL())
	ctx := context.Background()
	names := streams.Default()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	var want []uint64
	for i, status := range []string{"503", "404", "408", "100", ""} {
		h := nats.Header{"Ce-Id": {"e"}}
		if status != "" {
			h.Set("Status", status)
		}
		m, err := dlq.New(names, dlq.NotCloudEvent, "not a CloudEvent", "jl.in.demo.s1", uint64(i+1), h, nil)
		if err != nil {
			t.Fatal(err)
		}
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, ack.Sequence)
	}
	got, _, err := dlq.List(ctx, js, names, dlq.Filter{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("listed %d letters (%+v), want %d", len(got), got, len(want))
	}
	for i, l := range got {
		if l.Seq != want[i] || l.OrigSeq != uint64(i+1) {
			t.Fatalf("letter %d: seq %d of %d, want %d of %d", i, l.Seq, l.OrigSeq, want[i], i+1)
		}
	}
	if l, err := dlq.Get(ctx, js, names, want[0]); err != nil || l.Header.Get(dlq.OrigPrefix+"Status") != "503" {
		t.Fatalf("show letter %d: %+v, %v; want its Status kept aside", want[0], l, err)
	}

	// As stored before: the sender's Status on the letter itself.
	subj, err := names.DLQ(string(dlq.NotCloudEvent))
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(subj)
	m.Header.Set("Status", "503")
	m.Header.Set(dlq.HeaderReason, string(dlq.NotCloudEvent))
	m.Header.Set(dlq.HeaderSubject, "jl.in.demo.s1")
	old, err := js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	l, err := dlq.Get(ctx, js, names, old.Sequence)
	if err != nil || l.Seq != old.Sequence || l.Subject != "jl.in.demo.s1" || l.Header.Get("Status") != "503" {
		t.Fatalf("show letter %d stored with a Status: %+v, %v", old.Sequence, l, err)
	}
	if _, err := dlq.Get(ctx, js, names, old.Sequence+1); !errors.Is(err, dlq.ErrNotFound) {
		t.Fatalf("show of no letter: %v, want %v", err, dlq.ErrNotFound)
	}

	// Listed too, with one stored before that ends a listing (404), and
	// a letter after them: whole, and a page at a time.
	m.Header.Set("Status", "404")
	older, err := js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, old.Sequence, older.Sequence)
	m, err = dlq.New(names, dlq.NotCloudEvent, "not a CloudEvent", "jl.in.demo.s1", 9, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	after, err := js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, after.Sequence)
	for _, limit := range []int{0, 2} {
		var seqs []uint64
		for from := uint64(0); ; {
			page, next, err := dlq.List(ctx, js, names, dlq.Filter{From: from, Limit: limit})
			if err != nil {
				t.Fatalf("list from %d, limit %d, with letters stored with a Status: %v", from, limit, err)
			}
			for _, l := range page {
				seqs = append(seqs, l.Seq)
			}
			if next == 0 || len(seqs) > len(want) {
				break
			}
			from = next
		}
		if fmt.Sprint(seqs) != fmt.Sprint(want) {
			t.Fatalf("listed by %d: %v, want %v", limit, seqs, want)
		}
	}
}
