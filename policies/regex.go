package policies

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"sync"
	"unicode/utf8"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/overloads"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
)

// RE2 matches a string in time proportional to its length times the size
// of the pattern's compiled program (instructions), not its source: a
// pattern of twelve characters such as (a|b){1000}c compiles to 3003
// instructions, and matching it over 100 KB takes seconds. So `matches`
// is charged for that product (matchCost), and refused before it runs
// when that charge alone exceeds CostLimit; what CEL charges, about a
// fortieth of the product of the lengths of the string and the pattern's
// source, would let it run.

// MaxRegexProgram bounds the compiled program of a pattern, in
// instructions. A constant pattern over it is refused when its rule
// loads; a pattern an event supplies, when the rule evaluates.
const MaxRegexProgram = 5000

// regexStepsPerCost is how many steps of the matcher (an instruction at
// a character) one unit of cost pays for: at the matcher's worst, some
// tens of nanoseconds, so that CostLimit is tens of milliseconds.
const regexStepsPerCost = 16

// regexCompileCostPerInst is the charge of compiling a pattern an event
// supplies, an instruction of its program: compiling takes some hundreds
// of nanoseconds an instruction, a few hundred times a step of the
// matcher, and a rule looking for each of a thousand patterns of the event
// would otherwise compile them for most of a second within CostLimit.
const regexCompileCostPerInst = 16

// constantMatchesOverload names the overload of a `matches` call whose
// pattern is a constant, compiled when its rule is: it is charged its
// match alone, where one with a pattern of the input is charged its
// compilation too (compileCost).
const constantMatchesOverload = "jetloop_matches_constant"

// compileCost is the charge of compiling a pattern of insts instructions.
func compileCost(insts uint64) uint64 { return satMul(insts, regexCompileCostPerInst) }

// matchCost is the charge of matching a string of chars characters with
// a program of insts instructions: the steps of the matcher over it and
// its end.
func matchCost(chars, insts uint64) uint64 {
	steps := satMul(satAdd(chars, 1), insts)
	return satAdd(steps/regexStepsPerCost, 1)
}

// regexProg is a compiled `matches` pattern.
type regexProg struct {
	re    *regexp.Regexp
	insts uint64
}

// compilePattern compiles p as `matches` does (RE2 syntax), refusing one
// whose program would exceed MaxRegexProgram before compiling it.
func compilePattern(p string) (*regexProg, error) {
	parsed, err := syntax.Parse(p, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", p, err)
	}
	if n := progBound(parsed); n > MaxRegexProgram {
		return nil, fmt.Errorf("pattern %q compiles to more than the %d instructions allowed; simplify its repetitions", p, MaxRegexProgram)
	}
	prog, err := syntax.Compile(parsed.Simplify())
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", p, err)
	}
	if len(prog.Inst) > MaxRegexProgram {
		return nil, fmt.Errorf("pattern %q compiles to %d instructions, more than the %d allowed; simplify its repetitions", p, len(prog.Inst), MaxRegexProgram)
	}
	re, err := regexp.Compile(p)
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", p, err)
	}
	return &regexProg{re: re, insts: uint64(len(prog.Inst))}, nil
}

// progBound bounds the instructions re compiles to, without compiling
// it: a repetition x{n,m} is simplified to max(n, m) copies of x and as
// many optional jumps, and the program adds a few of its own.
func progBound(re *syntax.Regexp) uint64 {
	var size func(re *syntax.Regexp) uint64
	size = func(re *syntax.Regexp) uint64 {
		var subs uint64
		for _, s := range re.Sub {
			subs = satAdd(subs, size(s))
		}
		switch re.Op {
		case syntax.OpLiteral:
			return uint64(max(len(re.Rune), 1))
		case syntax.OpCapture:
			return satAdd(subs, 2)
		case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpConcat, syntax.OpAlternate:
			return satAdd(subs, uint64(len(re.Sub))+1)
		case syntax.OpRepeat:
			return satMul(satAdd(subs, 1), uint64(max(re.Min, re.Max, 0))+1)
		}
		return satAdd(subs, 1)
	}
	return satAdd(size(re), 4)
}

// patterns caches the patterns events supply, which cannot be compiled
// when their rule is: a few hundred, cleared when full.
var patterns = struct {
	sync.Mutex
	m map[string]*regexProg
}{m: map[string]*regexProg{}}

const maxCachedPatterns = 256

// constantPatterns are the patterns of the rules' text, compiled when
// their programs are planned, for the cost tracker to charge by.
var constantPatterns sync.Map // string -> *regexProg

// constantPattern compiles a pattern of a rule's text. Besides what
// compilePattern refuses, it refuses a pattern every string it matches is
// too long for: matching one costs more than CostLimit, so the call could
// only ever be false or stop the evaluation, never true.
func constantPattern(p string) (*regexProg, error) {
	if c, ok := constantPatterns.Load(p); ok {
		return c.(*regexProg), nil
	}
	c, err := compilePattern(p)
	if err != nil {
		return nil, err
	}
	parsed, err := syntax.Parse(p, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", p, err)
	}
	if n, ok := minMatchLen(parsed); ok {
		if cost := matchCost(n, c.insts); cost > CostLimit {
			return nil, fmt.Errorf("pattern %q cannot match within the cost limit: every string it matches has at least %d characters, and matching one with its %d instructions costs at least %d, more than the cost limit of %d for any input; simplify its repetitions",
				p, n, c.insts, cost, CostLimit)
		}
	}
	constantPatterns.Store(p, c)
	return c, nil
}

// minMatchLen is the fewest characters of a string re matches: a string
// holding a match holds at least that many. ok is false for a pattern
// that matches no string at all (an empty character class).
func minMatchLen(re *syntax.Regexp) (n uint64, ok bool) {
	const none = ^uint64(0)
	var size func(re *syntax.Regexp) uint64
	size = func(re *syntax.Regexp) uint64 {
		switch re.Op {
		case syntax.OpNoMatch:
			return none
		case syntax.OpLiteral:
			return uint64(len(re.Rune))
		case syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL:
			return 1
		case syntax.OpCapture, syntax.OpPlus:
			return size(re.Sub[0])
		case syntax.OpRepeat:
			if re.Min == 0 {
				return 0
			}
			return satMul(size(re.Sub[0]), uint64(re.Min))
		case syntax.OpConcat:
			var sum uint64
			for _, s := range re.Sub {
				sum = satAdd(sum, size(s))
			}
			return sum
		case syntax.OpAlternate:
			least := none
			for _, s := range re.Sub {
				least = min(least, size(s))
			}
			return least
		}
		// OpEmptyMatch, OpStar, OpQuest and the assertions (^, $, \b, ...)
		// match the empty string.
		return 0
	}
	n = size(re)
	return n, n != none
}

func cachedPattern(p string) (*regexProg, error) {
	if c, ok := constantPatterns.Load(p); ok {
		return c.(*regexProg), nil
	}
	patterns.Lock()
	c, ok := patterns.m[p]
	patterns.Unlock()
	if ok {
		return c, nil
	}
	c, err := compilePattern(p)
	if err != nil {
		return nil, err
	}
	patterns.Lock()
	if len(patterns.m) >= maxCachedPatterns {
		clear(patterns.m)
	}
	patterns.m[p] = c
	patterns.Unlock()
	return c, nil
}

// costLimitExceeded stops the evaluation as the cost tracker does when
// its count passes CostLimit, with the same error.
func costLimitExceeded() {
	panic(interpreter.EvalCancelledError{Cause: interpreter.CostLimitExceeded, Message: "operation cancelled: actual cost limit exceeded"})
}

// match matches s with p, or stops the evaluation at the cost limit when
// its charge alone (with extra, what compiling p is charged) passes it.
func (p *regexProg) match(s string, extra uint64) ref.Val {
	if satAdd(matchCost(uint64(utf8.RuneCountInString(s)), p.insts), extra) > CostLimit {
		costLimitExceeded()
	}
	return types.Bool(p.re.MatchString(s))
}

func matchValues(s, p ref.Val) ref.Val {
	str, ok := s.(types.String)
	pat, ok2 := p.(types.String)
	if !ok || !ok2 {
		return types.NoSuchOverloadErr()
	}
	c, err := cachedPattern(string(pat))
	if err != nil {
		return types.WrapErr(err)
	}
	return c.match(string(str), compileCost(c.insts))
}

// matchesOptions are the program options of `matches`: its calls matched
// as matchValues does, their constant patterns compiled once, when the
// program is planned (a pattern too large is the program's error), and
// the cost tracker charging every match matchCost, and compileCost for a
// pattern of the input.
func matchesOptions() []cel.ProgramOption {
	var opts []*interpreter.RegexOptimization
	for _, id := range []string{overloads.Matches, overloads.MatchesString} {
		opts = append(opts, &interpreter.RegexOptimization{
			Function: overloads.Matches, OverloadID: id, RegexIndex: 1,
			Factory: func(call interpreter.InterpretableCall, p string) (interpreter.InterpretableCall, error) {
				c, err := constantPattern(p)
				if err != nil {
					return nil, err
				}
				return interpreter.NewCall(call.ID(), call.Function(), constantMatchesOverload, call.Args(), func(args ...ref.Val) ref.Val {
					if len(args) != 2 {
						return types.NoSuchOverloadErr()
					}
					s, ok := args[0].(types.String)
					if !ok {
						return types.NoSuchOverloadErr()
					}
					return c.match(string(s), 0)
				}), nil
			},
		})
	}
	charge := func(compiled bool) interpreter.FunctionTracker {
		return func(args []ref.Val, _ ref.Val) *uint64 {
			cost := uint64(1)
			if len(args) == 2 {
				s, ok := args[0].(types.String)
				p, ok2 := args[1].(types.String)
				if c, err := cachedPattern(string(p)); ok && ok2 && err == nil {
					cost = matchCost(uint64(utf8.RuneCountInString(string(s))), c.insts)
					if !compiled {
						cost = satAdd(cost, compileCost(c.insts))
					}
				}
			}
			return &cost
		}
	}
	// Calls whose pattern is not a constant; the standard library binds
	// `matches` once for both overloads, which cannot be redefined.
	dynamic := func(i interpreter.InterpretableV2) (interpreter.InterpretableV2, error) {
		call, ok := i.(interpreter.InterpretableCall)
		if !ok || call.Function() != overloads.Matches || len(call.Args()) != 2 {
			return i, nil
		}
		return interpreter.NewCall(call.ID(), call.Function(), call.OverloadID(), call.Args(), func(args ...ref.Val) ref.Val {
			if len(args) != 2 {
				return types.NoSuchOverloadErr()
			}
			return matchValues(args[0], args[1])
		}), nil
	}
	return []cel.ProgramOption{
		cel.CustomDecoratorV2(dynamic),
		cel.OptimizeRegex(opts...),
		cel.CostTrackerOptions(
			interpreter.OverloadCostTracker(constantMatchesOverload, charge(true)),
			interpreter.OverloadCostTracker(overloads.Matches, charge(false)),
			interpreter.OverloadCostTracker(overloads.MatchesString, charge(false))),
	}
}
