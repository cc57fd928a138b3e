package policies

import (
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/overloads"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
)

// CEL charges `==` and `!=` for the sizes of their operands, so a list or
// a map compared with another costs a tenth of its elements (entries)
// however deep they go: two copies of a large event body compare every
// value inside them for a charge of one. An equality with a list or a map
// is charged instead for the values it may compare (equalityCost), and
// stops at the cost limit before comparing when that alone passes it.

// deepCount is how many values v holds, itself included, at any depth:
// each element of a list, each key and value of a map. It stops counting
// at limit.
func deepCount(v ref.Val, limit uint64) uint64 {
	n := uint64(1)
	var visit func(v ref.Val)
	visit = func(v ref.Val) {
		if n >= limit {
			return
		}
		switch x := v.(type) {
		case traits.Mapper:
			for it := x.Iterator(); n < limit && it.HasNext() == types.True; {
				k := it.Next()
				n += 2
				visit(k)
				if val, ok := x.Find(k); ok {
					visit(val)
				}
			}
		case traits.Lister:
			for it := x.Iterator(); n < limit && it.HasNext() == types.True; {
				n++
				visit(it.Next())
			}
		}
	}
	visit(v)
	return min(n, limit)
}

func isAggregate(v ref.Val) bool {
	switch v.(type) {
	case traits.Mapper, traits.Lister:
		return true
	}
	return false
}

// equalityCost is the charge of comparing a with b when either is a list
// or a map: the values of the one holding fewer, which bounds the values
// the comparison visits (it stops at the first difference, and values of
// different kinds differ at once). It is false for other operands, which
// CEL charges itself.
//
// Both operands are counted up to a limit that doubles until one of them
// holds fewer, so counting visits a few times the values charged, not the
// larger operand's: a large list compared with a scalar in a loop would
// otherwise be walked on every iteration for a charge of one.
func equalityCost(a, b ref.Val) (uint64, bool) {
	if !isAggregate(a) && !isAggregate(b) {
		return 0, false
	}
	for limit := uint64(16); ; limit *= 2 {
		na, nb := deepCount(a, limit), deepCount(b, limit)
		if na < limit || nb < limit || limit > CostLimit {
			return min(na, nb), true
		}
	}
}

// equalityOptions are the program options of `==` and `!=`: a comparison
// with a list or a map stops at the cost limit before comparing when its
// charge alone passes it, and the cost tracker charges it equalityCost.
func equalityOptions() []cel.ProgramOption {
	bounded := func(i interpreter.InterpretableV2) (interpreter.InterpretableV2, error) {
		call, ok := i.(interpreter.InterpretableCall)
		if !ok || len(call.Args()) != 2 {
			return i, nil
		}
		var negate bool
		switch {
		case call.Function() == operators.Equals && call.OverloadID() == overloads.Equals:
		case call.Function() == operators.NotEquals && call.OverloadID() == overloads.NotEquals:
			negate = true
		default:
			return i, nil
		}
		return interpreter.NewCall(call.ID(), call.Function(), call.OverloadID(), call.Args(), func(args ...ref.Val) ref.Val {
			if len(args) != 2 {
				return types.NoSuchOverloadErr()
			}
			if c, ok := equalityCost(args[0], args[1]); ok && c > CostLimit {
				costLimitExceeded()
			}
			eq := types.Equal(args[0], args[1])
			if negate {
				return types.Bool(eq != types.True)
			}
			return eq
		}), nil
	}
	charge := func(args []ref.Val, _ ref.Val) *uint64 {
		if len(args) != 2 {
			return nil
		}
		c, ok := equalityCost(args[0], args[1])
		if !ok {
			return nil
		}
		return &c
	}
	return []cel.ProgramOption{
		cel.CustomDecoratorV2(bounded),
		cel.CostTrackerOptions(
			interpreter.OverloadCostTracker(overloads.Equals, charge),
			interpreter.OverloadCostTracker(overloads.NotEquals, charge)),
	}
}

// CEL charges `x in list` the list's size, and nothing for the values an
// element compares, and charges one when the list is typed dyn (an event's
// field), which it plans under no overload: a loop testing membership in a
// large list of the event ran for seconds within the cost limit. So `in`
// over a list is charged membershipCost, and stops at the cost limit before
// comparing when that alone passes it.

// inDynOverload names the overload of `in` that membershipCost charges;
// calls CEL plans under in_list, or under none, are given it.
const inDynOverload = "jetloop_in_list"

// membershipCost is the charge of looking for x in c when c is a list:
// for each element, one, or the values of x or of the element, whichever
// holds fewer (what an equality with it is charged). It is false for
// other containers, which CEL charges itself.
func membershipCost(x, c ref.Val) (uint64, bool) {
	list, ok := c.(traits.Lister)
	if !ok {
		return 0, false
	}
	size, ok := list.Size().(types.Int)
	if !ok || size < 0 {
		return 0, false
	}
	if !isAggregate(x) {
		return uint64(size), true
	}
	var cost uint64
	for it := list.Iterator(); cost <= CostLimit && it.HasNext() == types.True; {
		c, _ := equalityCost(x, it.Next())
		cost = satAdd(cost, max(c, 1))
	}
	return max(cost, 1), true
}

// membershipOptions are the program options of `in`: a lookup in a list
// stops at the cost limit before comparing when its charge alone passes
// it, and the cost tracker charges it membershipCost.
func membershipOptions() []cel.ProgramOption {
	bounded := func(i interpreter.InterpretableV2) (interpreter.InterpretableV2, error) {
		call, ok := i.(interpreter.InterpretableCall)
		if !ok || call.Function() != operators.In || len(call.Args()) != 2 ||
			(call.OverloadID() != "" && call.OverloadID() != overloads.InList) {
			return i, nil
		}
		return interpreter.NewCall(call.ID(), call.Function(), inDynOverload, call.Args(), func(args ...ref.Val) ref.Val {
			if len(args) != 2 {
				return types.NoSuchOverloadErr()
			}
			if c, ok := membershipCost(args[0], args[1]); ok && c > CostLimit {
				costLimitExceeded()
			}
			// As the standard library's `in`.
			if args[1].Type().HasTrait(traits.ContainerType) {
				return args[1].(traits.Container).Contains(args[0])
			}
			return types.ValOrErr(args[1], "no such overload")
		}), nil
	}
	charge := func(args []ref.Val, _ ref.Val) *uint64 {
		c := uint64(1)
		if len(args) == 2 {
			if n, ok := membershipCost(args[0], args[1]); ok {
				c = n
			}
		}
		return &c
	}
	return []cel.ProgramOption{
		cel.CustomDecoratorV2(bounded),
		cel.CostTrackerOptions(interpreter.OverloadCostTracker(inDynOverload, charge)),
	}
}
