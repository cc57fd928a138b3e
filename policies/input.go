package policies

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"mime"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
)

// Vars are the variables of one evaluation: `event` for triggers, `tool`
// and `session` for approvals. Build them once per event with EventVars
// and share them across every rule.
type Vars map[string]any

// EventVars returns the variables triggers see for e. The event's data is
// parsed when its content type is JSON (or absent and the data is JSON):
// numbers without a fraction become ints, so
// `event.data.pull_request.number == 12` and
// `string(event.data.pull_request.number)` read as expected. Text data is
// a string; anything else is bytes. A JSON body that does not parse is an
// error.
func EventVars(e event.Event) (Vars, error) {
	data, err := eventData(e)
	if err != nil {
		return nil, err
	}
	exts := make(map[string]any, len(e.Extensions()))
	for k, v := range e.Extensions() {
		exts[k] = fmt.Sprint(v)
	}
	var tm time.Time
	if !e.Time().IsZero() {
		tm = e.Time().UTC()
	}
	schema := ""
	if u := e.DataSchema(); u != "" {
		schema = u
	}
	return Vars{"event": map[string]any{
		"id":              e.ID(),
		"source":          e.Source(),
		"type":            e.Type(),
		"subject":         e.Subject(),
		"time":            tm,
		"datacontenttype": e.DataContentType(),
		"dataschema":      schema,
		"specversion":     e.SpecVersion(),
		"data":            data,
		"extensions":      exts,
	}}, nil
}

// Event returns the `event` map of v, for templates.
func (v Vars) Event() map[string]any {
	m, _ := v["event"].(map[string]any)
	return m
}

func eventData(e event.Event) (any, error) {
	raw := e.Data()
	if len(raw) == 0 {
		return nil, nil
	}
	mt := strings.ToLower(e.DataContentType())
	if parsed, _, err := mime.ParseMediaType(mt); err == nil {
		mt = parsed
	}
	switch {
	case mt == "application/json" || strings.HasSuffix(mt, "+json") || (mt == "" && json.Valid(raw)):
		v, err := ParseJSON(raw)
		if err != nil {
			return nil, fmt.Errorf("event %s data: %w", e.ID(), err)
		}
		return v, nil
	case strings.HasPrefix(mt, "text/"), mt == "":
		return string(raw), nil
	}
	return bytes.Clone(raw), nil
}

// ParseJSON decodes a JSON document into maps, slices, strings, bools,
// nil, int64 (numbers without fraction or exponent that fit) and float64.
func ParseJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("parse JSON: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("parse JSON: data after the first value")
	}
	return numbers(v), nil
}

func numbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
		return x
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, err := x.Float64()
		if err != nil || math.IsInf(f, 0) {
			return string(x)
		}
		return f
	}
	return v
}

// ToolCall is what approval rules see as `tool`.
type ToolCall struct {
	Name string
	// Args are the call's arguments as parsed JSON.
	Args map[string]any
	// ReplaySafe is the tool's declaration that running it twice is safe.
	ReplaySafe bool
}

// SessionInfo is what approval rules see as `session`.
type SessionInfo struct {
	Agent   string
	Name    string
	Turn    int
	Tokens  int64
	CostUSD float64
}

// ApprovalVars returns the variables approval rules see.
func ApprovalVars(t ToolCall, s SessionInfo) Vars {
	args := map[string]any{}
	if t.Args != nil {
		args = maps.Clone(t.Args)
	}
	return Vars{
		"tool": map[string]any{"name": t.Name, "args": args, "replay_safe": t.ReplaySafe},
		"session": map[string]any{
			"agent": s.Agent, "name": s.Name, "turn": int64(s.Turn),
			"tokens": s.Tokens, "cost_usd": s.CostUSD,
		},
	}
}
