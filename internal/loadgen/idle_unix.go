//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package loadgen

import (
	"net"
	"syscall"
)

// idleClosed reports whether nc, idle since its last answer, was closed
// by the server, reset, or holds bytes no request asked for: a peek of
// one byte that does not wait. A connection it cannot look at is taken
// as open.
func idleClosed(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	var (
		rerr error
		b    [1]byte
	)
	if err := rc.Read(func(fd uintptr) bool {
		_, _, rerr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // never wait
	}); err != nil {
		return true
	}
	// Nothing to read (or a signal before the look): open and idle.
	// Otherwise the end of the stream (0 bytes), a reset, or a byte no
	// request asked for.
	return rerr != syscall.EAGAIN && rerr != syscall.EWOULDBLOCK && rerr != syscall.EINTR
}
