package gate

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
)

// Errors a gate answers with. Each has one HTTP status (see Status).
var (
	// ErrBusy means a pool has no room for the request now: the sender
	// should retry (503 with Retry-After).
	ErrBusy = errors.New("gate: no room for the request")
	// ErrTooLarge means the body is over the receiver's limit (413).
	ErrTooLarge = errors.New("gate: body too large")
	// ErrTooSlow means the body did not arrive at the minimum rate or
	// within the request's deadline (408); the connection is closed.
	ErrTooSlow = errors.New("gate: body too slow")
	// ErrForbidden means the remote address is outside the networks the
	// receiver accepts (403).
	ErrForbidden = errors.New("gate: address not allowed")
)

// Status is the HTTP status of an error of this package, or 0 for
// another error.
func Status(err error) int {
	switch {
	case errors.Is(err, ErrBusy):
		return http.StatusServiceUnavailable
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrTooSlow):
		return http.StatusRequestTimeout
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden
	}
	return 0
}

// Limits bound what the requests drawing from one pool hold at once.
// Zero per-address limits mean none.
type Limits struct {
	// Requests bounds the requests handled at once.
	Requests int
	// Bytes bounds the body bytes held at once: a request admitted holds
	// the first 32 KiB of its body (its declared length when shorter), and
	// more as they arrive, so a sender that declares a large body and
	// trickles it holds only what it sent.
	Bytes int64
	// PerAddrRequests and PerAddrBytes bound the same per remote address:
	// an IPv4 address, or the /64 of an IPv6 address.
	PerAddrRequests int
	PerAddrBytes    int64
}

// Validate reports limits that cannot work.
func (l Limits) Validate() error {
	if l.Requests <= 0 || l.Bytes <= 0 {
		return fmt.Errorf("gate: limits need requests and bytes above 0, have %d and %d", l.Requests, l.Bytes)
	}
	if l.PerAddrRequests < 0 || l.PerAddrBytes < 0 {
		return errors.New("gate: negative per-address limit")
	}
	return nil
}

// use is what the requests of one pool or address hold.
type use struct {
	requests int
	bytes    int64
}

// Pool hands out request slots and body bytes.
type Pool struct {
	name    string
	limits  Limits
	metrics *Metrics

	mu      sync.Mutex
	total   use
	perAddr map[netip.Addr]*use
}

// NewPool returns a pool with limits, named for metrics and errors.
func NewPool(name string, l Limits, m *Metrics) (*Pool, error) {
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("pool %s: %w", name, err)
	}
	if m == nil {
		m = NewMetrics()
	}
	return &Pool{name: name, limits: l, metrics: m, perAddr: map[netip.Addr]*use{}}, nil
}

// Name is the pool's name.
func (p *Pool) Name() string { return p.name }

// Limits are the pool's limits.
func (p *Pool) Limits() Limits { return p.limits }

// Take reserves a slot and size bytes for a request from addr, or fails
// with ErrBusy saying which limit is full. The returned func gives them
// back; call it once the request is answered.
func (p *Pool) Take(addr netip.Addr, size int64) (release func(), err error) {
	t, err := p.take(addr, size)
	if err != nil {
		return nil, err
	}
	return t.release, nil
}

// ticket is what one request holds of a pool.
type ticket struct {
	p     *Pool
	key   netip.Addr
	a     *use
	bytes int64 // guarded by p.mu
	once  sync.Once
}

func (p *Pool) take(addr netip.Addr, size int64) (*ticket, error) {
	key := addrKey(addr)
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.perAddr[key]
	if a == nil {
		a = &use{}
	}
	l := p.limits
	var err error
	switch {
	case p.total.requests+1 > l.Requests:
		err = fmt.Errorf("%w: %d requests in flight in pool %s", ErrBusy, l.Requests, p.name)
	case l.PerAddrRequests > 0 && a.requests+1 > l.PerAddrRequests:
		err = fmt.Errorf("%w: %d requests in flight from %s in pool %s", ErrBusy, l.PerAddrRequests, key, p.name)
	default:
		err = p.roomLocked(key, a, size)
	}
	if err != nil {
		p.metrics.refused.WithLabelValues(p.name, "busy").Inc()
		return nil, err
	}
	p.total.requests++
	p.total.bytes += size
	a.requests++
	a.bytes += size
	p.perAddr[key] = a
	p.metrics.requests.WithLabelValues(p.name).Inc()
	p.metrics.bytes.WithLabelValues(p.name).Add(float64(size))
	return &ticket{p: p, key: key, a: a, bytes: size}, nil
}

// roomLocked reports ErrBusy when size more bytes do not fit, in total or
// for the address a. Its caller holds p.mu.
func (p *Pool) roomLocked(key netip.Addr, a *use, size int64) error {
	l := p.limits
	switch {
	case p.total.bytes+size > l.Bytes:
		return fmt.Errorf("%w: %d bytes of bodies in flight in pool %s, no room for %d more", ErrBusy, l.Bytes, p.name, size)
	case l.PerAddrBytes > 0 && a.bytes+size > l.PerAddrBytes:
		return fmt.Errorf("%w: %d bytes of bodies in flight from %s in pool %s, no room for %d more", ErrBusy, l.PerAddrBytes, key, p.name, size)
	}
	return nil
}

// grow adds n bytes to what t holds, or fails with ErrBusy.
func (t *ticket) grow(n int64) error {
	p := t.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.roomLocked(t.key, t.a, n); err != nil {
		p.metrics.refused.WithLabelValues(p.name, "busy").Inc()
		return err
	}
	p.total.bytes += n
	t.a.bytes += n
	t.bytes += n
	p.metrics.bytes.WithLabelValues(p.name).Add(float64(n))
	return nil
}

func (t *ticket) release() {
	t.once.Do(func() {
		p := t.p
		p.mu.Lock()
		defer p.mu.Unlock()
		p.total.requests--
		p.total.bytes -= t.bytes
		t.a.requests--
		t.a.bytes -= t.bytes
		if t.a.requests == 0 {
			delete(p.perAddr, t.key)
		}
		p.metrics.requests.WithLabelValues(p.name).Dec()
		p.metrics.bytes.WithLabelValues(p.name).Sub(float64(t.bytes))
	})
}

// InUse reports the requests and bytes held now, in total and from addr.
func (p *Pool) InUse(addr netip.Addr) (requests int, bytes int64, addrRequests int, addrBytes int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a := p.perAddr[addrKey(addr)]; a != nil {
		addrRequests, addrBytes = a.requests, a.bytes
	}
	return p.total.requests, p.total.bytes, addrRequests, addrBytes
}

// addrKey is the unit a per-address limit counts: the address itself for
// IPv4, its /64 for IPv6 (one subscriber's usual allocation).
func addrKey(a netip.Addr) netip.Addr {
	a = a.Unmap()
	if a.Is6() {
		if p, err := a.Prefix(64); err == nil {
			return p.Addr()
		}
	}
	return a.WithZone("")
}

// RemoteAddr is the address of the peer of r's connection; the zero Addr
// when it cannot be parsed (which every such request then shares).
func RemoteAddr(r *http.Request) netip.Addr {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().Unmap()
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, _ := netip.ParseAddr(host)
	return a.Unmap()
}
