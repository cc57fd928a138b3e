package policies

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/ast"
)

// DataPaths is a set of paths into an event's data, what rules read of
// it: a rule that reads event.data.pull_request.number needs the value at
// pull_request.number, whole, and nothing else of the data. A decode of
// only those paths (ParseJSONPaths) skips the rest of a webhook's tens of
// kilobytes without building it. The zero value holds no path; nil holds
// every path (the whole data).
type DataPaths struct {
	whole bool
	sub   map[string]*DataPaths
	// key is the key of p in its parent's sub: the decoder's key of an
	// object member it keeps, not a copy of the document's bytes.
	key string
}

// AllData is the set of every path: the whole data.
var AllData = &DataPaths{whole: true}

// Whole reports whether p holds every path: the data is needed whole.
func (p *DataPaths) Whole() bool { return p == nil || p.whole }

// Empty reports whether p holds no path: the data is not needed.
func (p *DataPaths) Empty() bool { return p != nil && !p.whole && len(p.sub) == 0 }

// Add adds the path of fields to p: the value there, whole.
func (p *DataPaths) Add(fields ...string) {
	if p.Whole() {
		return
	}
	n := p
	for _, f := range fields {
		if n.sub == nil {
			n.sub = map[string]*DataPaths{}
		}
		c := n.sub[f]
		if c == nil {
			c = &DataPaths{key: f}
			n.sub[f] = c
		}
		if c.whole {
			return
		}
		n = c
	}
	n.whole, n.sub = true, nil
}

// Union returns the paths of p and q.
func (p *DataPaths) Union(q *DataPaths) *DataPaths {
	switch {
	case p.Whole() || q.Whole():
		return AllData
	case p.Empty():
		return q.clone()
	case q.Empty():
		return p.clone()
	}
	out := p.clone()
	out.merge(q)
	return out
}

func (p *DataPaths) merge(q *DataPaths) {
	if p.whole {
		return
	}
	if q.whole {
		p.whole, p.sub = true, nil
		return
	}
	for k, c := range q.sub {
		if p.sub == nil {
			p.sub = map[string]*DataPaths{}
		}
		if mine := p.sub[k]; mine != nil {
			mine.merge(c)
		} else {
			p.sub[k] = c.cloneAs(k)
		}
	}
}

func (p *DataPaths) clone() *DataPaths {
	if p == nil {
		return nil
	}
	return p.cloneAs(p.key)
}

// cloneAs is a copy of p that is key in its parent's sub.
func (p *DataPaths) cloneAs(key string) *DataPaths {
	out := &DataPaths{whole: p.whole, key: key}
	if len(p.sub) > 0 {
		out.sub = make(map[string]*DataPaths, len(p.sub))
		for k, c := range p.sub {
			out.sub[k] = c.cloneAs(k)
		}
	}
	return out
}

// Covers reports whether every path of q is in p: data decoded for p
// reads as the whole data for rules that need q.
func (p *DataPaths) Covers(q *DataPaths) bool {
	switch {
	case p.Whole():
		return true
	case q.Whole():
		return false
	}
	for k, c := range q.sub {
		mine := p.sub[k]
		if mine == nil || !mine.Covers(c) {
			return false
		}
	}
	return true
}

// String lists the paths, sorted, "*" for the whole data.
func (p *DataPaths) String() string {
	if p.Whole() {
		return "*"
	}
	var out []string
	var walk func(prefix string, n *DataPaths)
	walk = func(prefix string, n *DataPaths) {
		if n.whole {
			out = append(out, prefix)
			return
		}
		for _, k := range slices.Sorted(maps.Keys(n.sub)) {
			walk(strings.TrimPrefix(prefix+"."+k, "."), n.sub[k])
		}
	}
	walk("", p)
	return strings.Join(out, " ")
}

// eventDataPaths returns the paths of event.data a checked expression
// reads: the fields of every chain of selections event.data.a.b…, longest
// first. Where event.data is read otherwise (whole, by index, by an
// optional selection, handed to a function) it is every path.
func eventDataPaths(checked *cel.Ast) *DataPaths {
	native := checked.NativeRep()
	// Selections that are the operand of another: not the end of a chain.
	operand := map[int64]bool{}
	var selects []ast.Expr
	dataRefs, chained, idents, onEvent := 0, 0, 0, 0
	ast.PreOrderVisit(ast.NavigateAST(native), ast.NewExprVisitor(func(e ast.Expr) {
		if isEvent(e) {
			idents++
		}
		if e.Kind() != ast.SelectKind {
			return
		}
		sel := e.AsSelect()
		if isEvent(sel.Operand()) {
			onEvent++
		}
		if op := sel.Operand(); op.Kind() == ast.SelectKind {
			operand[op.ID()] = true
			if inner := op.AsSelect(); inner.FieldName() == "data" && isEvent(inner.Operand()) {
				chained++
			}
		}
		if sel.FieldName() == "data" && isEvent(sel.Operand()) {
			dataRefs++
		}
		selects = append(selects, e)
	}))
	if idents > onEvent || dataRefs > chained {
		// event on its own (event["data"]), or event.data on its own.
		return AllData
	}
	p := &DataPaths{}
	for _, e := range selects {
		if operand[e.ID()] {
			continue
		}
		// Walk the chain down to its root.
		var fields []string
		x := e
		for x.Kind() == ast.SelectKind {
			fields = append(fields, x.AsSelect().FieldName())
			x = x.AsSelect().Operand()
		}
		if !isEvent(x) || len(fields) < 2 || fields[len(fields)-1] != "data" {
			continue
		}
		fields = fields[:len(fields)-1]
		slices.Reverse(fields)
		p.Add(fields...)
	}
	return p
}

func isEvent(e ast.Expr) bool { return e.Kind() == ast.IdentKind && e.AsIdent() == "event" }

// ParseJSONPaths is ParseJSON keeping of the document only the values at
// paths (whole): objects on the way hold only the keys on a path, and the
// rest is checked and skipped without being built. A document ParseJSON
// refuses it refuses alike; nil paths keep everything, as ParseJSON.
func ParseJSONPaths(raw []byte, paths *DataPaths) (any, error) {
	if paths.Whole() {
		return ParseJSON(raw)
	}
	d := jsonDecoder{b: raw}
	d.space()
	v, err := d.valueIn(0, paths)
	if err == nil {
		if d.space(); d.i < len(d.b) {
			err = d.errorf("data after the first value")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("parse JSON: %w", err)
	}
	return v, nil
}

// valueIn decodes the value at d.i keeping only p's paths of it: all of
// it when p is whole, of an object the keys p names, nothing (skipped,
// nil) when p is nil. A value that is not an object where p names keys
// is kept whole: a rule reading into it sees what it is.
func (d *jsonDecoder) valueIn(depth int, p *DataPaths) (any, error) {
	switch {
	case p == nil:
		return nil, d.skip(depth)
	case p.whole:
		return d.value(depth)
	case d.i < len(d.b) && d.b[d.i] == '{':
		return d.objectIn(depth+1, p)
	}
	return d.value(depth)
}

func (d *jsonDecoder) objectIn(depth int, p *DataPaths) (any, error) {
	if depth > maxJSONDepth {
		return nil, d.errorf("exceeded max depth")
	}
	d.i++ // {
	m := make(map[string]any, len(p.sub))
	d.space()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return m, nil
	}
	for {
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return nil, d.errorf("want a string for an object key")
		}
		var k string
		var err error
		var child *DataPaths
		if end, ok := d.plainString(); ok {
			// Looked up without a copy; kept as the path's own key.
			child = p.sub[string(d.b[d.i+1:end])]
			if child != nil {
				k = child.key
			}
			d.i = end + 1
		} else {
			if k, err = d.string(); err != nil {
				return nil, err
			}
			child = p.sub[k]
		}
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return nil, d.errorf("want ':' after an object key")
		}
		d.i++
		d.space()
		v, err := d.valueIn(depth, child)
		if err != nil {
			return nil, err
		}
		if child != nil {
			m[k] = v
		}
		d.space()
		if d.i >= len(d.b) {
			return nil, d.errorf("unexpected end of JSON input")
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case '}':
			d.i++
			return m, nil
		default:
			return nil, d.errorf("want ',' or '}' after an object value")
		}
	}
}

// plainString reports the index of the closing quote of the string at
// d.i when it has no escape, no control character and no byte past
// ASCII: its bytes are then its value.
func (d *jsonDecoder) plainString() (int, bool) {
	for j := stringRun(d.b, d.i+1, true); j < len(d.b); j++ {
		c := d.b[j]
		if c == '"' {
			return j, true
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			return 0, false
		}
	}
	return 0, false
}

// Bytes repeated in each of a word's eight lanes.
const (
	lanes    = 0x0101010101010101
	highBits = 0x8080808080808080
)

// stringRun returns the index, from j on, of the first word of b that
// may hold a byte ending a run of a string's plain bytes: a quote, a
// backslash, a control character and, when ascii, a byte past ASCII. It
// reads eight bytes at a time; the caller reads on from there byte by
// byte. A word has such a byte exactly when its lane's high bit is set
// in mask (the carries of the subtractions reach only lanes above one
// that holds such a byte).
func stringRun(b []byte, j int, ascii bool) int {
	for ; j+8 <= len(b); j += 8 {
		x := binary.LittleEndian.Uint64(b[j:])
		q, bs := x^(lanes*'"'), x^(lanes*'\\')
		mask := (x-lanes*0x20)&^x | (q-lanes)&^q | (bs-lanes)&^bs
		if ascii {
			mask |= x
		}
		if mask&highBits != 0 {
			return j
		}
	}
	return j
}

// skip checks the value at d.i as value would and moves past it,
// building nothing.
func (d *jsonDecoder) skip(depth int) error {
	if d.i >= len(d.b) {
		return d.errorf("unexpected end of JSON input")
	}
	switch c := d.b[d.i]; {
	case c == '{' || c == '[':
		depth++
		if depth > maxJSONDepth {
			return d.errorf("exceeded max depth")
		}
		closer, what := byte('}'), "object value"
		if c == '[' {
			closer, what = ']', "array element"
		}
		d.i++
		d.space()
		if d.i < len(d.b) && d.b[d.i] == closer {
			d.i++
			return nil
		}
		for {
			d.space()
			if c == '{' {
				if d.i >= len(d.b) || d.b[d.i] != '"' {
					return d.errorf("want a string for an object key")
				}
				if err := d.skipString(); err != nil {
					return err
				}
				d.space()
				if d.i >= len(d.b) || d.b[d.i] != ':' {
					return d.errorf("want ':' after an object key")
				}
				d.i++
				d.space()
			}
			if err := d.skip(depth); err != nil {
				return err
			}
			d.space()
			if d.i >= len(d.b) {
				return d.errorf("unexpected end of JSON input")
			}
			switch d.b[d.i] {
			case ',':
				d.i++
			case closer:
				d.i++
				return nil
			default:
				return d.errorf("want ',' or '%c' after an %s", closer, what)
			}
		}
	case c == '"':
		return d.skipString()
	case c == '-' || c >= '0' && c <= '9':
		return d.numberEnd()
	case c == 't':
		return d.literal("true")
	case c == 'f':
		return d.literal("false")
	case c == 'n':
		return d.literal("null")
	default:
		return d.errorf("invalid character %q looking for a value", c)
	}
}

// skipString checks the string at d.i as string would and moves past it.
func (d *jsonDecoder) skipString() error {
	if end, ok := d.plainString(); ok {
		d.i = end + 1
		return nil
	}
	d.i++ // "
	for d.i < len(d.b) {
		d.i = stringRun(d.b, d.i, false)
		if d.i >= len(d.b) {
			break
		}
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return nil
		case c < 0x20:
			return d.errorf("invalid control character %q in a string", c)
		case c == '\\':
			if d.i+1 >= len(d.b) {
				return d.errorf("unexpected end of JSON input")
			}
			e := d.b[d.i+1]
			d.i += 2
			switch e {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if _, ok := d.hex4(); !ok {
					return d.errorf("invalid \\u escape")
				}
			default:
				return d.errorf("invalid escape \\%c", e)
			}
		default:
			// Invalid UTF-8 is no error: string makes it U+FFFD.
			d.i++
		}
	}
	return d.errorf("unexpected end of JSON input")
}
