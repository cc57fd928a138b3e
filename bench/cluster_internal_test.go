package bench

import (
	"context"
	"net"
	"strconv"
	"testing"

	"github.com/jetloop/jetloop/internal/ports"
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

// TestRecoveryAddrsAreOutsideTheEphemeralRange: the addresses the
// recovery measurement starts its workers on, and starts a killed one
// again on, are none a reconnect's outgoing connection could be given
// while the worker is down.
func TestRecoveryAddrsAreOutsideTheEphemeralRange(t *testing.T) {
	elo, ehi, err := ports.Ephemeral()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := ports.Outside(elo, ehi); !ok {
		t.Skipf("the ephemeral range %d–%d leaves no room outside it", elo, ehi)
	}
	addrs, err := freeAddrs(8)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		port, err := strconv.Atoi(p)
		if err != nil {
			t.Fatal(err)
		}
		if elo <= port && port <= ehi {
			t.Errorf("address %s is in the ephemeral range %d–%d", a, elo, ehi)
		}
	}
}
