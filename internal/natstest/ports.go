package natstest

import (
	"testing"

	"github.com/jetloop/jetloop/internal/ports"
)

// FreePorts finds n distinct free loopback ports outside the kernel's
// ephemeral range, for servers that keep their ports across restarts
// (ports.Free): while a server is down, no outgoing connection of a
// client still dialling it can take one. Another test's listener still
// could, and the server then fails to start with "address already in
// use" (RunCluster starts again on other ports). On a machine whose
// ephemeral range leaves no room outside it, the ports are the kernel's
// choice, as port 0 gives them, and a restart can find one taken.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	p, kernel, err := ports.Kept(n)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	if kernel {
		elo, ehi := EphemeralPorts(t)
		t.Logf("natstest: the ephemeral port range %d–%d leaves no room for ports kept across restarts; the kernel chooses them", elo, ehi)
	}
	return p
}

// EphemeralPorts is the kernel's range of local ports for outgoing
// connections, [lo, hi] inclusive: Linux's ip_local_port_range, or its
// default where that cannot be read.
func EphemeralPorts(t testing.TB) (lo, hi int) {
	t.Helper()
	lo, hi, err := ports.Ephemeral()
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	return lo, hi
}
