//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package loadgen

import "net"

// idleClosed cannot look at a connection without waiting here: it takes
// it as open, and a request on a connection the server closed while it
// was idle fails.
func idleClosed(net.Conn) bool { return false }
