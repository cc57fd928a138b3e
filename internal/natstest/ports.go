package natstest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"testing"
)

// FreePorts finds n distinct free loopback ports outside the kernel's
// ephemeral range, for servers that keep their ports across restarts.
// While a server is down its clients keep dialling, and every outgoing
// connection gets a local port the kernel picks from the ephemeral range:
// a port chosen there (as listening on port 0 chooses) could be taken by
// one of them, and the server would fail to start again. Below the range
// no outgoing connection takes a port; another test's listener still
// could, and the server then fails to start with "address already in
// use" (RunCluster starts again on other ports). On a machine whose
// ephemeral range leaves no room outside it, the ports are the kernel's
// choice, as port 0 gives them, and a restart can find one taken.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	elo, ehi := EphemeralPorts(t)
	lo, hi, ok := outsideEphemeral(elo, ehi)
	if !ok {
		t.Logf("natstest: the ephemeral port range %d–%d leaves no room for ports kept across restarts; the kernel chooses them", elo, ehi)
		ports := make([]int, n)
		for i := range ports {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatalf("natstest: find a free port: %v", err)
			}
			ls = append(ls, l)
			ports[i] = l.Addr().(*net.TCPAddr).Port
		}
		return ports
	}
	ports := make([]int, 0, n)
	start := rand.IntN(hi - lo)
	for p := 0; len(ports) < n; p++ {
		if p == hi-lo {
			t.Fatalf("natstest: find %d free ports in %d–%d: only %d free", n, lo, hi-1, len(ports))
		}
		port := lo + (start+p)%(hi-lo)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		ls = append(ls, l)
		ports = append(ports, port)
	}
	return ports
}

// EphemeralPorts is the kernel's range of local ports for outgoing
// connections, [lo, hi] inclusive: Linux's ip_local_port_range, or its
// default where that cannot be read.
func EphemeralPorts(t testing.TB) (lo, hi int) {
	t.Helper()
	lo, hi = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
		t.Fatalf("natstest: read the ephemeral port range %q: %v", b, err)
	}
	return lo, hi
}

// minRoom is the fewest ports a range outside the ephemeral one must
// hold for FreePorts to pick from it.
const minRoom = 1000

// outsideEphemeral is the range [lo, hi) FreePorts picks from, given the
// ephemeral range [elo, ehi]: from 10000 up to it where that leaves room
// (the default, 32768–60999, leaves 10000–32767), else the unprivileged
// ports below it from 1024, else the ports above it. ok is false when no
// side holds minRoom ports.
func outsideEphemeral(elo, ehi int) (lo, hi int, ok bool) {
	switch {
	case elo-10000 >= minRoom:
		return 10000, elo, true
	case elo-1024 >= minRoom:
		return 1024, elo, true
	case 65536-(ehi+1) >= minRoom:
		return ehi + 1, 65536, true
	default:
		return 0, 0, false
	}
}
