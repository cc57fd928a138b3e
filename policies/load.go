package policies

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
)

// Bounds of definition files.
const (
	// MaxFileSize bounds one definition file, in bytes.
	MaxFileSize = 1 << 20
	// MinDebounce and MaxDebounce bound a trigger's debounce window. The
	// server fires delayed messages at whole seconds.
	MinDebounce = time.Second
	MaxDebounce = time.Hour
	// MaxDebounceWait bounds a debounce's max_wait.
	MaxDebounceWait = 24 * time.Hour
)

// Parse reads one agent definition from YAML, validates it, compiles its
// rules and checks it against this runtime (Check). file names the
// source in errors. Errors wrap ErrInvalid and
// are *Error values (joined when there are several) with the line and
// column of the field at fault; for a CEL error, of the fault within the
// expression.
func Parse(file string, data []byte) (*Compiled, error) {
	if len(data) > MaxFileSize {
		return nil, &Error{File: file, Err: fmt.Errorf("%d bytes, max %d", len(data), MaxFileSize)}
	}
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil, yamlError(file, err)
	}
	var docs []*ast.DocumentNode
	for _, d := range f.Docs {
		if d != nil && d.Body != nil {
			docs = append(docs, d)
		}
	}
	switch len(docs) {
	case 0:
		return nil, &Error{File: file, Err: errors.New("empty: want one agent definition")}
	case 1:
	default:
		return nil, &Error{File: file, Line: docs[1].Body.GetToken().Position.Line, Err: errors.New("more than one YAML document: want one agent a file")}
	}
	body := docs[0].Body
	// Aliases can expand exponentially, the YAML decoder panics on a tag
	// over a value of another kind than its field's (a tagged scalar where
	// a list belongs), and nothing in a definition needs either.
	for _, r := range []struct {
		typ  ast.NodeType
		what string
	}{{ast.AliasType, "YAML anchors and aliases are not supported"}, {ast.AnchorType, "YAML anchors and aliases are not supported"}, {ast.TagType, "YAML tags (such as !!str) are not supported; quote a value that starts with !"}} {
		if n := ast.Filter(r.typ, body); len(n) > 0 {
			return nil, &Error{File: file, Line: n[0].GetToken().Position.Line, Column: n[0].GetToken().Position.Column,
				Err: errors.New(r.what)}
		}
	}
	if body.Type() != ast.MappingType {
		return nil, &Error{File: file, Line: body.GetToken().Position.Line, Err: fmt.Errorf("document is a %s: want a mapping of fields", body.Type())}
	}
	if errs := retiredFields(file, body); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	var d Definition
	if err := decodeBody(body, &d); err != nil {
		e := yamlError(file, err)
		if e.Line == 0 {
			e.Line, e.Column, e.Field = valuePosition(body, err.Error())
		} else if path, kind, ok := pathAt(body, e.Line, e.Column); ok {
			e.Field = path
			if m := mismatchRE.FindStringSubmatch(e.Err.Error()); m != nil {
				e.Err = fmt.Errorf("is a %s, want %s", kind, goTypeWord(m[1]))
			}
		}
		return nil, e
	}
	lines := strings.Split(string(data), "\n")
	loc := func(field string, exprLine, exprCol int) (int, int) {
		line, col, style := position(f, field)
		if exprLine == 0 || line == 0 {
			return line, col
		}
		return exprPosition(lines, line, col, style, exprLine, exprCol)
	}
	chk := &checker{loc: loc}
	out := compile(d, chk)
	checkRuntime(chk, d)
	c, err := chk.result(out)
	if err != nil {
		for _, e := range Errors(err) {
			e.File = file
		}
		return nil, err
	}
	c.file, c.loc = file, loc
	return c, nil
}

var indexRE = regexp.MustCompile(`\[(\d+)\]`)

// retired are fields an earlier release took and this one refuses, by
// their path with indices written [], with what replaced them.
var retired = map[string]string{
	"triggers[].max_concurrent": "no longer supported: the limit is the agent's, concurrency: {limit: N, key: CEL} (across every session of the agent, or per key)",
}

// retiredFields refuses the retired fields of a document, each where it
// is written.
func retiredFields(file string, body ast.Node) []error {
	var errs []error
	walkKeys(body, "", func(path string, mv *ast.MappingValueNode) {
		if why, ok := retired[indexRE.ReplaceAllString(path, "[]")]; ok {
			tk := mv.Key.GetToken()
			errs = append(errs, &Error{File: file, Line: tk.Position.Line, Column: tk.Position.Column, Field: path, Err: errors.New(why)})
		}
	})
	return errs
}

// walkKeys calls fn for every mapping key under n with its field path
// ("triggers[0].rate.key").
func walkKeys(n ast.Node, prefix string, fn func(path string, mv *ast.MappingValueNode)) {
	switch n := n.(type) {
	case *ast.MappingNode:
		for _, mv := range n.Values {
			walkKeys(mv, prefix, fn)
		}
	case *ast.MappingValueNode:
		key := n.Key.GetToken().Value
		if prefix != "" {
			key = prefix + "." + key
		}
		fn(key, n)
		walkKeys(n.Value, key, fn)
	case *ast.SequenceNode:
		for i, v := range n.Values {
			walkKeys(v, fmt.Sprintf("%s[%d]", prefix, i), fn)
		}
	case *ast.TagNode:
		walkKeys(n.Value, prefix, fn)
	}
}

// pathAt names the field whose key or value starts at line and col, with
// the YAML kind of its value.
func pathAt(body ast.Node, line, col int) (path, kind string, ok bool) {
	at := func(n ast.Node) bool {
		tk := n.GetToken()
		return tk != nil && tk.Position.Line == line && tk.Position.Column == col
	}
	walkKeys(body, "", func(p string, mv *ast.MappingValueNode) {
		if ok {
			return
		}
		if at(mv.Key) || at(mv.Value) {
			path, ok = p, true
			switch mv.Value.Type() {
			case ast.MappingType, ast.MappingValueType:
				kind = "mapping"
			case ast.SequenceType:
				kind = "sequence"
			default:
				kind = "scalar"
			}
		}
	})
	return path, kind, ok
}

// mismatchRE matches go-yaml's message for a value of the wrong kind.
var mismatchRE = regexp.MustCompile(`cannot unmarshal .* into Go (?:struct field .* of type|value of type) (\S+)`)

// goTypeWord says a Go type of the schema in words.
func goTypeWord(t string) string {
	switch {
	case t == "string":
		return "a string"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "a whole number"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case t == "bool":
		return "true or false"
	case strings.HasPrefix(t, "[]"):
		return "a sequence"
	}
	return "a mapping"
}

// position finds the value node of a field path such as
// "triggers[0].when" and reports where it is and its block scalar style:
// '|', '>' or 0 for a flow scalar. It falls back to the nearest enclosing
// field found.
func position(f *ast.File, field string) (line, col int, style byte) {
	parts := strings.Split(indexRE.ReplaceAllString(field, ".[$1]"), ".")
	for n := len(parts); n > 0; n-- {
		path := "$"
		for _, p := range parts[:n] {
			if strings.HasPrefix(p, "[") {
				path += p
			} else {
				path += "." + p
			}
		}
		p, err := yaml.PathString(path)
		if err != nil {
			continue
		}
		node, err := p.FilterFile(f)
		if err != nil || node == nil {
			continue
		}
		tk := node.GetToken()
		if tk == nil {
			continue
		}
		if lit, ok := node.(*ast.LiteralNode); ok && lit.Start != nil && lit.Start.Value != "" {
			style = lit.Start.Value[0]
		}
		return tk.Position.Line, tk.Position.Column, style
	}
	return 0, 0, 0
}

// exprPosition maps a 1-based position within a field's value to the
// file: for a flow scalar, from where the value starts; for a literal
// block (|), line by line below the indicator; for a folded block (>),
// whose lines CEL sees joined by spaces, along the joined text.
func exprPosition(lines []string, line, col int, style byte, exprLine, exprCol int) (int, int) {
	if style == 0 {
		if exprLine == 1 {
			return flowPosition(lines, line, col, exprCol)
		}
		return line + exprLine - 1, exprCol
	}
	// The body starts on the line after the indicator; its indentation is
	// that of its first non-blank line.
	var body []int // file line numbers of the body, 1-based
	indent := -1
	for n := line + 1; n <= len(lines); n++ {
		l := lines[n-1]
		if strings.TrimSpace(l) == "" {
			body = append(body, n)
			continue
		}
		ind := len(l) - len(strings.TrimLeft(l, " "))
		if indent < 0 {
			indent = ind
		}
		if ind < indent {
			break
		}
		body = append(body, n)
	}
	if indent < 0 || len(body) == 0 {
		return line, col
	}
	if style == '|' {
		if exprLine-1 < len(body) {
			return body[exprLine-1], indent + exprCol
		}
		return body[len(body)-1], indent + 1
	}
	rest := exprCol - 1
	for _, n := range body {
		content := strings.TrimRight(lines[n-1], " ")
		if len(content) <= indent {
			continue
		}
		content = content[indent:]
		if rest <= len(content) {
			return n, indent + rest + 1
		}
		rest -= len(content) + 1
	}
	return body[len(body)-1], indent + 1
}

// flowPosition maps a column of a flow scalar's value (plain, single- or
// double-quoted), which starts at line and col, to the file. YAML folds
// such a scalar's lines into one, joined by single spaces with each
// line's surrounding blanks dropped, so CEL reports its errors on line 1
// of the folded text; walk the source along it. An escape (a doubled
// single quote, a backslash sequence) is one character of the value.
func flowPosition(lines []string, line, col, exprCol int) (int, int) {
	if line < 1 || line > len(lines) || col < 1 || col > len(lines[line-1]) {
		return line, col + exprCol - 1
	}
	quote := lines[line-1][col-1]
	if quote == '"' || quote == '\'' {
		col++
	} else {
		quote = 0
	}
	rest := exprCol - 1
	n, i := line, col-1
	for {
		l := strings.TrimRight(lines[n-1], " \t")
		for i < len(l) {
			if rest == 0 {
				return n, i + 1
			}
			switch c := l[i]; {
			case quote == '\'' && c == '\'' && i+1 < len(l) && l[i+1] == '\'':
				i += 2
			case quote == '\'' && c == '\'', quote == '"' && c == '"':
				return n, i + 1 // the closing quote
			case quote == '"' && c == '\\':
				i += escapeLen(l[i+1:]) + 1
			case quote == 0 && c == '#' && i > 0 && (l[i-1] == ' ' || l[i-1] == '\t'):
				i = len(l) // a comment ends the line
				continue
			default:
				i++
			}
			rest--
		}
		if rest == 0 || n == len(lines) {
			return n, i + 1
		}
		rest-- // the space the fold puts between lines
		n++
		next := lines[n-1]
		i = len(next) - len(strings.TrimLeft(next, " \t"))
	}
}

// escapeLen is the length of the double-quoted escape that esc starts,
// after its backslash.
func escapeLen(esc string) int {
	if esc == "" {
		return 0
	}
	switch esc[0] {
	case 'x':
		return min(3, len(esc))
	case 'u':
		return min(5, len(esc))
	case 'U':
		return min(9, len(esc))
	}
	return 1
}

// valuePosition finds, for a decoding error without a position (one
// from a field's own UnmarshalText), the scalar whose quoted value the
// message names, and the key it is under.
func valuePosition(body ast.Node, msg string) (line, col int, field string) {
	for _, n := range ast.Filter(ast.MappingValueType, body) {
		mv := n.(*ast.MappingValueNode)
		tk := mv.Value.GetToken()
		if tk == nil || mv.Value.Type() == ast.MappingType || mv.Value.Type() == ast.SequenceType {
			continue
		}
		if strings.Contains(msg, strconv.Quote(tk.Value)) {
			return tk.Position.Line, tk.Position.Column, mv.Key.String()
		}
	}
	return 0, 0, ""
}

// yamlError turns a go-yaml error into an *Error with its position.
func yamlError(file string, err error) *Error {
	var ye yaml.Error
	if errors.As(err, &ye) {
		e := &Error{File: file, Err: errors.New(ye.GetMessage())}
		if tk := ye.GetToken(); tk != nil {
			e.Line, e.Column = tk.Position.Line, tk.Position.Column
			e.Field = fieldAt(tk)
		}
		return e
	}
	return &Error{File: file, Err: err}
}

// fieldAt names the mapping key a token belongs to, when it is one.
func fieldAt(tk *token.Token) string {
	if tk == nil {
		return ""
	}
	if tk.Next != nil && tk.Next.Type == token.MappingValueType {
		return tk.Value
	}
	return ""
}

// LoadFile reads and parses one definition file.
func LoadFile(path string) (*Compiled, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("policies: %w", err)
	}
	if fi.Size() > MaxFileSize {
		return nil, &Error{File: path, Err: fmt.Errorf("%d bytes, max %d", fi.Size(), MaxFileSize)}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policies: %w", err)
	}
	return Parse(path, data)
}

// LoadDir parses every .yaml and .yml file directly in dir, in name
// order. It returns the definitions that parsed and every error; two
// files declaring the same agent is an error.
func LoadDir(dir string) ([]*Compiled, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("policies: read %s: %w", dir, err)
	}
	var (
		out  []*Compiled
		errs []error
		from = map[string]string{}
	)
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if e.IsDir() || (ext != ".yaml" && ext != ".yml") || e.Type()&fs.ModeType != 0 && e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		path := filepath.Join(dir, e.Name())
		c, err := LoadFile(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if prev, dup := from[c.Definition.Name]; dup {
			errs = append(errs, &Error{File: path, Field: "name", Err: fmt.Errorf("agent %q is also declared in %s", c.Definition.Name, prev)})
			continue
		}
		from[c.Definition.Name] = path
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *Compiled) int { return strings.Compare(a.Definition.Name, b.Definition.Name) })
	return out, errors.Join(errs...)
}

// decodeBody decodes a definition's body. A panic of the YAML decoder, on an
// input the checks before it did not foresee, is an error of that input,
// not of the process reading it.
func decodeBody(body ast.Node, d *Definition) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("YAML not understood: %v", r)
		}
	}()
	return yaml.NodeToValue(body, d, yaml.Strict())
}
