package policies

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math/bits"
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
	// subs are sub's members, what a decoder looks a document's key up
	// in without hashing it when they are few.
	subs []*DataPaths
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
			n.subs = append(n.subs, c)
		}
		if c.whole {
			return
		}
		n = c
	}
	n.whole, n.sub, n.subs = true, nil, nil
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
		p.whole, p.sub, p.subs = true, nil, nil
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
			p.subs = append(p.subs, p.sub[k])
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
			out.subs = append(out.subs, out.sub[k])
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
			child = p.member(d.b[d.i+1 : end])
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

// member is the member of p under key k, nil if none.
func (p *DataPaths) member(k []byte) *DataPaths {
	if len(p.subs) > 8 {
		return p.sub[string(k)]
	}
	for _, c := range p.subs {
		if c.key == string(k) {
			return c
		}
	}
	return nil
}

// plainString reports the index of the closing quote of the string at
// d.i when it has no escape, no control character and no byte past
// ASCII: its bytes are then its value.
func (d *jsonDecoder) plainString() (int, bool) {
	j := stringEnd(d.b, d.i+1, true)
	if j < len(d.b) && d.b[j] == '"' {
		return j, true
	}
	return 0, false
}

// Bytes repeated in each of a word's eight lanes.
const (
	lanes    = 0x0101010101010101
	highBits = 0x8080808080808080
)

// stringEnd returns the index, from j on, of the first byte of b that
// ends a run of a string's plain bytes: a quote, a backslash, a control
// character and, when ascii, a byte past ASCII; len(b) when there is
// none. It reads eight bytes at a time. A word holds such a byte exactly
// when a lane's high bit is set in mask, and the lowest lane set is the
// first such byte: a subtraction's borrow starts only at a lane that
// holds one and reaches only the lanes above it.
func stringEnd(b []byte, j int, ascii bool) int {
	for ; j+8 <= len(b); j += 8 {
		x := binary.LittleEndian.Uint64(b[j:])
		q, bs := x^(lanes*'"'), x^(lanes*'\\')
		mask := (x-lanes*0x20)&^x | (q-lanes)&^q | (bs-lanes)&^bs
		if ascii {
			mask |= x
		}
		if mask &= highBits; mask != 0 {
			return j + bits.TrailingZeros64(mask)/8
		}
	}
	for ; j < len(b); j++ {
		if c := b[j]; c == '"' || c == '\\' || c < 0x20 || ascii && c >= utf8.RuneSelf {
			return j
		}
	}
	return j
}

// skipSpace returns the index of the first byte of b from i on that is
// not JSON space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace[b[i]] {
		i++
	}
	return i
}

var isSpace = [256]bool{' ': true, '\n': true, '\t': true, '\r': true}

// skip checks the value at d.i as value would and moves past it,
// building nothing, with value's errors. It walks nested containers in
// one loop, keeping of each open one only whether it is an object:
// level k counts from the skipped value (level 0) inward, its bit is
// bit k of open below 64 and bit k%64 of more[k/64-1] from 64 on. depth
// is the nesting the value is in; the limit counts it with the levels.
func (d *jsonDecoder) skip(depth int) error {
	b := d.b
	i := d.i
	var (
		open uint64
		more []uint64
		n    int // containers open
		j    int
		obj  bool
		err  string
	)
value:
	if i >= len(b) {
		err = "unexpected end of JSON input"
		goto fail
	}
	switch c := b[i]; {
	case c == '"':
		// stringEnd's words, read here rather than called: a plain
		// string ends at a quote. The rest (an escape, a control
		// character, the last bytes) is skipStringAt's.
		j = i + 1
		for ; j+8 <= len(b); j += 8 {
			x := binary.LittleEndian.Uint64(b[j:])
			q, bs := x^(lanes*'"'), x^(lanes*'\\')
			if mask := ((x-lanes*0x20)&^x | (q-lanes)&^q | (bs-lanes)&^bs) & highBits; mask != 0 {
				j += bits.TrailingZeros64(mask) / 8
				break
			}
		}
		if j < len(b) && b[j] == '"' {
			i = j + 1
		} else if i, err = skipStringAt(b, i); err != "" {
			goto fail
		}
	case c == '{' || c == '[':
		if depth+n+1 > maxJSONDepth {
			err = "exceeded max depth"
			goto fail
		}
		obj = c == '{'
		if k := n % 64; n < 64 {
			if obj {
				open |= 1 << k
			} else {
				open &^= 1 << k
			}
		} else {
			if k == 0 && len(more) < n/64 {
				more = append(more, 0)
			}
			if obj {
				more[n/64-1] |= 1 << k
			} else {
				more[n/64-1] &^= 1 << k
			}
		}
		n++
		i++
		if i < len(b) && b[i] <= ' ' {
			i = skipSpace(b, i)
		}
		if i < len(b) && (b[i] == '}' && obj || b[i] == ']' && !obj) {
			i++
			n--
			break
		}
		if obj {
			goto key
		}
		goto value
	case c == '-' || c >= '0' && c <= '9':
		if i, err = skipNumber(b, i); err != "" {
			goto fail
		}
	case c == 't':
		if len(b)-i < 4 || binary.LittleEndian.Uint32(b[i:]) != 't'|'r'<<8|'u'<<16|'e'<<24 {
			err = "invalid literal, want true"
			goto fail
		}
		i += 4
	case c == 'f':
		if len(b)-i < 5 || binary.LittleEndian.Uint32(b[i+1:]) != 'a'|'l'<<8|'s'<<16|'e'<<24 {
			err = "invalid literal, want false"
			goto fail
		}
		i += 5
	case c == 'n':
		if len(b)-i < 4 || binary.LittleEndian.Uint32(b[i:]) != 'n'|'u'<<8|'l'<<16|'l'<<24 {
			err = "invalid literal, want null"
			goto fail
		}
		i += 4
	default:
		d.i = i
		return d.errorf("invalid character %q looking for a value", c)
	}
next:
	// A value ended: what follows it in the container it is in.
	if n == 0 {
		d.i = i
		return nil
	}
	if k := (n - 1) % 64; n <= 64 {
		obj = open>>k&1 != 0
	} else {
		obj = more[(n-1)/64-1]>>k&1 != 0
	}
	if i < len(b) && b[i] <= ' ' {
		i = skipSpace(b, i)
	}
	if i >= len(b) {
		err = "unexpected end of JSON input"
		goto fail
	}
	switch c := b[i]; {
	case c == ',':
		i++
		if obj {
			goto key
		}
		if i < len(b) && b[i] <= ' ' {
			i = skipSpace(b, i)
		}
		goto value
	case c == '}' && obj, c == ']' && !obj:
		i++
		n--
		goto next
	case obj:
		err = "want ',' or '}' after an object value"
	default:
		err = "want ',' or ']' after an array element"
	}
	goto fail
key:
	// In an object, after '{' or ',': a key, ':', space.
	if i < len(b) && b[i] <= ' ' {
		i = skipSpace(b, i)
	}
	if i >= len(b) || b[i] != '"' {
		err = "want a string for an object key"
		goto fail
	}
	j = i + 1
	for ; j+8 <= len(b); j += 8 {
		x := binary.LittleEndian.Uint64(b[j:])
		q, bs := x^(lanes*'"'), x^(lanes*'\\')
		if mask := ((x-lanes*0x20)&^x | (q-lanes)&^q | (bs-lanes)&^bs) & highBits; mask != 0 {
			j += bits.TrailingZeros64(mask) / 8
			break
		}
	}
	if j < len(b) && b[j] == '"' {
		i = j + 1
	} else if i, err = skipStringAt(b, i); err != "" {
		goto fail
	}
	if i < len(b) && b[i] <= ' ' {
		i = skipSpace(b, i)
	}
	if i >= len(b) || b[i] != ':' {
		err = "want ':' after an object key"
		goto fail
	}
	i++
	if i < len(b) && b[i] <= ' ' {
		i = skipSpace(b, i)
	}
	goto value
fail:
	d.i = i
	return d.errorf("%s", err)
}

// skipStringAt checks the string whose opening quote is at b[i] as string
// would and returns the index past its closing quote, or where and why
// it is refused.
func skipStringAt(b []byte, i int) (int, string) {
	i++ // "
	for {
		i = stringEnd(b, i, false)
		if i >= len(b) {
			return i, "unexpected end of JSON input"
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, ""
		case c < 0x20:
			return i, fmt.Sprintf("invalid control character %q in a string", c)
		}
		// A backslash. Invalid UTF-8 is no error: string makes it U+FFFD.
		if i+1 >= len(b) {
			return i, "unexpected end of JSON input"
		}
		e := b[i+1]
		i += 2
		switch e {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		case 'u':
			if len(b)-i < 4 || !isHex(b[i]) || !isHex(b[i+1]) || !isHex(b[i+2]) || !isHex(b[i+3]) {
				return i, "invalid \\u escape"
			}
			i += 4
		default:
			return i, fmt.Sprintf("invalid escape \\%c", e)
		}
	}
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// skipNumber checks the number at b[i] by JSON's grammar, as
// numberGrammar, and returns the index past it, or where and why it is
// refused.
func skipNumber(b []byte, i int) (int, string) {
	if b[i] == '-' {
		i++
	}
	if i < len(b) && b[i] == '0' {
		i++
	} else {
		start := i
		for i < len(b) && b[i]-'0' <= 9 {
			i++
		}
		if i == start {
			return i, "invalid number"
		}
	}
	if i < len(b) && b[i] == '.' {
		i++
		start := i
		for i < len(b) && b[i]-'0' <= 9 {
			i++
		}
		if i == start {
			return i, "invalid number: no digits after '.'"
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		start := i
		for i < len(b) && b[i]-'0' <= 9 {
			i++
		}
		if i == start {
			return i, "invalid number: no digits in the exponent"
		}
	}
	return i, ""
}
