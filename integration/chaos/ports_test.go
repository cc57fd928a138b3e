package chaos

import (
	"fmt"
	"net"
	"os"
	"testing"
)

// TestFreePortsAreOutsideTheEphemeralRange: the ports a node keeps across
// its restarts are none an outgoing connection could be given while it
// is down, distinct, and free to bind.
func TestFreePortsAreOutsideTheEphemeralRange(t *testing.T) {
	elo, ehi := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if _, err := fmt.Sscan(string(b), &elo, &ehi); err != nil {
			t.Fatal(err)
		}
	}
	ports := freePorts(t, 20)
	seen := map[int]bool{}
	for _, p := range ports {
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
