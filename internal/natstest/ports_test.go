package natstest_test

import (
	"fmt"
	"net"
	"testing"

	"github.com/jetloop/jetloop/internal/natstest"
)

// TestFreePortsAreOutsideTheEphemeralRange: ports a server keeps across
// its restarts are none an outgoing connection could be given while it
// is down, distinct, and free to bind.
func TestFreePortsAreOutsideTheEphemeralRange(t *testing.T) {
	elo, ehi := natstest.EphemeralPorts(t)
	seen := map[int]bool{}
	for _, p := range natstest.FreePorts(t, 20) {
		if elo <= p && p <= ehi {
			t.Errorf("port %d is in the ephemeral range %d–%d", p, elo, ehi)
		}
		if seen[p] {
			t.Errorf("port %d chosen twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Errorf("port %d is not free: %v", p, err)
			continue
		}
		l.Close()
	}
}

// TestClusterPortsAreOutsideTheEphemeralRange: a cluster's client and
// route ports, which its nodes keep across restarts, are chosen outside
// the ephemeral range.
func TestClusterPortsAreOutsideTheEphemeralRange(t *testing.T) {
	elo, ehi := natstest.EphemeralPorts(t)
	c := natstest.RunCluster(t, 3)
	for i, s := range c.Nodes() {
		client := s.Server().Addr().(*net.TCPAddr).Port
		route := s.Server().ClusterAddr().Port
		for _, p := range []int{client, route} {
			if elo <= p && p <= ehi {
				t.Errorf("node %d: port %d is in the ephemeral range %d–%d", i+1, p, elo, ehi)
			}
		}
	}
}
