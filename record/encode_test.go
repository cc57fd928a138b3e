package record

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/jetloop/jetloop/model"
)

// filler makes a value of any type from a stream of bytes, each choice
// one byte (zero once the bytes run out), over every exported field, so
// a field added to State or Entry is filled too.
type filler struct {
	data []byte
	i    int
}

func (f *filler) next() byte {
	if f.i >= len(f.data) {
		return 0
	}
	c := f.data[f.i]
	f.i++
	return c
}

func (f *filler) u64() uint64 {
	var u uint64
	for range 8 {
		u = u<<8 | uint64(f.next())
	}
	return u
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// Strings and documents encoding/json writes in ways of its own.
var (
	someStrings = []string{"", "a", "bench", "<b>&amp;</b>", "\u2028x\u2029", "\x00\x01\x1f\b\f\n\r\t\x7f", `"\`, "\xff\xfe\xe2\x80", "é日本語🎉", "1µs", "call_1", "done", "tool_result", "assistant"}
	someRaws    = []string{"", "{}", `{"n":1}`, " { \"a\" : [ 1, 2 ] }\n", `"<&>"`, "{\"x\":\"\u2028\"}", "{", "null", "[]", `{"a":"b"} x`, "1e400", `{"s":"\ud800"}`}
	someFloats  = []float64{0, math.Copysign(0, -1), 1.5, 1e-7, 1e-6, 1e21, 1e20, 0.1, 123456789.125, -2.5e-10, math.NaN(), math.Inf(1)}
)

func (f *filler) fill(v reflect.Value, depth int) {
	c := f.next()
	if c%5 == 0 && v.Kind() != reflect.Struct {
		return // zero
	}
	switch t := v.Type(); {
	case t == timeType:
		var tm time.Time
		sec, nsec := int64(f.u64()%(1<<35)), int64(f.next())*3_900_000
		// Values encoding/json refuses, rarely: a state holds many times.
		pick := c % 64
		if f.next()%4 != 0 {
			pick = 0
		}
		switch pick {
		case 61:
			tm = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
		case 62:
			tm = time.Unix(sec, nsec).In(time.FixedZone("", 24*3600+int(f.next())))
		case 63:
			tm = time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)
		default:
			tm = time.Unix(sec, nsec).UTC()
			if c%3 == 0 {
				tm = time.Unix(sec, 0).In(time.FixedZone("", (int(f.next())-128)*450+int(f.next()%60)))
			}
		}
		v.Set(reflect.ValueOf(tm))
		return
	case t == rawType:
		s := someRaws[int(f.next())%len(someRaws)]
		if s == "{" || s == `{"a":"b"} x` || s == "1e400" {
			if c%16 != 0 {
				s = `{"n":1}`
			}
		}
		if s == "" && c%2 == 0 {
			v.Set(reflect.ValueOf(json.RawMessage{}))
			return
		}
		v.SetBytes([]byte(s))
		return
	}
	switch v.Kind() {
	case reflect.String:
		if c%3 == 0 {
			n := int(f.next() % 12)
			b := make([]byte, n)
			for i := range b {
				b[i] = f.next()
			}
			v.SetString(string(b))
			return
		}
		v.SetString(someStrings[int(f.next())%len(someStrings)])
	case reflect.Bool:
		v.SetBool(c%2 == 1)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n := int64(f.u64())
		if c%3 == 0 {
			n %= 1000
		}
		v.SetInt(n >> (64 - v.Type().Bits()))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		n := f.u64()
		if c%3 == 0 {
			n %= 1000
		}
		v.SetUint(n >> (64 - v.Type().Bits()))
	case reflect.Float32, reflect.Float64:
		if c%4 == 0 {
			v.SetFloat(math.Float64frombits(f.u64()))
			return
		}
		x := someFloats[int(f.next())%len(someFloats)]
		if (math.IsNaN(x) || math.IsInf(x, 0)) && c%16 != 0 {
			x = 0.25
		}
		v.SetFloat(x)
	case reflect.Pointer:
		if depth > 6 {
			return
		}
		p := reflect.New(v.Type().Elem())
		f.fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		if depth > 6 {
			return
		}
		n := int(c % 4)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			f.fill(s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				f.fill(v.Field(i), depth+1)
			}
		}
	default:
		panic("filler: no values of " + v.Type().String())
	}
}

// checkState holds the state encoder to encoding/json for the state the
// bytes make: the same bytes (or the same error), and a decode of them
// that encodes the same way again.
func checkState(t *testing.T, data []byte) {
	t.Helper()
	var st State
	(&filler{data: data}).fill(reflect.ValueOf(&st).Elem(), 0)
	want, werr := json.Marshal(st)
	got, gerr := encodeStateJSON(&st)
	if werr != nil || gerr != nil {
		if werr == nil || gerr == nil || werr.Error() != gerr.Error() {
			t.Fatalf("errors differ: encoding/json %v, encoder %v", werr, gerr)
		}
		return
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("state encodings differ:\nencoding/json %s\nencoder       %s", want, got)
	}
	var back State
	if json.Unmarshal(got, &back) != nil {
		// A value the decoder refuses (a negative duration), whoever
		// encoded it: the bytes are encoding/json's own.
		return
	}
	want2, _ := json.Marshal(back)
	got2, err := encodeStateJSON(&back)
	if err != nil || !bytes.Equal(got2, want2) {
		t.Fatalf("decoded state encodes differently (%v):\nencoding/json %s\nencoder       %s", err, want2, got2)
	}
}

// checkEntry is checkState for an entry's stored form.
func checkEntry(t *testing.T, data []byte) {
	t.Helper()
	var e Entry
	f := &filler{data: data}
	f.fill(reflect.ValueOf(&e).Elem(), 0)
	// The kinds whose form differs, often.
	kinds := []Kind{KindToolResult, KindAssistant, KindToolCall, KindEvent, KindSummary}
	if k := f.next(); k%2 == 0 {
		e.Kind = kinds[int(k/2)%len(kinds)]
	}
	want, werr := marshalEntryReflect(e)
	got, gerr := e.MarshalJSON()
	if werr != nil || gerr != nil {
		if werr == nil || gerr == nil || werr.Error() != gerr.Error() {
			t.Fatalf("errors differ: encoding/json %v, encoder %v", werr, gerr)
		}
		return
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("entry encodings differ:\nencoding/json %s\nencoder       %s", want, got)
	}
	// Inside another document, as the API writes it.
	outer, err := json.Marshal([]Entry{e})
	if err != nil {
		t.Fatal(err)
	}
	var back []Entry
	if json.Unmarshal(outer, &back) != nil || len(back) != 1 {
		return
	}
	want2, _ := marshalEntryReflect(back[0])
	got2, err := back[0].MarshalJSON()
	if err != nil || !bytes.Equal(got2, want2) {
		t.Fatalf("decoded entry encodes differently (%v):\nencoding/json %s\nencoder       %s", err, want2, got2)
	}
}

func FuzzStateEncoding(f *testing.F) {
	for seed := range uint64(8) {
		f.Add(randomBytes(seed, 1024))
	}
	f.Fuzz(checkState)
}

func FuzzEntryEncoding(f *testing.F) {
	for seed := range uint64(8) {
		f.Add(randomBytes(seed, 512))
	}
	f.Fuzz(checkEntry)
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 13))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestEncodingMatchesEncodingJSON runs the fuzz checks over many random
// values in every test run, and over the states and entries of a
// session as the worker writes them.
func TestEncodingMatchesEncodingJSON(t *testing.T) {
	for seed := range uint64(3000) {
		checkState(t, randomBytes(seed, 1536))
		checkEntry(t, randomBytes(seed, 512))
	}
	now := time.Now().UTC()
	st := NewState("bench", "s-1", now)
	st.Status, st.Turns, st.Steps, st.NextEntry = StatusWorking, 3, 6, 9
	st.Usage = model.Usage{InputTokens: 120, OutputTokens: 30, CostUSD: 0.00042}
	st.Limits.MaxTurns = 50
	st.Calls = []CallRef{{ID: "call_8", Name: "noop", Entry: 8}}
	st.Pending = &Intent{Kind: StepTool, Step: 7, Turn: 3, Entry: 9, CallID: "call_8", Tool: "noop", Args: json.RawMessage(`{"n":1}`), Replay: ReplaySafe, Owner: "w1", Started: now}
	want, _ := json.Marshal(st)
	if got, err := encodeStateJSON(&st); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("worker state: %v\nencoding/json %s\nencoder       %s", err, want, got)
	}
	for _, e := range []Entry{
		{ID: 8, Kind: KindAssistant, Turn: 3, Time: now, Usage: &st.Usage, Model: "scripted", Step: 6, Entries: 2},
		{ID: 9, Kind: KindToolCall, Turn: 3, Time: now, Name: "noop", Args: json.RawMessage(`{"n":1}`), CallID: "call_8", Step: 6},
		{ID: 10, Kind: KindToolResult, Turn: 3, Time: now, Name: "noop", CallID: "call_8", Result: "ok", Step: 7, Entries: 1},
	} {
		want, _ := marshalEntryReflect(e)
		if got, err := e.MarshalJSON(); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("worker entry: %v\nencoding/json %s\nencoder       %s", err, want, got)
		}
	}
}

func BenchmarkEncodeState(b *testing.B) {
	now := time.Now().UTC()
	st := NewState("bench", "steps-abcdefghijklmnop-0-0", now)
	st.Status, st.Turns, st.Steps, st.NextEntry, st.RunTurns, st.Runs = StatusWorking, 30, 60, 92, 30, 1
	st.Limits.MaxTurns = 50
	st.Calls = []CallRef{{ID: "call_91", Name: "noop", Entry: 91}}
	st.Pending = &Intent{Kind: StepTool, Step: 61, Turn: 30, Entry: 92, CallID: "call_91", Tool: "noop", Args: json.RawMessage(`{"n":1}`), Replay: ReplaySafe, Owner: "bench", Started: now}
	st.RunStarted, st.Owner, st.Epoch, st.Updated = now, "bench", 1, now
	b.Run("encoder", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = encodeStateJSON(&st)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(st)
		}
	})
}
