package gate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// Defaults of Config.
const (
	// DefaultRequests and DefaultBytes bound the verified pool.
	DefaultRequests = 256
	DefaultBytes    = 128 << 20
	// DefaultUnverifiedRequests and DefaultUnverifiedBytes bound the
	// unverified pool; DefaultPerAddrRequests and DefaultPerAddrBytes one
	// address's share of it. The byte limits leave room for one body of
	// GitHub's largest (25 MB).
	DefaultUnverifiedRequests = 64
	DefaultUnverifiedBytes    = 64 << 20
	DefaultPerAddrRequests    = 16
	DefaultPerAddrBytes       = 32 << 20
	// DefaultMinRate is the slowest a body may arrive once DefaultGrace
	// has passed, in bytes a second.
	DefaultMinRate = 16 << 10
	// DefaultGrace is how long a body may take before the minimum rate
	// applies: time for the first bytes to arrive over a slow link.
	DefaultGrace = 2 * time.Second
)

// Config configures a Gate.
type Config struct {
	// Verified bounds the requests whose credentials were checked from
	// their headers. Default 256 requests, 128 MiB, no per-address limit.
	Verified Limits
	// Unverified bounds the requests that can only be verified once their
	// body is read. Default 64 requests and 64 MiB, 16 requests and
	// 32 MiB per address.
	Unverified Limits
	// MinRate is the slowest a body may arrive once Grace has passed, in
	// bytes a second. Default 16 KiB/s.
	MinRate int64
	// Grace is how long a body may take before MinRate applies. Default
	// 2 s.
	Grace   time.Duration
	Metrics *Metrics
}

func (c *Config) setDefaults() {
	if c.Verified == (Limits{}) {
		c.Verified = Limits{Requests: DefaultRequests, Bytes: DefaultBytes}
	}
	if c.Unverified == (Limits{}) {
		c.Unverified = Limits{Requests: DefaultUnverifiedRequests, Bytes: DefaultUnverifiedBytes,
			PerAddrRequests: DefaultPerAddrRequests, PerAddrBytes: DefaultPerAddrBytes}
	}
	if c.MinRate == 0 {
		c.MinRate = DefaultMinRate
	}
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
}

// Validate reports a config that cannot work.
func (c Config) Validate() error {
	if c.MinRate < 0 || c.Grace < 0 {
		return errors.New("gate: negative minimum rate or grace")
	}
	if err := c.Verified.Validate(); err != nil {
		return fmt.Errorf("verified pool: %w", err)
	}
	if err := c.Unverified.Validate(); err != nil {
		return fmt.Errorf("unverified pool: %w", err)
	}
	return nil
}

// Gate holds the pools of one HTTP listener and the rule bodies arrive by.
// Every receiver of the listener shares it.
type Gate struct {
	verified, unverified *Pool
	minRate              int64
	grace                time.Duration
	m                    *Metrics
}

// New returns a gate with cfg's pools.
func New(cfg Config) (*Gate, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v, err := NewPool("verified", cfg.Verified, cfg.Metrics)
	if err != nil {
		return nil, err
	}
	u, err := NewPool("unverified", cfg.Unverified, cfg.Metrics)
	if err != nil {
		return nil, err
	}
	return &Gate{verified: v, unverified: u, minRate: cfg.MinRate, grace: cfg.Grace, m: cfg.Metrics}, nil
}

// Verified is the pool of requests whose credentials are in their
// headers, checked before they draw from it.
func (g *Gate) Verified() *Pool { return g.verified }

// Unverified is the pool of requests verified only once their body is
// read.
func (g *Gate) Unverified() *Pool { return g.unverified }

// Admission is what one admitted request holds of its pool: a slot, and
// the bytes of its body read so far (at least its first chunk). Release
// it once the request is answered.
type Admission struct {
	g *Gate
	t *ticket
	// body holds the bytes ReadBody returned; recycle, set by Recycle,
	// lets Release hand it to the next request's body.
	body    *bytes.Buffer
	recycle bool
}

// Release gives the slot and the bytes back, and the body's buffer too
// when Recycle was called. Safe to call more than once.
func (a *Admission) Release() {
	a.t.release()
	if b := a.body; b != nil && a.recycle {
		a.body = nil
		if b.Cap() <= maxRecycled {
			b.Reset()
			bodies.Put(b)
		}
	}
}

// Recycle lets Release reuse the memory of the body ReadBody returned for
// another request's. Call it only once nothing holds the body any more:
// every message that shares it acknowledged, no publish of it left
// pending or to be retried. A request that fails half-way is not
// recycled: its body is left to the collector.
func (a *Admission) Recycle() { a.recycle = true }

// bodies holds the buffers of bodies recycled (Admission.Recycle): each
// webhook's tens of kilobytes read into memory already used, not new.
var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxRecycled is the largest buffer kept for another body: the rare
// large one goes to the collector, so the pool does not pin megabytes.
const maxRecycled = 256 << 10

// Admit takes a slot from pool for r and room for the first 32 KiB of its
// body (its declared length when shorter); the rest is taken as it
// arrives (Admission.ReadBody), so a sender that declares a large body and
// trickles it holds no more of the pool than it sent. A declared length
// over limit is ErrTooLarge, answered without reading the body.
func (g *Gate) Admit(pool *Pool, r *http.Request, limit int64) (*Admission, error) {
	size := int64(chunk)
	switch {
	case r.ContentLength > limit:
		g.m.refused.WithLabelValues(pool.name, "too_large").Inc()
		return nil, fmt.Errorf("%w: body over %d bytes (declared %d)", ErrTooLarge, limit, r.ContentLength)
	case r.ContentLength >= 0:
		size = min(size, r.ContentLength)
	}
	t, err := pool.take(RemoteAddr(r), min(size, limit))
	if err != nil {
		return nil, err
	}
	return &Admission{g: g, t: t}, nil
}

// chunk is how much of a body is read under one read deadline.
const chunk = 32 << 10

// ReadBody reads r's body, at most limit bytes, at no less than the minimum
// rate once the grace has passed, and all of it before deadline (zero:
// none). Every chunk is read under a read deadline of the connection
// (http.ResponseController), so a sender that trickles is cut within
// seconds: the error is ErrTooSlow, and the connection is closed after the
// answer. Each chunk takes its room from the pool first: ErrBusy when the
// pool has none. A body over limit is ErrTooLarge.
//
// The body is the caller's until Release, and for good unless Recycle was
// called before it.
func (a *Admission) ReadBody(w http.ResponseWriter, r *http.Request, limit int64, deadline time.Time) ([]byte, error) {
	g := a.g
	rc := http.NewResponseController(w)
	start := time.Now()
	body := http.MaxBytesReader(w, r.Body, limit)
	buf := bodies.Get().(*bytes.Buffer)
	buf.Reset()
	a.body = buf
	if r.ContentLength > 0 {
		// And MinRead past it, so reading to the end of a body of the
		// declared length does not grow it again.
		buf.Grow(int(min(r.ContentLength, chunk)) + bytes.MinRead)
	}
	deadlines := true
	for {
		next := int64(chunk)
		if r.ContentLength >= 0 {
			next = max(0, min(next, r.ContentLength-int64(buf.Len())))
		}
		// Room for the next chunk, before it is read.
		if need := min(int64(buf.Len())+next, limit+1) - a.held(); need > 0 {
			if err := a.t.grow(need); err != nil {
				w.Header().Set("Connection", "close")
				return nil, fmt.Errorf("%d bytes of the body read: %w", buf.Len(), err)
			}
		}
		if deadlines {
			// The next chunk (or the rest of a declared length) is due
			// by when the minimum rate, counted from the end of the
			// grace, would have brought it.
			due := start.Add(g.grace + time.Duration(float64(int64(buf.Len())+next)/float64(g.minRate)*float64(time.Second)))
			if !deadline.IsZero() && due.After(deadline) {
				due = deadline
			}
			if err := rc.SetReadDeadline(due); errors.Is(err, http.ErrNotSupported) {
				deadlines = false // a writer that cannot: only max bounds the body
			} else if err != nil {
				return nil, fmt.Errorf("set read deadline: %w", err)
			}
		}
		_, err := io.CopyN(buf, body, chunk)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, g.readError(w, r, buf.Len(), time.Since(start), err)
		}
	}
	if deadlines {
		_ = rc.SetReadDeadline(time.Time{})
	}
	return buf.Bytes(), nil
}

func (a *Admission) held() int64 {
	a.t.p.mu.Lock()
	defer a.t.p.mu.Unlock()
	return a.t.bytes
}

func (g *Gate) readError(w http.ResponseWriter, r *http.Request, got int, took time.Duration, err error) error {
	var tooBig *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &tooBig):
		g.m.cut.WithLabelValues("too_large").Inc()
		return fmt.Errorf("%w: body over %d bytes", ErrTooLarge, tooBig.Limit)
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		g.m.cut.WithLabelValues("too_slow").Inc()
		w.Header().Set("Connection", "close")
		return fmt.Errorf("%w: %d bytes of the body from %s in %s, slower than %d bytes/s after %s or past the request's deadline",
			ErrTooSlow, got, RemoteAddr(r), took.Round(time.Millisecond), g.minRate, g.grace)
	}
	return fmt.Errorf("read body: %w", err)
}

// Unread marks the answer to a request whose body was not read (refused
// from its headers, or by a pool): the connection closes after the
// answer. Otherwise the server, to keep the connection, first reads what
// is left of a small body, and waits for one that never comes.
func Unread(w http.ResponseWriter) { w.Header().Set("Connection", "close") }
