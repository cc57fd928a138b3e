package policies

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/google/cel-go/cel"
	celchecker "github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/overloads"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
)

// Limits of rule evaluation.
const (
	// CostLimit bounds the runtime cost of one evaluation of one
	// expression, in CEL cost units (roughly one per operation and per
	// element a macro visits). A rule that exceeds it fails with an
	// evaluation error instead of holding the ingest; one whose estimated
	// cost exceeds it even on an empty input is refused when it compiles.
	CostLimit = 100_000
	// MaxExpressionLen bounds the source length of one expression.
	MaxExpressionLen = 4 << 10
	// interruptEvery is how many comprehension iterations run between
	// checks of the evaluation's context.
	interruptEvery = 64
	// cheapInputLimit is the largest input bound an expression is
	// planned without the cost tracker for (Expr.fast): beyond any event
	// JetStream carries.
	cheapInputLimit = 1 << 30
)

// The variables rules see, and the fields each declares. A selection of
// any other field on these variables is refused when the rule compiles,
// so a misspelt attribute fails at apply time, not on every event.
var (
	// EventFields are the fields of `event`: the CloudEvents attributes,
	// `data` (the parsed JSON body, or the body as a string for text) and
	// `extensions` (a map of extension attributes to their string values).
	EventFields = []string{"id", "source", "type", "subject", "time", "datacontenttype", "dataschema", "specversion", "data", "extensions"}
	// ToolFields are the fields of `tool` in approval rules.
	ToolFields = []string{"name", "args", "replay_safe"}
	// SessionFields are the fields of `session` in approval rules.
	SessionFields = []string{"agent", "name", "turn", "tokens", "cost_usd"}
)

// exprKind is what an expression is for: which variables it sees and
// which result type it must have.
type exprKind int

const (
	condOverEvent    exprKind = iota // trigger when: bool over event
	stringOverEvent                  // trigger session, rate key: string over event
	condOverTool                     // approval when: bool over tool, session
	anyOverEvent                     // prompt interpolation: any value over event
	payloadOverEvent                 // trigger payload: a map or a string over event
)

var envs = sync.OnceValues(func() ([2]*cel.Env, error) {
	common := append([]cel.EnvOption{ext.Strings(), cel.CrossTypeNumericComparisons(true)}, boundedStrings()...)
	ev, err := cel.NewEnv(append(common, cel.Variable("event", cel.MapType(cel.StringType, cel.DynType)))...)
	if err != nil {
		return [2]*cel.Env{}, err
	}
	ap, err := cel.NewEnv(append(common,
		cel.Variable("tool", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("session", cel.MapType(cel.StringType, cel.DynType)))...)
	return [2]*cel.Env{ev, ap}, err
})

// Bounds of the string functions whose result can be far larger than
// their input. CEL charges their cost after the call, so an expression
// such as a.replace("", b) would allocate len(a)*len(b) bytes before the
// cost limit stops it; these bounds refuse the call first.
const (
	// MaxReplaceResult bounds the string replace() returns, in bytes.
	MaxReplaceResult = 1 << 20
	// MaxSplitParts bounds the list split() returns.
	MaxSplitParts = 10_000
)

// boundedStrings redefines ext.Strings' replace and split (same overload
// ids and signatures, which cel-go allows) with implementations that
// compute the size of their result before building it.
func boundedStrings() []cel.EnvOption {
	str, list := cel.StringType, cel.ListType(cel.StringType)
	return []cel.EnvOption{
		cel.Function("replace",
			cel.MemberOverload("string_replace_string_string", []*cel.Type{str, str, str}, str,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val {
					return boundedReplace(string(args[0].(types.String)), string(args[1].(types.String)), string(args[2].(types.String)), -1)
				})),
			cel.MemberOverload("string_replace_string_string_int", []*cel.Type{str, str, str, cel.IntType}, str,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val {
					return boundedReplace(string(args[0].(types.String)), string(args[1].(types.String)), string(args[2].(types.String)), int64(args[3].(types.Int)))
				}))),
		cel.Function("split",
			cel.MemberOverload("string_split_string", []*cel.Type{str, str}, list,
				cel.BinaryBinding(func(s, sep ref.Val) ref.Val {
					return boundedSplit(string(s.(types.String)), string(sep.(types.String)), -1)
				})),
			cel.MemberOverload("string_split_string_int", []*cel.Type{str, str, cel.IntType}, list,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val {
					return boundedSplit(string(args[0].(types.String)), string(args[1].(types.String)), int64(args[2].(types.Int)))
				}))),
		cel.Function("indexOf",
			cel.MemberOverload("string_index_of_string", []*cel.Type{str, str}, cel.IntType,
				cel.BinaryBinding(func(s, sub ref.Val) ref.Val {
					return boundedIndexOf(string(s.(types.String)), string(sub.(types.String)), 0)
				})),
			cel.MemberOverload("string_index_of_string_int", []*cel.Type{str, str, cel.IntType}, cel.IntType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val {
					return boundedIndexOf(string(args[0].(types.String)), string(args[1].(types.String)), int64(args[2].(types.Int)))
				}))),
		cel.Function("lastIndexOf",
			cel.MemberOverload("string_last_index_of_string", []*cel.Type{str, str}, cel.IntType,
				cel.BinaryBinding(func(s, sub ref.Val) ref.Val {
					return boundedLastIndexOf(string(s.(types.String)), string(sub.(types.String)), 0, true)
				})),
			cel.MemberOverload("string_last_index_of_string_int", []*cel.Type{str, str, cel.IntType}, cel.IntType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val {
					return boundedLastIndexOf(string(args[0].(types.String)), string(args[1].(types.String)), int64(args[2].(types.Int)), false)
				}))),
	}
}

// searchCost is what the cost tracker charges indexOf and lastIndexOf
// over s and sub (ext.Strings): a tenth of the product of their lengths,
// in characters, which is how many characters the search compares.
func searchCost(s, sub string) uint64 {
	return satMul(uint64(utf8.RuneCountInString(s)), uint64(utf8.RuneCountInString(sub)))/10 + 1
}

// boundedIndexOf is ext.Strings' indexOf (from the character at off),
// stopped at the cost limit before it searches when the tracker's charge
// for it alone passes CostLimit: the tracker charges it after the search,
// and the search of a long string for a long substring compares each
// character of one with each of the other, for seconds.
func boundedIndexOf(s, sub string, off int64) ref.Val {
	if searchCost(s, sub) > CostLimit {
		costLimitExceeded()
	}
	if off < 0 {
		return types.NewErr("index out of range: %d", off)
	}
	runes := []rune(s)
	if sub == "" {
		return types.Int(min(off, int64(len(runes))))
	}
	subs := []rune(sub)
	for i := off; i <= int64(len(runes)-len(subs)); i++ {
		if slices.Equal(runes[i:i+int64(len(subs))], subs) {
			return types.Int(i)
		}
	}
	return types.Int(-1)
}

// boundedLastIndexOf is ext.Strings' lastIndexOf (at or before the
// character at off, or from the end), refused before it searches as
// boundedIndexOf is.
func boundedLastIndexOf(s, sub string, off int64, fromEnd bool) ref.Val {
	if searchCost(s, sub) > CostLimit {
		costLimitExceeded()
	}
	runes := []rune(s)
	if fromEnd {
		if sub == "" {
			return types.Int(len(runes))
		}
		if len(s) < len(sub) {
			return types.Int(-1)
		}
		off = int64(len(runes) - 1)
	}
	if off < 0 {
		return types.NewErr("index out of range: %d", off)
	}
	if sub == "" {
		return types.Int(min(off, int64(len(runes))))
	}
	subs := []rune(sub)
	if off >= int64(len(runes)) {
		return types.Int(-1)
	}
	off = min(off, int64(len(runes)-len(subs)))
	for i := off; i >= 0; i-- {
		if slices.Equal(runes[i:i+int64(len(subs))], subs) {
			return types.Int(i)
		}
	}
	return types.Int(-1)
}

// matches is how many times sep occurs in s as strings.Replace and
// strings.Split see it: once per rune boundary for an empty sep.
func matches(s, sep string) int64 {
	if sep == "" {
		return int64(utf8.RuneCountInString(s)) + 1
	}
	return int64(strings.Count(s, sep))
}

func boundedReplace(s, old, new string, n int64) ref.Val {
	count := matches(s, old)
	if n >= 0 {
		count = min(count, n)
	}
	if size := int64(len(s)) + count*(int64(len(new))-int64(len(old))); size > MaxReplaceResult {
		return types.NewErr("replace would return %d bytes, max %d", size, MaxReplaceResult)
	}
	return types.String(strings.Replace(s, old, new, int(n)))
}

func boundedSplit(s, sep string, n int64) ref.Val {
	parts := matches(s, sep)
	if sep != "" {
		parts++
	}
	if n >= 0 {
		parts = min(parts, n)
	}
	if parts > MaxSplitParts {
		return types.NewErr("split would return %d strings, max %d", parts, MaxSplitParts)
	}
	var out []string
	if n < 0 {
		out = strings.Split(s, sep)
	} else {
		out = strings.SplitN(s, sep, int(n))
	}
	return types.DefaultTypeAdapter.NativeToValue(out)
}

// exprError is a compile error of one expression, positioned within it
// (1-based line and column; 0 when unknown).
type exprError struct {
	line, col int
	msg       string
}

func (e *exprError) Error() string { return e.msg }

// Expr is one compiled CEL expression. It is safe for concurrent use.
type Expr struct {
	src  string
	kind exprKind
	prg  cel.Program
	// readsData: the expression may read event.data (see readsEventData).
	readsData bool
	// dataPaths: what of event.data it reads (eventDataPaths).
	dataPaths *DataPaths
	// loops: the expression holds a comprehension (all, exists, map,
	// filter), the only part of an evaluation a context can interrupt.
	loops bool
	// fast is prg without the cost tracker, for inputs bounded by
	// cheapUpTo (an inputBound), over which the expression's cost is
	// bounded within CostLimit (costBound): the limit cannot stop such an
	// evaluation, so it goes the same without counting. nil when no input
	// bound makes it cheap.
	fast      cel.Program
	cheapUpTo uint64
	// root is the checked expression.
	root ast.Expr
	// types, for a condition over `event` whose first term tests
	// event.type against literals, is that test: a type it refuses makes
	// the condition false without an evaluation (see typeTest).
	types func(string) bool
}

// String returns the expression's source.
func (x *Expr) String() string { return x.src }

// compileExpr parses, type-checks and plans src for kind.
func compileExpr(src string, kind exprKind) (*Expr, error) {
	if strings.TrimSpace(src) == "" {
		return nil, &exprError{msg: "empty expression"}
	}
	if len(src) > MaxExpressionLen {
		return nil, &exprError{msg: fmt.Sprintf("expression is %d bytes, max %d", len(src), MaxExpressionLen)}
	}
	all, err := envs()
	if err != nil {
		return nil, fmt.Errorf("policies: CEL environment: %w", err)
	}
	env := all[0]
	known := map[string][]string{"event": EventFields}
	if kind == condOverTool {
		env = all[1]
		known = map[string][]string{"tool": ToolFields, "session": SessionFields}
	}
	checked, iss := env.Compile(src)
	if iss != nil && iss.Err() != nil {
		errs := iss.Errors()
		if len(errs) == 0 {
			return nil, &exprError{msg: iss.Err().Error()}
		}
		first := errs[0]
		msg := "CEL: " + first.Message
		if len(errs) > 1 {
			msg += fmt.Sprintf(" (and %d more)", len(errs)-1)
		}
		return nil, &exprError{line: first.Location.Line(), col: first.Location.Column() + 1, msg: msg}
	}
	if err := checkFields(checked, known); err != nil {
		return nil, err
	}
	out := checked.OutputType()
	switch {
	case kind == anyOverEvent:
	case kind == payloadOverEvent:
		if out.Kind() != types.MapKind && !out.IsExactType(cel.StringType) && !out.IsExactType(cel.DynType) {
			return nil, &exprError{msg: fmt.Sprintf("CEL: result is %s, want a map or a string", out)}
		}
	default:
		want := cel.BoolType
		if kind == stringOverEvent {
			want = cel.StringType
		}
		switch {
		case out.IsExactType(want):
		case out.IsExactType(cel.DynType) && want == cel.StringType:
			// A field of the input (event.subject, event.data.x): a string,
			// or a whole number EvalString writes in decimal, decided per
			// input.
		case out.IsExactType(cel.DynType):
			// A bare field could be anything; a condition must be one.
			return nil, &exprError{msg: "CEL: result is dyn (a field whose type is known only per input), want bool: compare it, e.g. event.data.merged == true"}
		default:
			return nil, &exprError{msg: fmt.Sprintf("CEL: result is %s, want %s", out, want)}
		}
	}
	// Refuse at load what the estimate proves too costly: a rule whose
	// worst case exceeds the limit even when every field of the input is
	// empty would fail on every event. What depends on the input's size is
	// left to the cost limit at evaluation.
	if est, err := env.EstimateCost(checked, emptyInputs{}); err == nil && est.Max > CostLimit {
		return nil, &exprError{msg: fmt.Sprintf("CEL: estimated cost up to %d exceeds the limit of %d even on an empty input; simplify the rule", est.Max, CostLimit)}
	}
	prg, err := program(env, checked, append(append(append(matchesOptions(), equalityOptions()...), membershipOptions()...),
		cel.CostLimit(CostLimit),
		cel.InterruptCheckFrequency(interruptEvery),
		cel.EvalOptions(cel.OptOptimize))...)
	if err != nil {
		return nil, &exprError{msg: "CEL: " + err.Error()}
	}
	x := &Expr{src: src, kind: kind, prg: prg, readsData: readsEventData(checked), dataPaths: &DataPaths{}, loops: hasComprehension(checked), root: checked.NativeRep().Expr()}
	if n, ok := maxCheapInput(x.root, cheapInputLimit); ok && !x.loops && kind != condOverTool {
		if x.fast, err = program(env, checked, append(append(append(matchesOptions(), equalityOptions()...), membershipOptions()...), cel.EvalOptions(cel.OptOptimize))...); err != nil {
			return nil, &exprError{msg: "CEL: " + err.Error()}
		}
		x.cheapUpTo = n
	}
	if kind == condOverEvent {
		x.types = typeTest(checked.NativeRep().Expr())
	}
	if x.readsData {
		x.dataPaths = eventDataPaths(checked)
	}
	return x, nil
}

// program plans checked. A panic of the planner, which builds literal
// maps and lists when it plans them (a map literal with a bytes key, which
// the checker lets through, panics cel-go's), is an error of the
// expression, not of the process loading it.
func program(env *cel.Env, checked *cel.Ast, opts ...cel.ProgramOption) (prg cel.Program, err error) {
	defer func() {
		if r := recover(); r != nil {
			prg, err = nil, fmt.Errorf("cannot plan the expression: %v", r)
		}
	}()
	return env.Program(checked, opts...)
}

// emptyInputs estimates every input whose size CEL cannot know (strings,
// lists and maps of the event, the tool call, the session) as empty, so an
// estimate's Max is the worst case the expression's own literals and
// nesting force.
type emptyInputs struct{}

func (emptyInputs) EstimateSize(celchecker.AstNode) *celchecker.SizeEstimate {
	return &celchecker.SizeEstimate{Min: 0, Max: 0}
}

func (emptyInputs) EstimateCallCost(string, string, *celchecker.AstNode, []celchecker.AstNode) *celchecker.CallEstimate {
	return nil
}

// checkFields refuses a selection of an undeclared field on a declared
// variable, such as event.tpye.
func checkFields(checked *cel.Ast, known map[string][]string) error {
	native := checked.NativeRep()
	var bad *exprError
	ast.PreOrderVisit(ast.NavigateAST(native), ast.NewExprVisitor(func(e ast.Expr) {
		if bad != nil || e.Kind() != ast.SelectKind {
			return
		}
		sel := e.AsSelect()
		op := sel.Operand()
		if op.Kind() != ast.IdentKind {
			return
		}
		fields, ok := known[op.AsIdent()]
		if !ok || slices.Contains(fields, sel.FieldName()) {
			return
		}
		loc := native.SourceInfo().GetStartLocation(e.ID())
		bad = &exprError{
			line: loc.Line(), col: loc.Column() + 1,
			msg: fmt.Sprintf("CEL: %s has no field %q (it has %s)", op.AsIdent(), sel.FieldName(), strings.Join(fields, ", ")),
		}
	}))
	if bad != nil {
		return bad
	}
	return nil
}

// ErrEval marks a rule whose evaluation failed: a missing key, a type
// error, the cost limit, or the context ending.
var ErrEval = errors.New("policies: rule evaluation failed")

// run evaluates the program over vars. Only a comprehension's iterations
// check the context, so an expression without one is evaluated without
// it: the same evaluation, without the cancelable context the
// interpreter derives from ctx for every run.
//
// Over variables whose sizes bound its cost within CostLimit (Expr.fast),
// it is evaluated without the cost tracker: the limit could not stop it.
func (x *Expr) run(ctx context.Context, vars Vars) (ref.Val, error) {
	// The interpreter recognises a plain map, not a named map type.
	if !x.loops {
		prg := x.prg
		if n, ok := boundOfVars(vars); ok && x.fast != nil && n <= x.cheapUpTo {
			prg = x.fast
		}
		out, _, err := prg.Eval(map[string]any(vars))
		return out, err
	}
	out, _, err := x.prg.ContextEval(ctx, map[string]any(vars))
	return out, err
}

// typeTest returns, for a condition whose first term (the leftmost
// operand of its top-level &&s, which the interpreter evaluates first)
// compares event.type with string literals (event.type == "t",
// event.type in ["t", ...], event.type.startsWith("p")), that comparison:
// where it is false, so is the condition, whatever its other terms hold
// (CEL's && is false when any term is, errors included), and the first
// term can neither fail nor reach the cost limit before it. Otherwise nil.
func typeTest(e ast.Expr) func(string) bool {
	for e.Kind() == ast.CallKind && e.AsCall().FunctionName() == operators.LogicalAnd && len(e.AsCall().Args()) == 2 {
		e = e.AsCall().Args()[0]
	}
	if e.Kind() != ast.CallKind {
		return nil
	}
	call := e.AsCall()
	args := call.Args()
	isType := func(e ast.Expr) bool {
		if e.Kind() != ast.SelectKind || e.AsSelect().IsTestOnly() || e.AsSelect().FieldName() != "type" {
			return false
		}
		op := e.AsSelect().Operand()
		return op.Kind() == ast.IdentKind && op.AsIdent() == "event"
	}
	literal := func(e ast.Expr) (string, bool) {
		if e.Kind() != ast.LiteralKind {
			return "", false
		}
		s, ok := e.AsLiteral().(types.String)
		return string(s), ok
	}
	switch {
	case call.FunctionName() == operators.Equals && len(args) == 2:
		l, r := args[0], args[1]
		if !isType(l) {
			l, r = r, l
		}
		if want, ok := literal(r); ok && isType(l) {
			return func(t string) bool { return t == want }
		}
	case call.FunctionName() == operators.In && len(args) == 2 && isType(args[0]) && args[1].Kind() == ast.ListKind:
		list := args[1].AsList()
		if len(list.OptionalIndices()) > 0 {
			return nil
		}
		var want []string
		for _, el := range list.Elements() {
			s, ok := literal(el)
			if !ok {
				return nil
			}
			want = append(want, s)
		}
		return func(t string) bool { return slices.Contains(want, t) }
	case call.FunctionName() == overloads.StartsWith && call.IsMemberFunction() && isType(call.Target()) && len(args) == 1:
		if prefix, ok := literal(args[0]); ok {
			return func(t string) bool { return strings.HasPrefix(t, prefix) }
		}
	}
	return nil
}

// hasComprehension reports whether a checked expression holds a
// comprehension.
func hasComprehension(checked *cel.Ast) bool {
	found := false
	ast.PreOrderVisit(ast.NavigateAST(checked.NativeRep()), ast.NewExprVisitor(func(e ast.Expr) {
		if e.Kind() == ast.ComprehensionKind {
			found = true
		}
	}))
	return found
}

func (x *Expr) eval(ctx context.Context, vars Vars) (ref.Val, error) {
	out, err := x.run(ctx, vars)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrEval, x.src, err)
	}
	if types.IsError(out) {
		return nil, fmt.Errorf("%w: %s: %v", ErrEval, x.src, out)
	}
	return out, nil
}

// EvalBool evaluates a condition. A type its type test refuses is false
// without an evaluation, whatever the type's length: the first term's
// cost is bounded by its literals, not by the type (an equality costs a
// tenth of a unit a byte of the shorter operand, startsWith a tenth a
// byte of the prefix, in a unit an element), so within MaxExpressionLen
// it cannot reach CostLimit.
func (x *Expr) EvalBool(ctx context.Context, vars Vars) (bool, error) {
	if x.types != nil {
		if t, ok := vars.Event()["type"].(string); ok && !x.types(t) {
			return false, nil
		}
	}
	out, err := x.eval(ctx, vars)
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("%w: %s: result is %s, want bool", ErrEval, x.src, out.Type().TypeName())
	}
	return b, nil
}

// evalValue evaluates an expression into plain Go (see nativeOf). A
// field, key or index the input lacks is errMissing.
func (x *Expr) evalValue(ctx context.Context, vars Vars) (any, error) {
	out, err := x.run(ctx, vars)
	if err == nil && types.IsError(out) {
		err = out.(*types.Err)
	}
	if err != nil {
		if isMissing(err) && ctx.Err() == nil {
			return nil, fmt.Errorf("%w: %s: %w", errMissing, x.src, err)
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrEval, x.src, err)
	}
	v, err := nativeOf(out)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrEval, x.src, err)
	}
	return v, nil
}

// EvalString evaluates a string expression. A field whose type is known
// only per input (event.data.issue.number) may be a whole number, written
// in decimal; anything else that is not a string is an evaluation error.
func (x *Expr) EvalString(ctx context.Context, vars Vars) (string, error) {
	out, err := x.eval(ctx, vars)
	if err != nil {
		return "", err
	}
	switch v := out.Value().(type) {
	case string:
		return v, nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case uint64:
		return strconv.FormatUint(v, 10), nil
	}
	return "", fmt.Errorf("%w: %s: result is %s, want string (or a whole number)", ErrEval, x.src, out.Type().TypeName())
}
