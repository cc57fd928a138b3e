package policies

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
)

// TestEventDataPaths reads off an expression what of event.data it reads:
// the ends of its selection chains, or all of it where event.data is read
// other than by selection.
func TestEventDataPaths(t *testing.T) {
	for _, tt := range []struct{ src, want string }{
		{`event.type == "x"`, ""},
		{`!event.data.pull_request.draft`, "pull_request.draft"},
		{`event.data.repository.full_name + "#" + string(event.data.pull_request.number)`, "pull_request.number repository.full_name"},
		{`has(event.data.a.b)`, "a.b"},
		{`event.data.labels.exists(l, l.name == "bug")`, "labels"},
		{`event.data.a.b == 1 && size(event.data.a) > 1`, "a"},
		{`event.data["a"] == 1`, "*"},
		{`size(event.data) > 0`, "*"},
		{`has(event.data)`, "*"},
		{`event["data"].a == 1`, "*"},
		{`[event.data].size() == 1`, "*"},
	} {
		x, err := compileExpr(tt.src, anyOverEvent)
		if err != nil {
			t.Fatalf("%s: %v", tt.src, err)
		}
		if got := x.dataPaths.String(); got != tt.want {
			t.Errorf("%s: paths %q, want %q", tt.src, got, tt.want)
		}
		if x.readsData != (tt.want != "") {
			t.Errorf("%s: readsData %v, paths %q", tt.src, x.readsData, tt.want)
		}
	}
}

// prune is what ParseJSONPaths keeps of a whole decoded value v.
func prune(v any, p *DataPaths) any {
	if p.Whole() {
		return v
	}
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := map[string]any{}
	for k, c := range p.sub {
		if x, ok := m[k]; ok {
			out[k] = prune(x, c)
		}
	}
	return out
}

var pathSets = func() []*DataPaths {
	a := &DataPaths{}
	a.Add("a")
	deep := &DataPaths{}
	deep.Add("c", "d")
	deep.Add("pull_request", "number")
	deep.Add("repository", "full_name")
	deep.Add("issue", "pull_request")
	// Paths made by Union: members cloned and merged under their keys.
	more := &DataPaths{}
	more.Add("pull_request", "title")
	more.Add("c")
	more.Add("x", "y", "z")
	return []*DataPaths{{}, a, deep, a.Union(deep), deep.Union(more), more.Union(a).Union(deep)}
}()

// samePruned holds ParseJSONPaths to ParseJSON: it refuses what ParseJSON
// refuses, and keeps of the rest what prune keeps.
func samePruned(t *testing.T, raw []byte) {
	t.Helper()
	full, ferr := ParseJSON(raw)
	for _, p := range pathSets {
		got, err := ParseJSONPaths(raw, p)
		if (err != nil) != (ferr != nil) {
			t.Fatalf("%q with %s: error %v, ParseJSON's %v", raw, p, err, ferr)
		}
		if err == nil && !reflect.DeepEqual(got, prune(full, p)) {
			t.Fatalf("%q with %s: %#v, want %#v", raw, p, got, prune(full, p))
		}
	}
}

func TestParseJSONPaths(t *testing.T) {
	inputs := append([]string(nil), jsonSeeds...)
	inputs = append(inputs, `{"c":{"d":[1,{"x":"\u00e9"}],"e":"\x"}}`, `{"c":{"d":1},"c":2}`, `{"a\u0062":1,"ab":2}`,
		`{"c":[1,2]}`, `{"z":[[[{"q":"\ud800"}]]],"a":{}}`, `{"z":01}`, `{"z":"a`+"\x01"+`"}`, `{"z":[1 2]}`)
	for _, f := range []string{"../ingest/testdata/github/pull_request/opened.payload.json", "../ingest/testdata/github/issue_comment/created.payload.json", "../ingest/testdata/github/push/payload.json"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, string(b))
	}
	for _, in := range inputs {
		samePruned(t, []byte(in))
	}
}

// FuzzParseJSONPaths holds ParseJSONPaths to ParseJSON on any input.
func FuzzParseJSONPaths(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"c":{"d":[1,{"x":"\u00e9"}],"e":"\x"}}`))
	f.Add([]byte(`{"pull_request":{"number":2,"title":"x"},"issue":{"pull_request":{}}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 1<<16 {
			return
		}
		samePruned(t, raw)
	})
}

// TestVarsForReadsMoreThanDecoded: data a receiver decoded for fewer
// paths than the rules now read (rules changed meanwhile) is decoded
// again, whole.
func TestVarsForReadsMoreThanDecoded(t *testing.T) {
	e := event.New()
	e.SetID("1")
	e.SetSource("s")
	e.SetType("t")
	body := []byte(`{"a":1,"b":2}`)
	if err := e.SetData(event.ApplicationJSON, body); err != nil {
		t.Fatal(err)
	}
	a, b := &DataPaths{}, &DataPaths{}
	a.Add("a")
	b.Add("b")
	partial, err := ParseJSONPaths(body, a)
	if err != nil {
		t.Fatal(err)
	}
	d := PartlyDecodedEventData(e, partial, a)
	vars, err := d.VarsFor(a)
	if err != nil {
		t.Fatal(err)
	}
	if got := vars["event"].(map[string]any)["data"]; !reflect.DeepEqual(got, map[string]any{"a": int64(1)}) {
		t.Fatalf("data for the paths decoded: %v", got)
	}
	vars, err = d.VarsFor(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := vars["event"].(map[string]any)["data"]; !reflect.DeepEqual(got, map[string]any{"a": int64(1), "b": int64(2)}) {
		t.Fatalf("data for more paths: %v", got)
	}
	if vars, _ = d.VarsFor(&DataPaths{}); vars["event"].(map[string]any)["data"] != nil {
		t.Fatalf("data for no path: %v", vars["event"].(map[string]any)["data"])
	}
}

// TestStringRun holds stringRun to a byte-by-byte scan: for every byte
// value at every offset of strings of plain bytes up to 40 long, it
// stops at or before the first byte that ends a run, never past it, and
// within a word of it.
func TestStringRun(t *testing.T) {
	ends := func(c byte, ascii bool) bool { return c == '"' || c == '\\' || c < 0x20 || ascii && c >= 0x80 }
	for _, ascii := range []bool{true, false} {
		for n := range 41 {
			for at := range n {
				for c := range 256 {
					b := []byte(strings.Repeat("a", n))
					b[at] = byte(c)
					want := n
					for j, x := range b {
						if ends(x, ascii) {
							want = j
							break
						}
					}
					got := stringRun(b, 0, ascii)
					if got > want || want-got >= 8 && got+8 <= n {
						t.Fatalf("stringRun(%q, ascii %v) = %d, first end at %d", b, ascii, got, want)
					}
				}
			}
		}
	}
}
