package window_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/window"
)

// TestBuilderMatchesBuild grows random conversations entry by entry (and
// several at once), with and without masking, with steers and inputs
// arriving while calls wait, calls made again at the same turn, and
// compactions and changed notes between calls, and holds every request
// the Builder returns to BuildRequest of the same input, byte for byte;
// and every request returned before to what it was when returned.
func TestBuilderMatchesBuild(t *testing.T) {
	ref, _ := streams.NewSessionRef("mon", "s")
	for seed := range uint64(100) {
		r := rand.New(rand.NewPCG(seed, 7))
		var policy *policies.ContextPolicy
		if seed%3 != 0 {
			policy = &policies.ContextPolicy{MaskAfterTurns: 1 + r.IntN(3), Notes: seed%5 == 0}
		}
		def := &policies.Definition{Name: "mon", System: "watch", Context: policy}
		tools := []model.ToolSpec{{Name: "probe", Description: "probes", Schema: json.RawMessage(`{"type":"object"}`)}}
		st := record.NewState("mon", "s", time.Now())
		var live []record.Entry
		id, turn := uint64(0), 0
		add := func(e record.Entry) {
			id++
			e.ID, e.Turn = id, turn
			live = append(live, e)
		}
		var k window.Builder
		type sent struct {
			req  model.Request
			json []byte
		}
		var before []sent
		notes := "n"
		add(record.Entry{Kind: record.KindEvent, Text: "start <&>"})
		for step := range 60 {
			turn++
			add(record.Entry{Kind: record.KindAssistant, Text: fmt.Sprintf("answer %d", step)})
			calls := r.IntN(3)
			for c := range calls {
				add(record.Entry{Kind: record.KindToolCall, Name: "probe", CallID: fmt.Sprintf("c%d_%d", step, c), Args: json.RawMessage(`{"n":1}`)})
			}
			for c := range calls {
				if r.IntN(4) == 0 {
					add(record.Entry{Kind: record.KindEvent, Text: "arrived while the calls ran"})
				}
				if r.IntN(6) == 0 {
					add(record.Entry{Kind: record.KindControl, Name: "steer", Text: "steer"})
				}
				add(record.Entry{Kind: record.KindToolResult, Name: "probe", CallID: fmt.Sprintf("c%d_%d", step, c), Result: fmt.Sprintf("result %d of %d", c, step), IsError: r.IntN(5) == 0})
			}
			if calls == 0 || r.IntN(4) == 0 {
				add(record.Entry{Kind: record.KindUser, Text: "more"})
			}
			switch r.IntN(12) {
			case 0:
				// A compaction: a new window, the live context rebuilt.
				add(record.Entry{Kind: record.KindSummary, Text: "summary", Covers: &record.Span{From: 2, To: id}})
				st.Summary, st.HeadEnd, st.From, st.Summarised = id, 2, id, st.Summarised+1
				live = append([]record.Entry{live[0]}, live[len(live)-1])
			case 1:
				notes += "+"
			case 2:
				st.CalBytes, st.CalTokens = int64(1000+r.IntN(1000)), int64(300+r.IntN(100))
			}
			in := window.Input{Names: streams.Default(), Ref: ref, Def: def, State: st, Entries: live, Turn: turn + 1, Notes: notes, Tools: tools}
			if r.IntN(8) == 0 {
				// A call made again: the same turn once more.
				in.Turn = turn
			}
			got := k.Request(in)
			want := window.BuildRequest(in)
			if !reflect.DeepEqual(got, want) {
				gj, _ := json.Marshal(got)
				wj, _ := json.Marshal(want)
				t.Fatalf("seed %d step %d: the builder's context differs from BuildRequest's:\nbuilder %s\nbuild   %s", seed, step, gj, wj)
			}
			b, _ := json.Marshal(got.Request)
			before = append(before, sent{got.Request, b})
		}
		for i, s := range before {
			if b, _ := json.Marshal(s.req); string(b) != string(s.json) {
				t.Fatalf("seed %d: request %d changed after it was returned", seed, i)
			}
		}
		if k.Appended < 30 {
			t.Errorf("seed %d: %d of 60 requests went on from the one before, %d built whole", seed, k.Appended, k.Full)
		}
	}
}

// BenchmarkBuilder is the requests of the 50 model calls of a session
// of 50 turns, each built whole (BuildRequest) and each appended to the
// one before (Builder).
func BenchmarkBuilder(b *testing.B) {
	entries := turns(50)
	ins := make([]window.Input, 50)
	for i := range ins {
		ins[i] = input(b, nil, entries[:4*i+4])
		ins[i].Def = ins[0].Def
	}
	b.Run("BuildRequest", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, in := range ins {
				window.BuildRequest(in)
			}
		}
	})
	b.Run("Builder", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var k window.Builder
			for _, in := range ins {
				k.Request(in)
			}
		}
	})
}
