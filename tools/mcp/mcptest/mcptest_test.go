package mcptest_test

import (
	"net"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jetloop/jetloop/internal/natstest"
	"github.com/jetloop/jetloop/tools/mcp/mcptest"
)

// TestServeHTTPKeepsAPortOutsideTheEphemeralRange: a server Start brings
// back on its address listens on a port no outgoing connection can be
// given while it is stopped, and comes back on it.
func TestServeHTTPKeepsAPortOutsideTheEphemeralRange(t *testing.T) {
	h := mcptest.ServeHTTP(t, func() *sdk.Server { return mcptest.NewServer(mcptest.Options{Name: "srv"}) })
	_, p, err := net.SplitHostPort(h.Addr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := net.LookupPort("tcp", p)
	if err != nil {
		t.Fatal(err)
	}
	if lo, hi := natstest.EphemeralPorts(t); lo <= port && port <= hi {
		t.Fatalf("ServeHTTP listens on %s, in the ephemeral range %d–%d", h.Addr, lo, hi)
	}
	h.Stop()
	h.Start()
	c, err := net.Dial("tcp", h.Addr)
	if err != nil {
		t.Fatalf("dial %s after Start: %v", h.Addr, err)
	}
	c.Close()
}
