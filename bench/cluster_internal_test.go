package bench

import (
	"context"
	"net"
	"testing"
)

// TestClusterStartsAgainOnATakenPort: a route port another process bound
// first makes the clustered measurements start their cluster again on
// other ports, rather than fail.
func TestClusterStartsAgainOnATakenPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	calls := 0
	pickPorts = func(n int) ([]int, error) {
		calls++
		ports, err := freePorts(n)
		if err == nil && calls == 1 {
			ports[n-1] = taken
		}
		return ports, err
	}
	defer func() { pickPorts = freePorts }()
	e, err := startCluster(context.Background(), Config{}, t.TempDir(), "2m")
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	defer e.close()
	if calls != 2 {
		t.Fatalf("route ports chosen %d times, want 2 (once more after the taken one)", calls)
	}
}
