package policies

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
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
	// More members than a key is looked up among without hashing.
	wide := &DataPaths{}
	for _, k := range []string{"a", "b", "c", "action", "number", "pull_request", "x", "y", "z", "issue", "é"} {
		wide.Add(k, "d")
	}
	wide.Add("repository", "full_name")
	wide.Add("ab")
	// Into nesting, skipping below it.
	nested := &DataPaths{}
	nested.Add("q", "k", "k", "x")
	return []*DataPaths{{}, a, deep, a.Union(deep), deep.Union(more), more.Union(a).Union(deep), wide, wide.Union(a), nested}
}()

// samePruned holds ParseJSONPaths to ParseJSON: it refuses what ParseJSON
// refuses, with the same error, and keeps of the rest what prune keeps.
func samePruned(t *testing.T, raw []byte) {
	t.Helper()
	full, ferr := ParseJSON(raw)
	for _, p := range pathSets {
		got, err := ParseJSONPaths(raw, p)
		if fmt.Sprint(err) != fmt.Sprint(ferr) {
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
	inputs = append(inputs, keySeeds...)
	for _, in := range inputs {
		samePruned(t, []byte(in))
	}
}

// keySeeds hold keys on a path written with escapes or past ASCII, and
// such a key twice in one object, each form first: the last one read is
// kept, whichever form it has.
var keySeeds = []string{
	`{"\u0061":{"d":1},"b":2}`, `{"\u0061ction":{"d":"x"},"action":{"d":"y"}}`, `{"action":{"d":"y"},"\u0061ction":{"d":"x"}}`,
	`{"a\u0062":1,"ab":2}`, `{"ab":2,"a\u0062":1}`, `{"é":{"d":1},"\u00e9":{"d":2}}`, `{"\u00e9":{"d":2},"é":{"d":1}}`,
	`{"pull_request":{"n\u0075mber":7,"number":8},"\u0070ull_request":{"number":9}}`,
}

// FuzzParseJSONPaths holds ParseJSONPaths to ParseJSON on any input.
func FuzzParseJSONPaths(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"c":{"d":[1,{"x":"\u00e9"}],"e":"\x"}}`))
	f.Add([]byte(`{"pull_request":{"number":2,"title":"x"},"issue":{"pull_request":{}}}`))
	for _, s := range keySeeds {
		f.Add([]byte(s))
	}
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

// TestStringEnd holds stringEnd to a byte-by-byte scan: for every byte
// value at every offset of strings of plain bytes up to 40 long, and with
// a second such byte after the first, it stops exactly at the first byte
// that ends a run.
func TestStringEnd(t *testing.T) {
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
					if got := stringEnd(b, 0, ascii); got != want {
						t.Fatalf("stringEnd(%q, ascii %v) = %d, first end at %d", b, ascii, got, want)
					}
					// A second byte next to it, where a borrow from the
					// first would reach: one that ends a run, or one just
					// past such bytes.
					for _, c2 := range []byte{0, 0x1f, 0x20, '"', '"' + 1, '\\', '\\' + 1, 0x7f, 0x80} {
						if at+1 >= n {
							break
						}
						b[at+1] = c2
						switch {
						case ends(b[at], ascii):
							want = at
						case ends(c2, ascii):
							want = at + 1
						default:
							want = n
						}
						if got := stringEnd(b, 0, ascii); got != want {
							t.Fatalf("stringEnd(%q, ascii %v) = %d, first end at %d", b, ascii, got, want)
						}
					}
				}
			}
		}
	}
}

// githubFixtures are the GitHub webhook bodies under the repository's
// testdata, pretty-printed as GitHub sends them.
func githubFixtures(tb testing.TB) map[string][]byte {
	tb.Helper()
	out := map[string][]byte{}
	for _, dir := range []string{"../ingest/testdata/github", "../projection/testdata/github"} {
		err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(path, ".json") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			out[strings.TrimPrefix(path, "../")] = b
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
	if len(out) == 0 {
		tb.Fatal("no GitHub fixture found")
	}
	return out
}

// BenchmarkParseJSONPaths decodes the paths a webhook's receiver and a
// pull request rule read from every GitHub fixture.
func BenchmarkParseJSONPaths(b *testing.B) {
	p := &DataPaths{}
	for _, path := range [][]string{{"action"}, {"repository", "full_name"}, {"pull_request", "number"}, {"pull_request", "draft"}} {
		p.Add(path...)
	}
	fixtures := githubFixtures(b)
	for _, name := range slices.Sorted(maps.Keys(fixtures)) {
		raw := fixtures[name]
		b.Run(strings.ReplaceAll(name, "/", "_"), func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, err := ParseJSONPaths(raw, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// sameSkip holds skip to encoding/json's json.Valid and to decodeJSON:
// it takes the documents they take, and the values value takes, ending
// where value ends, and refuses the others with value's error, offset
// and message alike.
func sameSkip(t *testing.T, raw []byte) {
	t.Helper()
	s := jsonDecoder{b: raw}
	s.space()
	err := s.skip(0)
	end := s.i
	d := jsonDecoder{b: raw}
	d.space()
	if _, derr := d.value(0); fmt.Sprint(derr) != fmt.Sprint(err) || err == nil && d.i != end {
		t.Fatalf("%.200q: skip ends at %d (%v), value at %d (%v)", raw, end, err, d.i, derr)
	}
	if err == nil {
		if s.space(); s.i < len(raw) {
			err = s.errorf("data after the first value")
		}
	}
	if valid := json.Valid(raw); (err == nil) != valid {
		t.Fatalf("%.200q: skip error %v, json.Valid %v", raw, err, valid)
	}
	sameFast(t, raw)
}

// sameFast holds skipFast to skipChecked on the value at the start of raw
// (after space): it takes what skipChecked takes nested at most
// fastLevels deep, ending where it ends, and nothing else.
func sameFast(t *testing.T, raw []byte) {
	t.Helper()
	c := jsonDecoder{b: raw}
	c.space()
	start := c.i
	err := c.skipChecked(0)
	end, ok := skipFast(raw, start)
	switch {
	case ok && err != nil:
		t.Fatalf("%.200q: skipFast takes it, to %d; skipChecked: %v", raw, end, err)
	case ok && end != c.i:
		t.Fatalf("%.200q: skipFast ends at %d, skipChecked at %d", raw, end, c.i)
	case !ok && err == nil && nesting(raw[start:c.i]) <= fastLevels:
		t.Fatalf("%.200q: skipFast refuses a value nested %d deep that skipChecked takes", raw, nesting(raw[start:c.i]))
	}
}

// nesting is how deep the containers of the valid JSON value v nest.
func nesting(v []byte) int {
	deepest, n, in := 0, 0, false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case in:
		case c == '{' || c == '[':
			n++
			deepest = max(deepest, n)
		case c == '}' || c == ']':
			n--
		}
	}
	return deepest
}

// TestSkipNesting holds skip to json.Valid on containers nested around
// the depths where its stack of open containers grows a word, and around
// the deepest nesting taken, skipped from the top and from below kept
// objects.
func TestSkipNesting(t *testing.T) {
	for _, depth := range []int{1, 2, 63, 64, 65, 66, 127, 128, 129, 200, maxJSONDepth - 1, maxJSONDepth, maxJSONDepth + 1} {
		for _, shape := range []string{"objects", "arrays", "mixed"} {
			var open, closing strings.Builder
			kinds := make([]bool, depth)
			for k := range depth {
				obj := shape == "objects" || shape == "mixed" && k%3 != 1
				kinds[k] = obj
				if obj {
					open.WriteString(`{"k": `)
				} else {
					open.WriteString("[1, ")
				}
			}
			inner := "\"x\\u00e9\""
			// closer[k] is where the container k deep is closed.
			closer := make([]int, depth)
			for k := depth - 1; k >= 0; k-- {
				if kinds[k] {
					closing.WriteString(`, "z": [true, {}]}`)
				} else {
					closing.WriteString(`, null]`)
				}
				closer[k] = open.Len() + len(inner) + closing.Len() - 1
			}
			doc := open.String() + inner + closing.String()
			sameSkip(t, []byte(doc))
			// Skipped below an object kept in part, where the depth the
			// skip starts at counts toward the limit.
			samePruned(t, []byte(`{"a": 1, "q": `+doc+`}`))
			// A container closed by the wrong bracket: the innermost, those
			// either side of a word of the stack, the outermost.
			for _, k := range []int{depth - 1, 64, 63, 0} {
				if k >= depth {
					continue
				}
				bad := []byte(doc)
				if want := "]}"[b2i(kinds[k])]; bad[closer[k]] != want {
					t.Fatalf("depth %d %s: closer of %d at %d is %q, want %q", depth, shape, k, closer[k], bad[closer[k]], want)
				}
				if bad[closer[k]] == '}' {
					bad[closer[k]] = ']'
				} else {
					bad[closer[k]] = '}'
				}
				sameSkip(t, bad)
				samePruned(t, []byte(`{"a": 1, "q": `+string(bad)+`}`))
			}
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestSkip holds skip to json.Valid on the seeds and the GitHub fixtures.
func TestSkip(t *testing.T) {
	for _, s := range jsonSeeds {
		sameSkip(t, []byte(s))
	}
	for _, s := range skipSeeds {
		sameSkip(t, []byte(s))
	}
	for _, b := range githubFixtures(t) {
		sameSkip(t, b)
	}
}

var skipSeeds = []string{
	`{"a":[1,{"b":[]},[[],{}]],"c":"\\\"\u1234"}`, `[{"a":1]`, `{"a":[1}`, `[1,2,]`, `{"a":1,}`, `{,}`, `[,1]`,
	`{"a":-}`, `[-01]`, `[1.e5]`, `[1e+]`, `[0.5E-7,-0,1E9]`, `[fals]`, `[nul]`, `[truex]`, `["a\u12"]`, `["a\u12g4"]`,
	"[\"\\\x00\"]", "[\"a\x1fb\"]", "[\"\xff\xfe\"]", "{\"a\"\t:\r\n1 }", "[\v1]", `{"a":1 "b":2}`, `{"a"}`, `{1:2}`, `[`, `{`, `{"a":`, `["a`,
}

// FuzzSkipJSON holds skip, the check of what ParseJSONPaths does not
// keep, to encoding/json's json.Valid on any input.
func FuzzSkipJSON(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	for _, s := range skipSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 1<<16 {
			return
		}
		sameSkip(t, raw)
	})
}

// wordBytes are the bytes where a word-at-a-time scan can go wrong: the
// stops, their neighbours (where a borrow or an xor lands), blanks and
// other space, the bytes either side of ASCII's end.
var wordBytes = []byte{0x00, 0x01, 0x09, 0x0a, 0x0d, 0x1f, ' ', '!', '"', '#', '\\', ']', 'a', 0x7f, 0x80, 0xa1, 0xa2, 0xdc, 0xff}

// TestStringEndWords holds stringEnd to a byte-by-byte scan on strings
// of up to 24 bytes drawn from wordBytes, from every start up to a word
// in: every mix of stops in two words and the bytes after them.
func TestStringEndWords(t *testing.T) {
	ends := func(c byte, ascii bool) bool { return c == '"' || c == '\\' || c < 0x20 || ascii && c >= 0x80 }
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		b := make([]byte, rng.IntN(25))
		for k := range b {
			if rng.IntN(3) == 0 {
				b[k] = wordBytes[rng.IntN(len(wordBytes))]
			} else {
				b[k] = 'a'
			}
		}
		j := min(rng.IntN(9), len(b))
		for _, ascii := range []bool{true, false} {
			want := len(b)
			for k := j; k < len(b); k++ {
				if ends(b[k], ascii) {
					want = k
					break
				}
			}
			if got := stringEnd(b, j, ascii); got != want {
				t.Fatalf("stringEnd(%q, %d, ascii %v) = %d, first end at %d", b, j, ascii, got, want)
			}
		}
	}
}

// TestSkipSpace holds skipSpace to a byte-by-byte scan on runs of blanks
// of every length up to three words after a new line, a blank, a tab or
// nothing, ended by each of wordBytes or by the end of the input.
func TestSkipSpace(t *testing.T) {
	for _, lead := range []string{"", "\n", " ", "\t", "\r\n", "\n\t"} {
		for n := range 26 {
			for _, end := range append([]byte{0}, wordBytes...) {
				for _, tail := range []bool{false, true} {
					b := []byte("x" + lead + strings.Repeat(" ", n))
					if tail {
						b = append(b, end, 'y')
					}
					want := 1
					for want < len(b) && (b[want] == ' ' || b[want] == '\n' || b[want] == '\t' || b[want] == '\r') {
						want++
					}
					if got := skipSpace(b, 1); got != want {
						t.Fatalf("skipSpace(%q, 1) = %d, want %d", b, got, want)
					}
				}
			}
		}
	}
}

// TestSkipWordBoundaries holds skip and ParseJSONPaths to json.Valid and
// ParseJSON where a string's stops fall at every offset of a word: a
// quote, runs of backslashes that escape a quote or a backslash across a
// word's end, a control or invalid byte, space of every length before a
// key or a value, each at every shift from the document's start.
func TestSkipWordBoundaries(t *testing.T) {
	var docs []string
	for shift := range 9 {
		pad := strings.Repeat("p", shift)
		for n := range 18 {
			run := strings.Repeat(`\`, n)
			for _, in := range []string{
				`{"k":"` + pad + run + `"}`,
				`{"k":"` + pad + run + `", "a": 1}`,
				`["` + pad + run + `"x"]`,
				`{"` + pad + run + `":{"a":[1,"` + run + `"]},"a":"` + pad + `"}`,
				`{"a":{"` + pad + `\u00e9` + run + `":2},"c":{"d":"` + run + pad + `"}}`,
				`{"k":"` + pad + "\x1f" + run + `"}`,
				`{"k":"` + pad + "\xff\xfe" + run + `"}`,
				`{"k":"` + pad + run + "\n" + `"}`,
				"{\n" + strings.Repeat(" ", n) + `"` + pad + `":` + strings.Repeat(" ", shift) + `[` + strings.Repeat(" ", n) + `1]}`,
				"{\n" + strings.Repeat(" ", n) + "\t" + `"a":` + "\r\n" + strings.Repeat(" ", n) + `"` + pad + `"` + strings.Repeat(" ", n) + "\n}",
				"{\n" + strings.Repeat(" ", n) + "\x01" + `"a": 1}`,
				`{"q":{"k":[` + pad + strings.Repeat(" ", n) + `null ,true,false,-0.5e3` + strings.Repeat(" ", n) + `]}}`,
			} {
				docs = append(docs, in)
			}
		}
	}
	for _, doc := range docs {
		sameSkip(t, []byte(doc))
		samePruned(t, []byte(doc))
	}
}

// TestSkipTruncated holds skip and ParseJSONPaths to json.Valid and
// ParseJSON on the GitHub fixtures cut short, and with their last byte
// changed to a control character, at every 11th offset of the pull
// request's and every 101st of the others' (every offset of every
// fixture takes minutes).
func TestSkipTruncated(t *testing.T) {
	fixtures := githubFixtures(t)
	paths := pathSets[len(pathSets)-3]
	for name, raw := range fixtures {
		step := 101
		if name == "ingest/testdata/github/pull_request/opened.payload.json" {
			step = 11
		}
		for n := 0; n < len(raw); n += step {
			sameFast(t, raw[:n])
			cut := bytes.Clone(raw[:n+1])
			cut[n] = '\x01'
			sameFast(t, cut)
		}
		for n := 0; n < len(raw); n += 499 {
			samePruned(t, raw[:n])
			_, ferr := ParseJSON(raw[:n])
			if _, err := ParseJSONPaths(raw[:n], paths); fmt.Sprint(err) != fmt.Sprint(ferr) {
				t.Fatalf("%s cut at %d: error %v, ParseJSON's %v", name, n, err, ferr)
			}
		}
	}
}

// TestSkipFastEnds holds skip and ParseJSONPaths to json.Valid and
// ParseJSON where the input ends in a string, a key or space of every
// length, so that a word read near the end would pass len: each input
// is a slice whose capacity is its length, read past which would panic.
func TestSkipFastEnds(t *testing.T) {
	exact := func(s string) []byte { return []byte(s)[:len(s):len(s)] }
	for n := range 26 {
		run := strings.Repeat("a", n)
		for _, doc := range []string{
			`"` + run, `"` + run + `"`, `"` + run + `\`, `"` + run + `\"`,
			`["` + run, `["` + run + `"`, `["` + run + `"]`,
			`{"` + run, `{"` + run + `"`, `{"` + run + `":`, `{"` + run + `":"` + run,
			`{"k":"` + run, `{"k":["` + run, `{"k":{"` + run, `{"k":{"k":"` + run + `"}`,
			`{"q":{"k":{"z":"` + run, `{"q":{"k":{"z":"` + run + `"}}}`,
			`[1` + strings.Repeat(" ", n), `{"k":` + strings.Repeat(" ", n), "{\n" + strings.Repeat(" ", n),
		} {
			sameSkip(t, exact(doc))
			samePruned(t, exact(doc))
		}
	}
}

// TestSkipFastSyntax holds skip and ParseJSONPaths to json.Valid and
// ParseJSON on what is wrong between a key and its value or between
// members, where skipFast reads its punctuation itself.
func TestSkipFastSyntax(t *testing.T) {
	for _, member := range []string{
		`{"a",1}`, `{"a"x1}`, `{"a";1}`, `{"a" ,1}`, `{"a"1}`, `{"a"}`, `{"a":}`, `{"a"::1}`,
		`{"a":1:2}`, `{"a":1 "b":2}`, `{"a":1,}`, `{,"a":1}`, `{1:1}`, `{"a":1]`, `[1}`, `[1:2]`, `[1,,2]`,
		`{"a":[1,{"b",2}]}`, `{"a":[1,{"b"x2}]}`, `{"a":{"b"}}`,
	} {
		for _, doc := range []string{member, `{"q":` + member + `}`, `{"q":{"k":{"k":` + member + `}}}`} {
			sameSkip(t, []byte(doc))
			samePruned(t, []byte(doc))
		}
	}
}

// TestSkipDeepPath holds ParseJSONPaths to ParseJSON on a member no path
// reads nested 62 to 64 deep inside objects on a path nested so deep that
// the two together reach the deepest nesting taken, and one past it.
func TestSkipDeepPath(t *testing.T) {
	for _, m := range []int{maxJSONDepth - fastLevels - 2, maxJSONDepth - fastLevels - 1, maxJSONDepth - fastLevels, maxJSONDepth - fastLevels + 1, maxJSONDepth - fastLevels + 2} {
		p := &DataPaths{}
		p.Add(append(slices.Repeat([]string{"k"}, m-1), "x")...)
		for _, levels := range []int{fastLevels - 1, fastLevels, fastLevels + 1} {
			skipped := strings.Repeat("[", levels) + strings.Repeat("]", levels)
			raw := []byte(strings.Repeat(`{"k":`, m-1) + `{"z":` + skipped + `,"x":1}` + strings.Repeat("}", m-1))
			full, ferr := ParseJSON(raw)
			got, err := ParseJSONPaths(raw, p)
			if fmt.Sprint(err) != fmt.Sprint(ferr) {
				t.Fatalf("%d levels skipped %d objects deep: error %v, ParseJSON's %v", levels, m, err, ferr)
			}
			if err == nil && !reflect.DeepEqual(got, prune(full, p)) {
				t.Fatalf("%d levels skipped %d objects deep: not what ParseJSON keeps", levels, m)
			}
		}
	}
}
