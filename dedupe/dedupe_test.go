package dedupe_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/streams"
)

func TestMsgIDNamesEventAndSubject(t *testing.T) {
	e := event.New()
	e.SetID("guid-1")
	e.SetSource("https://github.com/octo/repo")
	e.SetType("com.github.push")
	other := e.Clone()
	other.SetID("guid-2")
	tests := []struct {
		name string
		a, b string
		same bool
	}{
		{name: "same event, same subject", a: dedupe.MsgID(e, "jl.in.a.s"), b: dedupe.MsgID(e.Clone(), "jl.in.a.s"), same: true},
		{name: "same event, other agent", a: dedupe.MsgID(e, "jl.in.a.s"), b: dedupe.MsgID(e, "jl.in.b.s")},
		{name: "other event", a: dedupe.MsgID(e, "jl.in.a.s"), b: dedupe.MsgID(other, "jl.in.a.s")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if (tt.a == tt.b) != tt.same {
				t.Fatalf("%q vs %q: same=%v, want %v", tt.a, tt.b, tt.a == tt.b, tt.same)
			}
		})
	}
}

func TestStoreRemembersForTTL(t *testing.T) {
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s.ClientURL())
	ctx := context.Background()
	if _, err := streams.Provision(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	st, err := dedupe.New(ctx, js, dedupe.Config{Names: streams.Default(), TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const src, id = "https://github.com/octo/repo", "72d3162e-cc78-11e3-81ab-4c9367dc0958"
	if _, seen, err := st.Seen(ctx, src, id); err != nil || seen {
		t.Fatalf("seen before record: %v %v", seen, err)
	}
	if err := st.Record(ctx, src, id, []byte(`{"admitted":[]}`)); err != nil {
		t.Fatal(err)
	}
	// A second record (a concurrent delivery that lost the race) is fine.
	if err := st.Record(ctx, src, id, nil); err != nil {
		t.Fatalf("second record: %v", err)
	}
	ent, seen, err := st.Seen(ctx, src, id)
	if err != nil || !seen || string(ent.Outcome) != `{"admitted":[]}` {
		t.Fatalf("seen after record: %+v %v %v", ent, seen, err)
	}
	if _, seen, _ := st.Seen(ctx, "https://github.com/other/repo", id); seen {
		t.Fatal("same id from another source counted as seen")
	}
	// The key expires with its TTL; nothing announces that, so poll.
	natstest.WaitFor(t, 10*time.Second, func() error {
		if _, seen, err := st.Seen(ctx, src, id); err != nil || seen {
			return errors.New("still remembered")
		}
		return nil
	})
}
