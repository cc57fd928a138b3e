package policies

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"mime"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
)

// Vars are the variables of one evaluation: `event` for triggers, `tool`
// and `session` for approvals. Build them once per event with EventVars
// and share them across every rule; do not modify them.
type Vars map[string]any

// boundKey is where Vars built by EventData keep the bound of their
// inputs' sizes (inputBound): no CEL identifier, so no rule can read it.
const boundKey = "\x00bound"

// inputBound bounds the size (in CEL's terms: characters, bytes,
// elements, entries) of every string, bytes, list and map the variables
// hold, at any depth (see costBound).
type inputBound uint64

// boundOfVars returns the input bound vars carry, and false when they
// carry none (they were not built by EventData).
func boundOfVars(vars Vars) (uint64, bool) {
	b, ok := vars[boundKey].(inputBound)
	return uint64(b), ok
}

// EventVars returns the variables triggers see for e. The event's data is
// parsed when its content type is JSON (or absent and the data is JSON):
// numbers without a fraction become ints, so
// `event.data.pull_request.number == 12` and
// `string(event.data.pull_request.number)` read as expected. Text data is
// a string; anything else is bytes. A JSON body that does not parse is an
// error.
func EventVars(e event.Event) (Vars, error) {
	return NewEventData(e).Vars(true)
}

// EventData is what rules read of one event, its data decoded at most
// once and only when a rule reads it: build one per event and ask it for
// the Vars of every rule.
type EventData struct {
	e       event.Event
	data    any
	err     error
	decoded bool
	// own: data was decoded here, from e's data, so that its length
	// bounds every size within it.
	own bool
	// within bounds the sizes within data once computed (sizeWithin);
	// 0 until then.
	within uint64
	// paths are what of the data is decoded: nil, all of it.
	paths *DataPaths
}

// NewEventData returns the rules' view of e; its data is decoded on the
// first Vars(true).
func NewEventData(e event.Event) *EventData { return &EventData{e: e} }

// DecodedEventData returns the rules' view of e whose data its receiver
// has decoded already, as ParseJSON does, into data.
func DecodedEventData(e event.Event, data any) *EventData {
	return &EventData{e: e, data: data, decoded: true}
}

// PartlyDecodedEventData is DecodedEventData for data its receiver
// decoded only paths of (ParseJSONPaths): rules that read no more see it
// as the whole; VarsFor decodes the data again for those that do.
func PartlyDecodedEventData(e event.Event, data any, paths *DataPaths) *EventData {
	return &EventData{e: e, data: data, decoded: true, paths: paths}
}

// VarsFor returns the variables triggers that read need of event.data
// see: Vars(false) when they read none of it, else the data decoded as
// far as they read (all of it when a receiver decoded less than they
// read, or when it is not JSON).
func (d *EventData) VarsFor(need *DataPaths) (Vars, error) {
	if need.Empty() {
		return d.Vars(false)
	}
	if d.decoded && !d.paths.Covers(need) {
		d.decoded, d.data, d.err, d.paths, d.within = false, nil, nil, nil, 0
	}
	return d.Vars(true)
}

// Vars returns the variables triggers see (see EventVars). With data
// false, event.data is null and the data is not decoded: for rules that
// do not read it (Compiled.ReadsData).
func (d *EventData) Vars(data bool) (Vars, error) {
	var v any
	if data {
		if !d.decoded {
			d.data, d.err = eventData(d.e)
			d.decoded, d.own = true, true
		}
		if d.err != nil {
			return nil, d.err
		}
		v = d.data
	}
	e := d.e
	n := uint64(minInputBound)
	if data {
		n = max(n, d.dataBound())
	}
	exts := make(map[string]any, len(e.Extensions()))
	n = max(n, uint64(len(e.Extensions())))
	for k, v := range e.Extensions() {
		s := fmt.Sprint(v)
		exts[k] = s
		n = max(n, uint64(len(k)), uint64(len(s)))
	}
	var tm time.Time
	if !e.Time().IsZero() {
		tm = e.Time().UTC()
	}
	id, source, typ, subject := e.ID(), e.Source(), e.Type(), e.Subject()
	ct, schema, sv := e.DataContentType(), e.DataSchema(), e.SpecVersion()
	for _, s := range [...]string{id, source, typ, subject, ct, schema, sv} {
		n = max(n, uint64(len(s)))
	}
	return Vars{"event": map[string]any{
		"id":              id,
		"source":          source,
		"type":            typ,
		"subject":         subject,
		"time":            tm,
		"datacontenttype": ct,
		"dataschema":      schema,
		"specversion":     sv,
		"data":            v,
		"extensions":      exts,
	}, boundKey: inputBound(n)}, nil
}

// dataBound bounds the sizes within the decoded data: its length in
// bytes when it was decoded here (a string, a list or a map decoded from
// n bytes of JSON or text is at most n long), else what sizeWithin finds
// in what the receiver decoded.
func (d *EventData) dataBound() uint64 {
	if d.own {
		return uint64(len(d.e.Data()))
	}
	if d.within == 0 {
		d.within = max(1, sizeWithin(d.data, 0))
	}
	return d.within
}

// sizeWithin is the largest size of v and of any value within it; a
// value of a type a decoder does not make, or nested deeper than a
// decoder goes, has no bound (costCap).
func sizeWithin(v any, depth int) uint64 {
	if depth > maxJSONDepth {
		return costCap
	}
	switch x := v.(type) {
	case nil, bool, int64, uint64, float64, int:
		return 1
	case string:
		return uint64(len(x))
	case []byte:
		return uint64(len(x))
	case []any:
		n := uint64(len(x))
		for _, e := range x {
			n = max(n, sizeWithin(e, depth+1))
		}
		return n
	case map[string]any:
		n := uint64(len(x))
		for k, e := range x {
			n = max(n, uint64(len(k)), sizeWithin(e, depth+1))
		}
		return n
	}
	return costCap
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
// nil, int64 (numbers without fraction or exponent that fit) and float64
// (numbers out of a float64's range stay their text). Anything but space
// after the document is an error.
func ParseJSON(raw []byte) (any, error) {
	v, err := decodeJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("parse JSON: %w", err)
	}
	return v, nil
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
