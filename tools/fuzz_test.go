package tools_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/tools"
)

// FuzzValidateArgs feeds arbitrary arguments, as a model might send them,
// to every built-in schema and to echo's. Validation must never panic,
// must refuse with an *ArgsError naming the tool, and must accept only a
// JSON object (or nothing); accepted arguments must decode for the tool.
func FuzzValidateArgs(f *testing.F) {
	for _, s := range []string{
		`{"command":"ls -la"}`,
		`{"url":"https://example.com","headers":{"Accept":"text/html"}}`,
		`{"method":"POST","url":"http://x","body":"{}"}`,
		`{"question":"ok?"}`,
		`{"handle":"a.b.result.c","offset":10,"limit":100}`,
		`{"text":"hi","times":3,"mode":"loud"}`,
		``, `null`, `[]`, `"x"`, `{"command":1e400}`, `{"offset":-0.0}`, `{"a":{"b":[1,2,{"c":null}]}}`,
		`{"handle":"a.b.result.c","offset":1.0,"limit":2e3}`, `{"handle":"h","offset":1e300}`,
	} {
		for tool := range 6 {
			f.Add(uint8(tool), []byte(s))
		}
	}
	r, err := tools.NewRegistry(tools.RegistryOptions{MaxArgsBytes: 4096}, append(tools.Builtins(tools.BuiltinConfig{}), echo())...)
	if err != nil {
		f.Fatal(err)
	}
	names := r.Names()
	f.Fuzz(func(t *testing.T, tool uint8, args []byte) {
		name := names[int(tool)%len(names)]
		err := r.Validate(name, args)
		if err != nil {
			var ae *tools.ArgsError
			if !errors.As(err, &ae) || !errors.Is(err, tools.ErrInvalidArgs) || ae.Tool != name || len(ae.Problems) == 0 {
				t.Fatalf("Validate(%s, %q) = %v; want an *ArgsError", name, args, err)
			}
			if !strings.Contains(err.Error(), name) {
				t.Fatalf("error %q does not name the tool", err)
			}
			return
		}
		trimmed := bytes.TrimSpace(args)
		if len(trimmed) == 0 || string(trimmed) == "null" {
			return
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(args, &obj); err != nil {
			t.Fatalf("Validate accepted %q, which is not a JSON object: %v", args, err)
		}
		var typed struct {
			Command, URL, Method, Body, Question, Handle, Text string
			Headers                                            map[string]string
			Offset, Limit, Times                               float64
		}
		if err := json.Unmarshal(args, &typed); err != nil {
			t.Fatalf("Validate(%s) accepted %q, which the tool cannot decode: %v", name, args, err)
		}
	})
}
