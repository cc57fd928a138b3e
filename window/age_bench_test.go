package window_test

import (
	"fmt"
	"testing"

	"github.com/jetloop/jetloop/model"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/window"
)

// BenchmarkPrepareOverAge measures what preparing one model call costs
// (selecting the live entries by the state's window, building the
// request, deciding whether to compact) in sessions of 250 to 4,000
// turns: under a context policy that has compacted, the live context is
// the head, the summary and the kept tail, and the cost stays flat; the
// same sessions without compaction build from every entry, and the cost
// grows with the age. entries/op is what the call was built from.
func BenchmarkPrepareOverAge(b *testing.B) {
	first, last := 1, 4
	policy := &policies.ContextPolicy{MaskAfterTurns: 4, CompactAtTokens: 8000, KeepFirstTurns: &first, KeepLastTurns: &last}
	for _, compacted := range []bool{true, false} {
		for _, age := range []int{250, 1000, 4000} {
			name := fmt.Sprintf("compacted=%v/turns=%d", compacted, age)
			b.Run(name, func(b *testing.B) {
				all := turns(age)
				in := input(b, policy, all)
				if compacted {
					// The state after the compactions of everything
					// between the head and the last turns (in parts, as
					// many as that takes), as the worker keeps it.
					for {
						var live []record.Entry
						for _, sp := range in.State.Live() {
							live = append(live, all[sp.From-1:sp.To]...)
						}
						in.Entries = live
						plan, ok := window.Plan(in)
						if !ok {
							break
						}
						sum := window.SummaryEntry(in.State.NextEntry, in.State.Turns, plan, model.Response{Text: "all fine"})
						all = append(all, sum)
						st := in.State
						st.HeadEnd, st.Summary, st.From, st.Summarised, st.NextEntry = plan.HeadEnd, sum.ID, plan.Keep, plan.Answers, sum.ID+1
						in.State = st
					}
					if in.State.Summary == 0 {
						b.Fatal("no compaction")
					}
				} else {
					in.Def = &policies.Definition{Name: "mon", System: "watch"}
				}
				var n int
				for b.Loop() {
					var live []record.Entry
					for _, sp := range in.State.Live() {
						live = append(live, all[sp.From-1:sp.To]...)
					}
					in.Entries = live
					c := window.BuildRequest(in)
					window.Due(in, c)
					n = len(live)
				}
				b.ReportMetric(float64(n), "entries/op")
			})
		}
	}
}
