package tools_test

import (
	"testing"

	"github.com/jetloop/jetloop/tools"
)

// FuzzDelegateArgs feeds arbitrary arguments to the delegate tool: it
// never panics, and whatever it accepts is a delegation the runtime can
// carry out: an agent and a task, inputs whose names are input names and
// each of exactly one form, and a budget with no negative limit.
func FuzzDelegateArgs(f *testing.F) {
	for _, s := range []string{
		`{"agent":"reviewer","task":"Review it.","inputs":{"diff":{"file":"change.diff"}}}`,
		`{"agent":"r","task":"t","inputs":{"a":"text","b":{"text":""},"c":{"blob":"x.y.result.z"},"d":{"result":"call_1_0"}}}`,
		`{"agent":"r","task":"t","budget":{"max_turns":3,"max_tokens":10,"max_cost_usd":0.5,"deadline":"90s"}}`,
		`{"agent":"r","task":"t","inputs":{"d":{"file":"a","blob":"b"}}}`,
		`{"agent":"r","task":"t","inputs":{"d":{}}}`,
		`{"agent":"r","task":"t","budget":{"deadline":"1.5h"}}`,
		`{"agent":"","task":""}`, `{}`, `[]`, `null`, `{"agent":"r","task":"t","inputs":{"é":"x"}}`,
	} {
		f.Add([]byte(s))
	}
	r, err := tools.NewRegistry(tools.RegistryOptions{}, tools.Builtins(tools.BuiltinConfig{})...)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, args []byte) {
		res, err := r.Run(t.Context(), "delegate", tools.Call{ID: "call_1", Args: args, Agent: "lead", Session: "s"})
		if err != nil {
			t.Fatalf("Run(%q): %v", args, err)
		}
		d := res.Delegate
		if res.IsError {
			if d != nil {
				t.Fatalf("an error result carries a delegation: %+v", res)
			}
			return
		}
		if d == nil || d.Agent == "" || d.Task == "" || len(d.Task) > tools.MaxTaskBytes || len(d.Inputs) > tools.MaxInputs {
			t.Fatalf("accepted %q as %+v", args, d)
		}
		for name, in := range d.Inputs {
			n := 0
			for _, set := range []bool{in.Text != nil, in.File != "", in.Blob != "", in.Result != ""} {
				if set {
					n++
				}
			}
			if !tools.InputName.MatchString(name) || n != 1 {
				t.Fatalf("accepted input %q: %+v", name, in)
			}
		}
		if b := d.Budget; b.MaxTurns < 0 || b.MaxTokens < 0 || b.MaxCostUSD < 0 || b.Deadline < 0 {
			t.Fatalf("accepted budget %+v", b)
		}
	})
}
