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
		if d.i < len(d.b) && d.b[d.i] == ' ' {
			d.i++
		}
		d.space()
		if child == nil && depth <= maxJSONDepth-fastLevels {
			// A member no path reads, as skip would take it.
			if end, ok := skipFast(d.b, d.i); ok {
				d.i = end
				goto next
			}
		}
		if v, err := d.valueIn(depth, child); err != nil {
			return nil, err
		} else if child != nil {
			m[k] = v
		}
	next:
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
// none. It reads eight bytes at a time, a word holding such a byte
// exactly when stops sets a lane's high bit.
func stringEnd(b []byte, j int, ascii bool) int {
	if j < 0 || j > len(b) {
		return j
	}
	if ascii {
		for ; j < len(b)-7; j += 8 {
			x := binary.LittleEndian.Uint64(b[j : j+8])
			if m := stops(x) | x&highBits; m != 0 {
				return j + bits.TrailingZeros64(m)/8
			}
		}
	} else {
		for ; j < len(b)-7; j += 8 {
			x := binary.LittleEndian.Uint64(b[j : j+8])
			if m := stops(x) &^ x; m != 0 {
				return j + bits.TrailingZeros64(m)/8
			}
		}
	}
	for ; j < len(b); j++ {
		if c := b[j]; c == '"' || c == '\\' || c < 0x20 || ascii && c >= utf8.RuneSelf {
			return j
		}
	}
	return j
}

// stops sets, of the lanes of word x that hold a byte below 0x80, the
// high bit of the lowest that holds a quote, a backslash or a control
// character, if any, and maybe of lanes above it, of no other: the lane
// of a stop is the lowest one set in stops(x) &^ x. A lane of y = x^0x02
// is below 0x21 exactly where x holds a control character or a quote
// (the xor keeps 0x00-0x1f among themselves and swaps 0x20 with 0x22),
// and a lane of z = x^'\\' is below 0x01 exactly at a backslash. Where
// v >= n a lane of v-n has its high bit set only if v >= 0x80+n, and so x
// >= 0x80 (x, y and z share their high bits), unless a borrow reached
// it; a borrow starts only at a lane where v < n, setting its high bit,
// and reaches only the lanes above it.
func stops(x uint64) uint64 {
	y, z := x^(lanes*0x02), x^(lanes*'\\')
	return ((y - lanes*0x21) | (z - lanes)) & highBits
}

// skipSpace returns the index of the first byte of b from i on that is
// not JSON space. The blanks after a blank or a new line, what
// pretty-printed JSON indents by, it passes a word at a time: a word xor
// eight blanks is zero in their lanes.
func skipSpace(b []byte, i int) int {
	if i < 0 {
		return i
	}
	for i < len(b) {
		switch b[i] {
		case ' ', '\n':
			j := i + 1
			for ; j < len(b)-7; j += 8 {
				if y := binary.LittleEndian.Uint64(b[j:j+8]) ^ (lanes * ' '); y != 0 {
					j += bits.TrailingZeros64(y) / 8
					break
				}
			}
			for j < len(b) && b[j] == ' ' {
				j++
			}
			i = j
		case '\t', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skip checks the value at d.i as value would and moves past it,
// building nothing, with value's errors. Most values skipFast takes; what
// it does not (an error, nesting past its stack) skipChecked walks again
// from the start, to say what is wrong where, or to take it.
func (d *jsonDecoder) skip(depth int) error {
	if depth <= maxJSONDepth-fastLevels {
		if end, ok := skipFast(d.b, d.i); ok {
			d.i = end
			return nil
		}
	}
	return d.skipChecked(depth)
}

// fastLevels is how many levels of nesting skipFast keeps: the bits of a
// word but its marker.
const fastLevels = 63

// skipFast returns the index past the value at b[i] when skip would take
// it and it is nested at most fastLevels deep, and false otherwise, for
// skipChecked to say why. Its stack of open containers is one word: a
// marker bit above one bit a level, set for an object, the innermost
// lowest. It keeps nothing else across a value, so that the walk's
// variables stay in registers, and it reads a string's plain bytes a
// word at a time here rather than in a call.
func skipFast(b []byte, i int) (int, bool) {
	if i < 0 {
		return 0, false
	}
	stk := uint64(1)
	var c byte
	var j int
value:
	if i >= len(b) {
		return 0, false
	}
	switch c = b[i]; c {
	case '"':
		for j = i + 1; j < len(b)-7; j += 8 {
			x := binary.LittleEndian.Uint64(b[j : j+8])
			if m := stops(x) &^ x; m != 0 {
				j += bits.TrailingZeros64(m) / 8
				break
			}
		}
		// j is at the first stop, or where the last bytes begin.
		if j < len(b) && b[j] == '"' {
			i = j + 1
		} else if i = skipStr(b, i); i < 0 {
			return 0, false
		}
	case '{', '[':
		if stk >= 1<<fastLevels {
			return 0, false
		}
		stk <<= 1
		i++
		if i < len(b) && b[i] <= ' ' {
			i = skipSpace(b, i)
		}
		if c == '{' {
			stk |= 1
			if i < len(b) && b[i] == '}' {
				i++
				stk >>= 1
				break
			}
			goto key
		}
		if i < len(b) && b[i] == ']' {
			i++
			stk >>= 1
			break
		}
		goto value
	case 't':
		if len(b)-i < 4 || binary.LittleEndian.Uint32(b[i:]) != 't'|'r'<<8|'u'<<16|'e'<<24 {
			return 0, false
		}
		i += 4
	case 'f':
		if len(b)-i < 5 || binary.LittleEndian.Uint32(b[i+1:]) != 'a'|'l'<<8|'s'<<16|'e'<<24 {
			return 0, false
		}
		i += 5
	case 'n':
		if len(b)-i < 4 || binary.LittleEndian.Uint32(b[i:]) != 'n'|'u'<<8|'l'<<16|'l'<<24 {
			return 0, false
		}
		i += 4
	default:
		var err string
		if c != '-' && c-'0' > 9 {
			return 0, false
		}
		if i, err = skipNumber(b, i); err != "" {
			return 0, false
		}
	}
next:
	// A value ended: what follows it in the container it is in.
	if stk == 1 {
		return i, true
	}
	if i < len(b) && b[i] <= ' ' {
		i = skipSpace(b, i)
	}
	if i >= len(b) {
		return 0, false
	}
	switch c = b[i]; {
	case c == ',':
		i++
		if i < len(b) && b[i] <= ' ' {
			i = skipSpace(b, i)
		}
		if stk&1 == 0 {
			goto value
		}
	case c == '}' && stk&1 != 0, c == ']' && stk&1 == 0:
		i++
		stk >>= 1
		goto next
	default:
		return 0, false
	}
key:
	// In an object, after '{' or ',' and space: a key, ':', space.
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	for j = i + 1; j < len(b)-7; j += 8 {
		x := binary.LittleEndian.Uint64(b[j : j+8])
		if m := stops(x) &^ x; m != 0 {
			j += bits.TrailingZeros64(m) / 8
			break
		}
	}
	if j < len(b) && b[j] == '"' {
		i = j + 1
	} else if i = skipStr(b, i); i < 0 {
		return 0, false
	}
	if i < len(b) && b[i] <= ' ' {
		i = skipSpace(b, i)
	}
	if i >= len(b) || b[i] != ':' {
		return 0, false
	}
	i++
	if i < len(b) && b[i] == ' ' {
		i++
	}
	if i < len(b) && b[i] <= ' ' {
		i = skipSpace(b, i)
	}
	goto value
}

// skipStr returns the index past the string whose opening quote is at
// b[i], -1 if skipStringAt refuses it.
func skipStr(b []byte, i int) int {
	if j := stringEnd(b, i+1, false); j < len(b) && b[j] == '"' {
		return j + 1
	}
	if j, err := skipStringAt(b, i); err == "" {
		return j
	}
	return -1
}

// skipChecked is skip's walk that says what is wrong where. It walks nested containers in
// one loop, keeping of each open one only whether it is an object:
// level k counts from the skipped value (level 0) inward, its bit is
// bit k of open below 64 and bit k%64 of more[k/64-1] from 64 on. depth
// is the nesting the value is in; the limit counts it with the levels.
func (d *jsonDecoder) skipChecked(depth int) error {
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
