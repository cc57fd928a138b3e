package policies

import (
	"context"
	"runtime"
	"strings"
	"testing"
)

// Functions whose result is far larger than their input are refused
// before they allocate it: the cost limit, charged after the call, would
// stop them only once the memory was taken.
func TestStringFunctionsBoundedBeforeTheyAllocate(t *testing.T) {
	big := strings.Repeat("x", 20000)
	vars := Vars{"event": map[string]any{"data": map[string]any{"a": big, "b": big, "ref": "refs/heads/main"}}}
	tests := []struct {
		name, src string
		want      bool
		err       string
	}{
		{name: "replace of every rune boundary", src: `event.data.a.replace("", event.data.b).size() > 0`, err: "replace would return"},
		{name: "split at every rune", src: `event.data.a.split("").size() > 0`, err: "split would return"},
		{name: "replace with a limit", src: `event.data.a.replace("x", event.data.b, 2).size() == 59998`, want: true},
		{name: "split with a limit", src: `event.data.a.split("", 3).size() == 3`, want: true},
		{name: "ordinary replace", src: `event.data.ref.replace("refs/heads/", "") == "main"`, want: true},
		{name: "ordinary split", src: `event.data.ref.split("/")[2] == "main"`, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, err := compileExpr(tt.src, condOverEvent)
			if err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			got, err := x.EvalBool(context.Background(), vars)
			runtime.ReadMemStats(&after)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got %v, %v; want an error with %q", got, err, tt.err)
				}
			} else if err != nil || got != tt.want {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > 16<<20 {
				t.Fatalf("allocated %d MB", n>>20)
			}
		})
	}
}
