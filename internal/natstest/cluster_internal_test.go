package natstest

import (
	"net"
	"testing"
)

// TestRunClusterStartsAgainOnATakenPort: a route port another process
// bound first makes RunCluster start the cluster again on other ports,
// rather than fail the test.
func TestRunClusterStartsAgainOnATakenPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	calls := 0
	pickPorts = func(t testing.TB, n int) []int {
		calls++
		ports := FreePorts(t, n)
		if calls == 1 {
			ports[n-1] = taken
		}
		return ports
	}
	defer func() { pickPorts = FreePorts }()
	c := RunCluster(t, 3)
	if calls != 2 {
		t.Fatalf("route ports chosen %d times, want 2 (once more after the taken one)", calls)
	}
	for i, cfg := range c.cfgs {
		if cfg.Cluster.Port == taken {
			t.Fatalf("node %d routes on the taken port %d", i+1, taken)
		}
	}
	nc, err := c.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
}
