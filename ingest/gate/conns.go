package gate

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
)

// Defaults of ConnLimits.
const (
	// DefaultConns bounds the connections a listener holds open at once.
	DefaultConns = 4096
	// DefaultConnsPerAddr bounds them per remote address (an IPv4
	// address, an IPv6 /64): as many as the verified pool has requests,
	// so a reverse proxy's connections fit.
	DefaultConnsPerAddr = DefaultRequests
)

// ConnLimits bound the connections of one listener. Zero fields take the
// defaults.
type ConnLimits struct {
	// Total bounds the connections open at once.
	Total int
	// PerAddr bounds the connections open at once from one remote
	// address (an IPv4 address, an IPv6 /64).
	PerAddr int
}

// Conns is a listener that bounds its open connections, in total and per
// remote address. A connection past a bound takes the place of an idle
// keep-alive connection, which is closed: one of its own address at the
// address's bound, one of the address holding the most at the total
// bound; with none idle the new connection is closed at once. So idle connections, however many a sender opens, never keep a
// request from being read. Pass ConnState to the http.Server serving it.
type Conns struct {
	net.Listener
	limits ConnLimits

	mu      sync.Mutex
	open    map[*conn]struct{}
	perAddr map[netip.Addr]int
}

// LimitConns returns l bounded by limits.
func LimitConns(l net.Listener, limits ConnLimits) *Conns {
	if limits.Total <= 0 {
		limits.Total = DefaultConns
	}
	if limits.PerAddr <= 0 {
		limits.PerAddr = DefaultConnsPerAddr
	}
	return &Conns{Listener: l, limits: limits, open: map[*conn]struct{}{}, perAddr: map[netip.Addr]int{}}
}

type conn struct {
	net.Conn
	l    *Conns
	addr netip.Addr
	idle bool // guarded by l.mu
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		defer c.l.mu.Unlock()
		c.l.forget(c)
	})
	return err
}

// Accept returns the next connection within the bounds.
func (l *Conns) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		var addr netip.Addr
		if ap, err := netip.ParseAddrPort(nc.RemoteAddr().String()); err == nil {
			addr = addrKey(ap.Addr())
		}
		if c := l.admit(nc, addr); c != nil {
			return c, nil
		}
		_ = nc.Close()
	}
}

// admit counts nc in, or reports nil when there is no room. At the
// address's bound an idle connection of the address is closed for it; at
// the total bound an idle one of the address holding the most.
func (l *Conns) admit(nc net.Conn, addr netip.Addr) *conn {
	var evict *conn
	l.mu.Lock()
	switch {
	case l.perAddr[addr] >= l.limits.PerAddr:
		evict = l.idleOf(func(c *conn) bool { return c.addr == addr })
	case len(l.open) >= l.limits.Total:
		most := 0
		for c := range l.open {
			if n := l.perAddr[c.addr]; c.idle && n > most {
				evict, most = c, n
			}
		}
	}
	room := l.perAddr[addr] < l.limits.PerAddr && len(l.open) < l.limits.Total
	if evict != nil {
		l.forget(evict)
		room = true
	}
	var c *conn
	if room {
		c = &conn{Conn: nc, l: l, addr: addr}
		l.open[c] = struct{}{}
		l.perAddr[addr]++
	}
	l.mu.Unlock()
	if evict != nil {
		_ = evict.Close()
	}
	return c
}

// idleOf is an idle connection that match accepts, or nil.
func (l *Conns) idleOf(match func(*conn) bool) *conn {
	for c := range l.open {
		if c.idle && match(c) {
			return c
		}
	}
	return nil
}

// forget stops counting c. Its caller holds l.mu.
func (l *Conns) forget(c *conn) {
	if _, ok := l.open[c]; !ok {
		return
	}
	delete(l.open, c)
	if l.perAddr[c.addr]--; l.perAddr[c.addr] <= 0 {
		delete(l.perAddr, c.addr)
	}
}

// ConnState is the http.Server's ConnState hook that tells l which of its
// connections are idle.
func (l *Conns) ConnState(nc net.Conn, st http.ConnState) {
	c, ok := nc.(*conn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, open := l.open[c]; open {
		c.idle = st == http.StateIdle
	}
}

// Open reports the connections open now, in total and from addr.
func (l *Conns) Open(addr netip.Addr) (total, fromAddr int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.open), l.perAddr[addrKey(addr)]
}
