package policies

import (
	"strings"
	"testing"

	"github.com/goccy/go-yaml/parser"
)

// TestDecodeBodyTurnsADecoderPanicIntoAnError decodes, past Parse's node
// checks, a tagged scalar where a list belongs: the YAML decoder panics on
// it, and the definition is refused instead.
func TestDecodeBodyTurnsADecoderPanicIntoAnError(t *testing.T) {
	f, err := parser.ParseBytes([]byte("name: a\ntools: !!str bar\n"), 0)
	if err != nil {
		t.Fatal(err)
	}
	var d Definition
	err = decodeBody(f.Docs[0].Body, &d)
	if err == nil || !strings.Contains(err.Error(), "YAML not understood") {
		t.Fatalf("decodeBody = %v, want a YAML not understood error", err)
	}
}
