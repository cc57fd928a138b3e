package ingest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/streams"
)

// A body too large for a message goes to jl_blobs; JL_IN gets its claim
// check, and that, not the body, is what counts in the agent's share of
// JL_IN's room: large deliveries that hold little of JL_IN are never
// refused for room they do not take.
func TestClaimCheckedBodiesCountAsTheirClaimChecks(t *testing.T) {
	// An agent's share of 1%: about 24 MiB of the default room.
	h := startConfig(t, nil, func(c *ingest.Config) { c.Shares = streams.Shares{Agent: 1} }, reviewerYAML)
	var payload map[string]any
	if err := json.Unmarshal(fixture(t, "pull_request/opened.payload.json"), &payload); err != nil {
		t.Fatal(err)
	}
	payload["padding"] = strings.Repeat("x", 2<<20)
	body, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		r := post(t, h.url+"/webhooks/github", githubHeaders("pull_request", fmt.Sprintf("big-%d", i), body), body)
		if r.status != http.StatusAccepted {
			t.Fatalf("delivery %d of %d bytes (%d MiB in all, about %d KiB of it in JL_IN): %d %s", i, len(body), (i+1)*len(body)>>20, (i+1)*2, r.status, r.raw)
		}
	}
}
