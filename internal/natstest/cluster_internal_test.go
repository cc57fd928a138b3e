package natstest

import (
	"net"
	"testing"
)

// TestRunClusterStartsAgainOnATakenPort: a route or client port another
// process bound first makes RunCluster start the cluster again on other
// ports, rather than fail the test.
func TestRunClusterStartsAgainOnATakenPort(t *testing.T) {
	const n = 3
	for _, tt := range []struct {
		name  string
		index int // in pickPorts' answer: route ports, then client ports
	}{
		{name: "route port", index: n - 1},
		{name: "client port", index: 2*n - 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			taken := l.Addr().(*net.TCPAddr).Port
			calls := 0
			pickPorts = func(t testing.TB, m int) []int {
				calls++
				ports := FreePorts(t, m)
				if calls == 1 {
					ports[tt.index] = taken
				}
				return ports
			}
			defer func() { pickPorts = FreePorts }()
			c := RunCluster(t, n)
			if calls != 2 {
				t.Fatalf("ports chosen %d times, want 2 (once more after the taken one)", calls)
			}
			for i, cfg := range c.cfgs {
				if cfg.Cluster.Port == taken || cfg.Port == taken {
					t.Fatalf("node %d listens on the taken port %d", i+1, taken)
				}
			}
			nc, err := c.Connect()
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
		})
	}
}
