package policies

import (
	"testing"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// countingList is a list that counts the elements its iterators return.
type countingList struct {
	traits.Lister
	visited *uint64
}

func (l countingList) Iterator() traits.Iterator {
	return countingIterator{Iterator: l.Lister.Iterator(), visited: l.visited}
}

type countingIterator struct {
	traits.Iterator
	visited *uint64
}

func (it countingIterator) Next() ref.Val {
	*it.visited++
	return it.Iterator.Next()
}

// TestEqualityCostWalksTheSmallerOperand: the charge of an equality is
// counted by walking no more of either operand than the one holding fewer
// values, so comparing a large list with a scalar or a short list costs
// what it is charged, in a loop as well: counting the large list up to the
// cost limit for a charge of one let a rule such as
// list.exists(y, event.data.big == 1) run for minutes.
func TestEqualityCostWalksTheSmallerOperand(t *testing.T) {
	elems := make([]int64, 1_000_000)
	for _, other := range []ref.Val{types.Int(1), types.String("x"), types.DefaultTypeAdapter.NativeToValue([]int64{1, 2}),
		types.DefaultTypeAdapter.NativeToValue(map[string]int64{"k": 1})} {
		var visited uint64
		big := countingList{Lister: types.DefaultTypeAdapter.NativeToValue(elems).(traits.Lister), visited: &visited}
		for _, args := range [][2]ref.Val{{big, other}, {other, big}} {
			c, ok := equalityCost(args[0], args[1])
			want := deepCount(other, CostLimit+1)
			if !ok || c != want {
				t.Errorf("%v against a list of %d: charged %d, %v; want %d", other, len(elems), c, ok, want)
			}
		}
		if visited > 64 {
			t.Errorf("%v against a list of %d: %d of its elements visited to charge the comparison", other, len(elems), visited)
		}
	}
	// Between two large lists the charge is the values of the smaller,
	// and past the cost limit it is over it.
	a := types.DefaultTypeAdapter.NativeToValue(make([]int64, 70_000))
	b := types.DefaultTypeAdapter.NativeToValue(make([]int64, 2*CostLimit))
	if c, _ := equalityCost(a, b); c != 70_001 {
		t.Errorf("lists of 70000 and %d: charged %d, want 70001", 2*CostLimit, c)
	}
	if c, _ := equalityCost(b, b); c <= CostLimit {
		t.Errorf("lists of %d: charged %d, want over the limit", 2*CostLimit, c)
	}
}
