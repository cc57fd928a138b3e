package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// DefaultMaxArgsBytes bounds the arguments of one call.
const DefaultMaxArgsBytes = 1 << 20

// maxProblems bounds how many schema violations an ArgsError lists: the
// model needs the first few to fix its call, not an essay.
const maxProblems = 8

// ArgsError reports arguments that do not match a tool's schema. Its
// message names the tool and each offending field, so it can be shown to
// the model as it is. It matches ErrInvalidArgs with errors.Is.
type ArgsError struct {
	Tool string
	// Problems are "field: what is wrong", the field a dotted path into the
	// arguments ("arguments" for the object itself).
	Problems []string
}

func (e *ArgsError) Error() string {
	return fmt.Sprintf("invalid arguments for tool %q: %s", e.Tool, strings.Join(e.Problems, "; "))
}

// Unwrap makes errors.Is(err, ErrInvalidArgs) hold.
func (e *ArgsError) Unwrap() error { return ErrInvalidArgs }

var printer = message.NewPrinter(language.English)

// argsSchema is a tool's compiled argument schema.
type argsSchema struct {
	tool   string
	schema *jsonschema.Schema
}

// compileSchema compiles a tool's argument schema (JSON Schema, draft
// 2020-12 unless it says otherwise). The root must describe an object, as
// every model API requires. References to anything outside the schema
// itself are refused: a schema is data, and compiling it must not read
// files or the network.
func compileSchema(tool string, raw json.RawMessage) (*argsSchema, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, fmt.Errorf("tool %q: schema is empty; an argument-less tool declares {\"type\":\"object\"}", tool)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("tool %q: schema is not JSON: %w", tool, err)
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("tool %q: schema is %s, want a JSON object", tool, jsonKind(doc))
	}
	if typ, _ := obj["type"].(string); typ != "object" {
		return nil, fmt.Errorf("tool %q: schema type is %v, want \"object\" (arguments are an object)", tool, obj["type"])
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(jsonschema.SchemeURLLoader{}) // no file or network loads
	url := "tool:///" + tool + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("tool %q: schema: %w", tool, err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("tool %q: schema does not compile: %w", tool, err)
	}
	return &argsSchema{tool: tool, schema: s}, nil
}

// parseArgs decodes a call's arguments: a JSON object of at most max
// bytes. Empty arguments and null mean {} (some models send nothing for
// a tool without parameters).
func parseArgs(tool string, raw json.RawMessage, max int) (any, error) {
	if len(raw) > max {
		return nil, &ArgsError{Tool: tool, Problems: []string{fmt.Sprintf("arguments: %d bytes, at most %d allowed", len(raw), max)}}
	}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return map[string]any{}, nil
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(trimmed))
	if err != nil {
		return nil, &ArgsError{Tool: tool, Problems: []string{"arguments: not valid JSON: " + err.Error()}}
	}
	if k := duplicateKey(trimmed); k != "" {
		// The schema sees the last value and a tool's decoder the first:
		// what was validated must be what runs.
		return nil, &ArgsError{Tool: tool, Problems: []string{fmt.Sprintf("arguments: key %q appears twice", k)}}
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, &ArgsError{Tool: tool, Problems: []string{fmt.Sprintf("arguments: got %s, want an object", jsonKind(v))}}
	}
	return v, nil
}

// validate checks decoded arguments against the schema.
func (s *argsSchema) validate(v any) error {
	err := s.schema.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &ArgsError{Tool: s.tool, Problems: []string{"arguments: " + err.Error()}}
	}
	var problems []string
	leaves(ve, func(e *jsonschema.ValidationError) {
		p := fieldPath(e.InstanceLocation) + ": " + e.ErrorKind.LocalizedString(printer)
		if len(problems) < maxProblems && !slices.Contains(problems, p) {
			problems = append(problems, p)
		}
	})
	if len(problems) == 0 {
		problems = []string{"arguments: " + ve.ErrorKind.LocalizedString(printer)}
	}
	return &ArgsError{Tool: s.tool, Problems: problems}
}

// leaves calls f on the innermost errors, which say what is wrong where;
// the outer ones only say that a subschema failed.
func leaves(e *jsonschema.ValidationError, f func(*jsonschema.ValidationError)) {
	if len(e.Causes) == 0 {
		f(e)
		return
	}
	for _, c := range e.Causes {
		leaves(c, f)
	}
}

func fieldPath(loc []string) string {
	if len(loc) == 0 {
		return "arguments"
	}
	return strings.Join(loc, ".")
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number, float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// CheckSchema reports whether schema would be accepted as a tool's
// argument schema: JSON Schema describing an object, compiling without
// loading anything from outside itself.
func CheckSchema(tool string, schema json.RawMessage) error {
	_, err := compileSchema(tool, schema)
	return err
}

// duplicateKey returns a key that appears twice in one object of the JSON
// document raw (which parses), or "".
func duplicateKey(raw []byte) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	type frame struct {
		obj  bool
		keys map[string]bool
		key  bool // the next string token of an object is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.obj && top.key {
			if k, ok := tok.(string); ok {
				if top.keys[k] {
					return k
				}
				top.keys[k] = true
				top.key = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{obj: true, keys: map[string]bool{}, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: in an object, a key comes next.
		if len(stack) > 0 && stack[len(stack)-1].obj {
			stack[len(stack)-1].key = true
		}
	}
}
