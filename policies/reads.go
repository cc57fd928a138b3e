package policies

import (
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/ast"
)

// ReadsData reports whether any trigger of c may read event.data: when
// none does, admission need not decode an event's data.
func (c *Compiled) ReadsData() bool {
	for _, t := range c.Triggers {
		if t.ReadsData() {
			return true
		}
	}
	return false
}

// ReadsData reports whether the trigger's condition, session, rate key,
// debounce key, throttle key, payload or prompt may read event.data.
func (t *CompiledTrigger) ReadsData() bool {
	for _, x := range t.exprs() {
		if x != nil && x.readsData {
			return true
		}
	}
	if t.Prompt != nil {
		for _, p := range t.Prompt.parts {
			if p.expr != nil && p.expr.readsData {
				return true
			}
		}
	}
	return false
}

// DataPaths returns what of event.data any trigger of c reads.
func (c *Compiled) DataPaths() *DataPaths {
	p := &DataPaths{}
	for _, t := range c.Triggers {
		p = p.Union(t.DataPaths())
	}
	return p
}

// DataPaths returns what of event.data the trigger's condition, session,
// rate key, debounce key, throttle key, payload and prompt read.
func (t *CompiledTrigger) DataPaths() *DataPaths {
	p := &DataPaths{}
	for _, x := range t.exprs() {
		if x != nil && x.readsData {
			p = p.Union(x.dataPaths)
		}
	}
	if t.Prompt != nil {
		for _, pt := range t.Prompt.parts {
			if pt.expr != nil && pt.expr.readsData {
				p = p.Union(pt.expr.dataPaths)
			}
		}
	}
	return p
}

// exprs are the trigger's expressions over `event` but its prompt's:
// every one admission evaluates.
func (t *CompiledTrigger) exprs() []*Expr {
	return []*Expr{t.When, t.Session, t.RateKey, t.DebounceKey, t.ThrottleKey, t.payload}
}

// readsEventData reports whether a checked expression may read
// event.data: whenever `event` appears other than as the operand of a
// selection of another field (event.type, event.subject), it may, since
// it is then passed whole (event["data"], a comprehension over it).
func readsEventData(checked *cel.Ast) bool {
	native := checked.NativeRep()
	idents, safe := 0, 0
	ast.PreOrderVisit(ast.NavigateAST(native), ast.NewExprVisitor(func(e ast.Expr) {
		switch e.Kind() {
		case ast.IdentKind:
			if e.AsIdent() == "event" {
				idents++
			}
		case ast.SelectKind:
			sel := e.AsSelect()
			if op := sel.Operand(); op.Kind() == ast.IdentKind && op.AsIdent() == "event" && sel.FieldName() != "data" {
				safe++
			}
		}
	}))
	return idents > safe
}
