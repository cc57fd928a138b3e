package model

import "strings"

// WireName is a tool's name as the model APIs accept it: they allow
// [A-Za-z0-9_-] only, so the '.' of a mounted MCP tool ("github.list_issues")
// travels as "__" ("github__list_issues"). Server names have no '_', so the
// first "__" of a wire name is where the server's name ends.
func WireName(name string) string { return strings.ReplaceAll(name, ".", "__") }

// wireNames maps the wire names of a request's tools back to their names.
type wireNames map[string]string

func newWireNames(ts []ToolSpec) wireNames {
	m := wireNames{}
	for _, t := range ts {
		if w := WireName(t.Name); w != t.Name {
			m[w] = t.Name
		}
	}
	return m
}

// name is the tool a model's call names: a name the request offered under
// its wire name, else the name as the model wrote it.
func (m wireNames) name(wire string) string {
	if n, ok := m[wire]; ok {
		return n
	}
	return wire
}

// nameTools gives the response's tool calls their tools' names.
func (r *Response) nameTools(m wireNames) {
	for i := range r.ToolCalls {
		r.ToolCalls[i].Name = m.name(r.ToolCalls[i].Name)
	}
}
