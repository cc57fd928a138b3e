package worker_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/worker"
)

// A session name of 200 bytes, every one escaped in its subject token
// (600 bytes, more than a file name may have), still gets a work folder
// its shell runs in: a hashed name, one per session, and a file in it
// naming the session.
func TestShellWorksWithALongSessionName(t *testing.T) {
	e := setup(t)
	work := t.TempDir()
	def := policies.Definition{Name: "long", Tools: []string{"shell"}, Model: scripted(
		policies.ScriptEntry{Text: "Writing.", ToolCalls: []policies.ScriptToolCall{{Name: "shell", Args: map[string]any{"command": `echo here > f.txt; pwd; cat "$HOME/f.txt"`}}}},
		policies.ScriptEntry{Text: "Done."},
	)}
	e.start(t, worker.Config{Definitions: defs{"long": def}, Tools: shellTools(t), Agents: []string{"long"}, WorkDir: work})
	names := []string{strings.Repeat("/", 200), strings.Repeat("/", 199) + "#"}
	var dirs []string
	for _, name := range names {
		ref := e.ref(t, "long", name)
		e.send(t, ref, "write")
		tr := e.waitStatus(t, ref, record.StatusDone)
		var out string
		for _, en := range tr.Transcript {
			if en.Kind == record.KindToolResult {
				out = en.Result
				if en.IsError {
					t.Fatalf("shell in a session named with 200 bytes: %s", en.Result)
				}
			}
		}
		if !strings.Contains(out, "here") || !strings.Contains(out, "[exit code 0]") {
			t.Fatalf("shell output %q", out)
		}
		dir := strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
		if len(filepath.Base(dir)) > 255 || !strings.HasPrefix(dir, work) {
			t.Fatalf("work folder %q", dir)
		}
		b, err := os.ReadFile(filepath.Join(dir, ".jetloop-session"))
		if err != nil {
			t.Fatal(err)
		}
		var who struct{ Agent, Session string }
		if err := json.Unmarshal(b, &who); err != nil || who.Agent != "long" || who.Session != name {
			t.Fatalf("%s names %+v, %v", dir, who, err)
		}
		dirs = append(dirs, dir)
	}
	if dirs[0] == dirs[1] {
		t.Fatalf("two sessions share the folder %s", dirs[0])
	}
}
