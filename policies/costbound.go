package policies

import (
	"unicode/utf8"

	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/overloads"
	"github.com/google/cel-go/common/types"
)

// An expression without a comprehension evaluates each of its nodes at
// most once, so its runtime cost (what the interpreter's cost tracker
// adds up against CostLimit) is bounded by a sum over its nodes of what
// each can cost given the sizes of the values it sees. costBound computes
// that bound from a bound on the inputs: n, at least the size (in CEL's
// terms: characters, bytes, elements, entries) of every string, bytes,
// list and map the variables hold at any depth. Where the bound is within
// CostLimit for an input, the cost limit cannot stop its evaluation, and
// the program is evaluated without the tracker (Expr.fast).
//
// The checker's own estimate (cel.Env.EstimateCost) is not such a bound:
// it charges nothing for a field selected of a dyn value, which the
// tracker charges one for, and a call with several candidate overloads
// takes the result size of only those that declare one. So the bound is
// computed here, over a closed set of operators and functions whose
// runtime cost the tracker computes from its operands' sizes alone
// (interpreter.CostTracker.costCall): anything else, the extension
// libraries' string functions among them (they bring cost trackers of
// their own), leaves an expression without a bound, always tracked.
// `matches` is charged by the tracker as matchCost (regex.go) has it, for
// the size of the pattern's compiled program, with compileCost for a
// pattern of the input, and bounded here the same.
//
// Every node's share is rounded up and given a margin over the tracker's
// charge, so the bound stays above it when an optimisation folds a node
// away or the interpreter charges a node it plans in two steps.

// costCap saturates the bound's arithmetic, far beyond CostLimit.
const costCap = 1 << 62

func satAdd(a, b uint64) uint64 {
	if a >= costCap || b >= costCap || a+b >= costCap {
		return costCap
	}
	return a + b
}

func satMul(a, b uint64) uint64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a >= costCap/b {
		return costCap
	}
	return a * b
}

// tenth is the tracker's ceil(x * 0.1) (common.StringTraversalCostFactor),
// plus one for the float rounding it is computed with.
func tenth(x uint64) uint64 { return satAdd(x/10, 2) }

// literalString returns e's value when it is a string literal.
func literalString(e ast.Expr) (string, bool) {
	if e.Kind() != ast.LiteralKind {
		return "", false
	}
	s, ok := e.AsLiteral().(types.String)
	return string(s), ok
}

// nodeBound is what one node can cost, with its subtree, and how large
// its value and anything within it can be.
type nodeBound struct {
	cost uint64
	// size bounds the value's size (1 for a scalar); within bounds the
	// size of any value inside it (a list's elements, a map's keys and
	// values, at any depth), and is at least size.
	size, within uint64
	// deep bounds the values it holds at any depth, itself included
	// (deepCount): an input's are unknown (costCap).
	deep uint64
}

func scalar(cost uint64) nodeBound { return nodeBound{cost: cost, size: 1, within: 1, deep: 1} }

// costBound returns the bound of e's cost over inputs bounded by n, and
// false when e holds what it cannot bound.
func costBound(e ast.Expr, n uint64) (uint64, bool) {
	b, ok := boundOf(e, n)
	return b.cost, ok
}

func boundOf(e ast.Expr, n uint64) (nodeBound, bool) {
	switch e.Kind() {
	case ast.LiteralKind:
		switch v := e.AsLiteral().(type) {
		case types.String:
			s := uint64(utf8.RuneCountInString(string(v)))
			return nodeBound{cost: 1, size: s, within: s, deep: 1}, true
		case types.Bytes:
			s := uint64(len(v))
			return nodeBound{cost: 1, size: s, within: s, deep: 1}, true
		}
		return scalar(1), true
	case ast.IdentKind:
		// A variable (or a type name): an input, its size bounded by n.
		return nodeBound{cost: 2, size: n, within: n, deep: costCap}, true
	case ast.SelectKind:
		sel := e.AsSelect()
		op, ok := boundOf(sel.Operand(), n)
		if !ok {
			return nodeBound{}, false
		}
		if sel.IsTestOnly() {
			return scalar(satAdd(op.cost, 2)), true
		}
		return nodeBound{cost: satAdd(op.cost, 2), size: op.within, within: op.within, deep: costCap}, true
	case ast.ListKind:
		list := e.AsList()
		if len(list.OptionalIndices()) > 0 {
			return nodeBound{}, false
		}
		out := nodeBound{cost: 11, size: uint64(list.Size()), deep: 1}
		for _, el := range list.Elements() {
			b, ok := boundOf(el, n)
			if !ok {
				return nodeBound{}, false
			}
			out.cost = satAdd(out.cost, b.cost)
			out.deep = satAdd(out.deep, b.deep)
			out.within = max(out.within, b.within)
		}
		out.within = max(out.within, out.size)
		return out, true
	case ast.MapKind:
		m := e.AsMap()
		out := nodeBound{cost: 31, size: uint64(m.Size()), deep: 1}
		for _, ent := range m.Entries() {
			entry := ent.AsMapEntry()
			if entry.IsOptional() {
				return nodeBound{}, false
			}
			for _, x := range []ast.Expr{entry.Key(), entry.Value()} {
				b, ok := boundOf(x, n)
				if !ok {
					return nodeBound{}, false
				}
				out.cost = satAdd(out.cost, b.cost)
				out.within = max(out.within, b.within)
				out.deep = satAdd(out.deep, b.deep)
			}
		}
		out.within = max(out.within, out.size)
		return out, true
	case ast.CallKind:
		return callBound(e.AsCall(), n)
	}
	// Comprehensions and message construction.
	return nodeBound{}, false
}

// callBound bounds a call by its function's name, over every overload
// of that name the tracker knows: the largest of their charges.
func callBound(call ast.CallExpr, n uint64) (nodeBound, bool) {
	var args []nodeBound
	var sum uint64
	operands := call.Args()
	if call.IsMemberFunction() {
		operands = append([]ast.Expr{call.Target()}, operands...)
	}
	for _, a := range operands {
		b, ok := boundOf(a, n)
		if !ok {
			return nodeBound{}, false
		}
		args = append(args, b)
		sum = satAdd(sum, b.cost)
	}
	// The call's own charge, with a margin of one.
	own := func(c uint64) uint64 { return satAdd(sum, satAdd(max(c, 1), 1)) }
	switch fn := call.FunctionName(); {
	case fn == operators.LogicalAnd || fn == operators.LogicalOr:
		return scalar(own(0)), len(args) == 2
	case fn == operators.Conditional && len(args) == 3:
		return nodeBound{cost: own(0), size: max(args[1].size, args[2].size), within: max(args[1].within, args[2].within), deep: max(args[1].deep, args[2].deep)}, true
	case fn == operators.LogicalNot || fn == operators.Negate || fn == operators.NotStrictlyFalse:
		return scalar(own(0)), len(args) == 1
	case fn == operators.Equals || fn == operators.NotEquals:
		// equalityCost for a list or a map, else what CEL charges.
		if len(args) != 2 {
			return nodeBound{}, false
		}
		return scalar(own(max(tenth(min(args[0].size, args[1].size)), min(args[0].deep, args[1].deep)))), true
	case fn == operators.Less || fn == operators.LessEquals || fn == operators.Greater || fn == operators.GreaterEquals:
		if len(args) != 2 {
			return nodeBound{}, false
		}
		return scalar(own(tenth(min(args[0].size, args[1].size)))), true
	case fn == operators.Add && len(args) == 2:
		size := satAdd(args[0].size, args[1].size)
		return nodeBound{cost: own(tenth(size)), size: size, within: max(size, args[0].within, args[1].within), deep: satAdd(args[0].deep, args[1].deep)}, true
	case fn == operators.Subtract || fn == operators.Multiply || fn == operators.Divide || fn == operators.Modulo:
		return scalar(own(0)), len(args) == 2
	case fn == operators.In && len(args) == 2:
		// membershipCost: an element each, or for a list or a map looked
		// for, the values each element is compared for, at most what the
		// list holds.
		return scalar(own(max(args[1].size, min(satMul(args[1].size, args[0].deep), args[1].deep)))), true
	case fn == operators.Index && len(args) == 2:
		return nodeBound{cost: own(0), size: args[0].within, within: args[0].within, deep: costCap}, true
	case fn == overloads.Size && len(args) == 1:
		return scalar(own(0)), true
	case (fn == overloads.StartsWith || fn == overloads.EndsWith) && call.IsMemberFunction() && len(args) == 2:
		return scalar(own(tenth(args[1].size))), true
	case fn == overloads.Contains && call.IsMemberFunction() && len(args) == 2:
		return scalar(own(satMul(tenth(args[0].size), tenth(args[1].size)))), true
	case fn == overloads.Matches && len(args) == 2:
		// The tracker charges matchCost for the pattern's program: a
		// constant's, or up to MaxRegexProgram for one the input supplies,
		// with what compiling it is charged.
		if lit, ok := literalString(operands[1]); ok {
			c, err := constantPattern(lit)
			if err != nil {
				return nodeBound{}, false
			}
			return scalar(own(matchCost(args[0].size, c.insts))), true
		}
		return scalar(own(satAdd(matchCost(args[0].size, MaxRegexProgram), compileCost(MaxRegexProgram)))), true
	case (fn == overloads.TypeConvertString || fn == overloads.TypeConvertBytes) && !call.IsMemberFunction() && len(args) == 1:
		// A string's bytes are up to four a character; a number, a bool,
		// a time or a duration is written in fewer than 64 characters.
		size := satAdd(satMul(args[0].size, 4), 64)
		return nodeBound{cost: own(tenth(args[0].size)), size: size, within: size, deep: 1}, true
	case (fn == overloads.TypeConvertInt || fn == overloads.TypeConvertUint || fn == overloads.TypeConvertDouble ||
		fn == overloads.TypeConvertBool) && !call.IsMemberFunction() && len(args) == 1:
		return scalar(own(0)), true
	case fn == overloads.TypeConvertDyn && !call.IsMemberFunction() && len(args) == 1:
		return nodeBound{cost: own(0), size: args[0].size, within: args[0].within, deep: args[0].deep}, true
	}
	return nodeBound{}, false
}

// maxCheapInput returns the largest input bound n (see costBound) up to
// limit for which e's cost is bounded within CostLimit, and false when
// there is none (or e cannot be bounded). The bound grows with n, so the
// largest is found by bisection.
func maxCheapInput(e ast.Expr, limit uint64) (uint64, bool) {
	cheap := func(n uint64) bool {
		c, ok := costBound(e, n)
		return ok && c <= CostLimit
	}
	if !cheap(minInputBound) {
		return 0, false
	}
	lo, hi := uint64(minInputBound), limit
	if cheap(hi) {
		return hi, true
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if cheap(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, true
}

// minInputBound is the least input bound an event's variables get: the
// event map itself has ten fields.
const minInputBound = 16
