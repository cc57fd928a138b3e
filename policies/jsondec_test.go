package policies

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"reflect"
	"testing"
)

// parseJSONStd is ParseJSON by encoding/json, the reference decodeJSON is
// held to.
func parseJSONStd(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if rest := bytes.TrimLeft(raw[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return nil, errTrailing
	}
	return stdNumbers(v), nil
}

var errTrailing = &json.SyntaxError{}

func stdNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = stdNumbers(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = stdNumbers(e)
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

var jsonSeeds = []string{
	`{"a":1,"b":[true,false,null],"c":{"d":"e"}}`,
	`{"n":-0,"f":1.5,"e":1e3,"big":12345678901234567890,"inf":1e400,"neg":-12}`,
	`"\u00e9\ud83d\ude00\ud800x\udc00\"\\\/\b\f\n\r\t"`,
	"\"\xff\xfe ok\"",
	`{"a":1,"a":2}`,
	`[]`, `{}`, ` 7 `, `{"a":1}}`, `[1,]`, `{"a" 1}`, `01`, `1.`, `-`, `1e`, `"\x"`, "\"a\x01\"", `tru`, ``,
}

// TestDecodeJSON holds decodeJSON to encoding/json on the seeds and on
// the GitHub fixtures.
func TestDecodeJSON(t *testing.T) {
	inputs := jsonSeeds
	for _, f := range []string{"../ingest/testdata/github/pull_request/opened.payload.json", "../ingest/testdata/github/issue_comment/created.payload.json", "../ingest/testdata/github/push/payload.json"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, string(b))
	}
	for _, in := range inputs {
		sameAsStd(t, []byte(in))
	}
}

func sameAsStd(t *testing.T, raw []byte) {
	t.Helper()
	got, err := decodeJSON(raw)
	want, werr := parseJSONStd(raw)
	if (err != nil) != (werr != nil) {
		t.Fatalf("%q: error %v, encoding/json's %v", raw, err, werr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: %#v, encoding/json's %#v", raw, got, want)
	}
}

// FuzzDecodeJSON holds decodeJSON to encoding/json on any input.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 1<<16 {
			return
		}
		sameAsStd(t, raw)
	})
}

// BenchmarkParseJSON compares decodeJSON with encoding/json on a pull
// request webhook.
func BenchmarkParseJSON(b *testing.B) {
	raw, err := os.ReadFile("../ingest/testdata/github/pull_request/opened.payload.json")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("decodeJSON", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			if _, err := decodeJSON(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("paths", func(b *testing.B) {
		// What a webhook's receiver and a pull request rule read.
		p := &DataPaths{}
		for _, path := range [][]string{{"action"}, {"repository", "full_name"}, {"pull_request", "number"}, {"pull_request", "draft"}} {
			p.Add(path...)
		}
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			if _, err := ParseJSONPaths(raw, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			if _, err := parseJSONStd(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
}
