// Package ports chooses loopback ports for servers that keep them across
// restarts: a test's NATS cluster, a chaos run's processes, the benchmark's
// workers. While such a server is down its clients keep dialling, and every
// outgoing connection gets a local port the kernel picks from its ephemeral
// range: a port chosen there (as listening on port 0 chooses) could be
// taken by one of them, and the server would fail to start again. Free
// chooses below (or else above) that range, where no outgoing connection
// takes a port.
package ports

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
)

// ErrNoRoom reports that the kernel's ephemeral range leaves too few ports
// outside it to choose from.
var ErrNoRoom = errors.New("the ephemeral port range leaves no room for ports kept across restarts")

// Ephemeral is the kernel's range of local ports for outgoing connections,
// [lo, hi] inclusive: Linux's ip_local_port_range, or its default where
// that cannot be read.
func Ephemeral() (lo, hi int, err error) {
	lo, hi = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi, nil
	}
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
		return 0, 0, fmt.Errorf("ports: read the ephemeral port range %q: %w", b, err)
	}
	return lo, hi, nil
}

// minRoom is the fewest ports a range outside the ephemeral one must hold
// for Free to pick from it.
const minRoom = 1000

// Outside is the range [lo, hi) Free picks from, given the ephemeral range
// [elo, ehi]: from 10000 up to it where that leaves room (the default,
// 32768–60999, leaves 10000–32767), else the unprivileged ports below it
// from 1024, else the ports above it. ok is false when no side holds
// enough ports.
func Outside(elo, ehi int) (lo, hi int, ok bool) {
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

// Free finds n distinct free loopback ports outside the kernel's
// ephemeral range. Another process's listener may still take one before
// its server binds it, which then fails to start with "address already in
// use". Where the ephemeral range leaves no room outside it, it fails
// with ErrNoRoom (Kept then lets the kernel choose).
func Free(n int) ([]int, error) {
	elo, ehi, err := Ephemeral()
	if err != nil {
		return nil, err
	}
	lo, hi, ok := Outside(elo, ehi)
	if !ok {
		return nil, fmt.Errorf("ports: %w (%d–%d)", ErrNoRoom, elo, ehi)
	}
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	start := rand.IntN(hi - lo)
	for p := 0; len(ports) < n; p++ {
		if p == hi-lo {
			return nil, fmt.Errorf("ports: find %d free ports in %d–%d: only %d free", n, lo, hi-1, len(ports))
		}
		port := lo + (start+p)%(hi-lo)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		ls = append(ls, l)
		ports = append(ports, port)
	}
	return ports, nil
}

// Kernel finds n distinct free loopback ports of the kernel's choosing,
// as listening on port 0 chooses them: in the ephemeral range, where a
// restarted server can find one taken.
func Kernel(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("ports: find a free port: %w", err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// Kept finds n ports for servers kept across restarts: Free's, or where
// the ephemeral range leaves no room outside it, Kernel's (and kernel is
// true: a restart can then find one taken).
func Kept(n int) (ports []int, kernel bool, err error) {
	ports, err = Free(n)
	if errors.Is(err, ErrNoRoom) {
		ports, err = Kernel(n)
		return ports, true, err
	}
	return ports, false, err
}
