package mcp

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/proctree"
	"github.com/jetloop/jetloop/tools"
)

// Defaults of Options.
const (
	DefaultBaseBackoff  = 100 * time.Millisecond
	DefaultMaxBackoff   = 10 * time.Second
	DefaultMaxAttempts  = 8
	DefaultConnectRate  = 50
	DefaultConnectBurst = 10
	DefaultStopGrace    = 2 * time.Second
	// DefaultMaxMessage bounds one message from a server (a tool result,
	// say): a larger one breaks the connection.
	DefaultMaxMessage = 8 << 20
	// maxListedTools bounds what a server's tools/list may return.
	maxListedTools = 4096
	// maxListBytes bounds the names, descriptions and schemas of a
	// server's whole tools/list.
	maxListBytes = 16 << 20
)

// Options configures a Pool. The zero value is usable.
type Options struct {
	// Logger receives connects, reconnects and catalog changes (default
	// slog.Default()).
	Logger *slog.Logger
	// Metrics registers the pool's collectors when set.
	Metrics prometheus.Registerer
	// Getenv reads the variables headers_env names (default os.Getenv).
	Getenv func(string) string
	// HTTPTransport carries Streamable HTTP connections (default a clone
	// of http.DefaultTransport with bounded dial and TLS handshakes).
	HTTPTransport http.RoundTripper
	// BaseBackoff and MaxBackoff shape reconnects: after n failed connects
	// in a row the next waits a random time in [0, min(MaxBackoff,
	// BaseBackoff·2^n)) (exponential backoff with full jitter).
	BaseBackoff, MaxBackoff time.Duration
	// MaxAttempts bounds the connects one call makes before it answers
	// that the server is unreachable (default DefaultMaxAttempts).
	MaxAttempts int
	// ConnectRate and ConnectBurst bound the new connections this process
	// opens to one server, per second: when a worker holding many
	// sessions dies, its successors' connects are spread out instead of
	// arriving together. A negative rate disables the bound.
	ConnectRate  float64
	ConnectBurst int
	// StopGrace is how long a stdio server gets to exit once its stdin is
	// closed, and again after SIGTERM before SIGKILL (default
	// DefaultStopGrace).
	StopGrace time.Duration
	// MaxMessage bounds one message from a server (default
	// DefaultMaxMessage).
	MaxMessage int
	// Trees starts stdio servers as process trees, stopped whole (see
	// package proctree); share the process's starter. Nil: the pool makes
	// one of its own, without records, when it first starts a server.
	Trees *proctree.Starter
	// OnChange records a catalog change a connection found (the worker
	// writes it to JL_AUDIT). It is called once per change and connection,
	// on a goroutine of the pool.
	OnChange func(Change)
}

func (o *Options) setDefaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.HTTPTransport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		t.TLSHandshakeTimeout = 10 * time.Second
		t.ResponseHeaderTimeout = 0 // a tool call's response may take its time
		o.HTTPTransport = t
	}
	if o.BaseBackoff <= 0 {
		o.BaseBackoff = DefaultBaseBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.ConnectRate == 0 {
		o.ConnectRate = DefaultConnectRate
	}
	if o.ConnectBurst <= 0 {
		o.ConnectBurst = DefaultConnectBurst
	}
	if o.StopGrace <= 0 {
		o.StopGrace = DefaultStopGrace
	}
	if o.MaxMessage <= 0 {
		o.MaxMessage = DefaultMaxMessage
	}
}

// Pool holds the MCP connections of the sessions a worker runs, keyed by
// (session, server): opened by a session's first call of a server's tool,
// closed when the session rests (CloseSession), reopened with backoff when
// the server went away. It is safe for concurrent use.
type Pool struct {
	opts    Options
	metrics *metrics

	mu     sync.Mutex
	conns  map[connKey]*conn
	gates  map[string]*rate.Limiter // by server address
	closed bool

	treesOnce sync.Once
	treesErr  error
}

// trees is the starter of stdio servers: Options.Trees, or the pool's own.
func (p *Pool) trees() (*proctree.Starter, error) {
	p.treesOnce.Do(func() {
		if p.opts.Trees == nil {
			p.opts.Trees, p.treesErr = proctree.New(proctree.Config{Log: p.opts.Logger})
		}
	})
	return p.opts.Trees, p.treesErr
}

// connKey names one connection: a session and one server as a definition
// declares it (a changed declaration is another connection).
type connKey struct {
	agent, session, server, fingerprint string
}

// NewPool returns an empty pool.
func NewPool(opts Options) (*Pool, error) {
	opts.setDefaults()
	p := &Pool{opts: opts, metrics: newMetrics(), conns: map[connKey]*conn{}, gates: map[string]*rate.Limiter{}}
	if opts.Metrics != nil {
		if err := p.metrics.register(opts.Metrics); err != nil {
			return nil, fmt.Errorf("mcp: register metrics: %w", err)
		}
	}
	return p, nil
}

// Tools returns the tools of def's MCP servers: one per admitted tool,
// named "<server>.<tool>", described to the model by the catalog recorded
// when def was applied (a tool without a recorded entry is left out).
// They serve every session of the agent: a call's connection is the one of
// its Call.Agent and Call.Session, opened when that session has none.
func (p *Pool) Tools(def policies.Definition) []tools.Tool {
	var out []tools.Tool
	for _, s := range def.MCPServers {
		fp := fingerprint(s)
		for _, name := range s.Tools {
			e, ok := s.CatalogTool(name)
			if !ok {
				continue
			}
			out = append(out, &tool{p: p, srv: s, fp: fp, entry: e})
		}
	}
	return out
}

// CloseSession closes the session's connections; stdio servers are
// stopped with their process groups. It returns once they are.
func (p *Pool) CloseSession(agent, session string) {
	p.mu.Lock()
	var cs []*conn
	for k, c := range p.conns {
		if k.agent == agent && k.session == session {
			cs = append(cs, c)
			delete(p.conns, k)
		}
	}
	p.mu.Unlock()
	closeAll(cs)
}

// Sessions reports how many sessions hold connections, and how many
// connections they hold.
func (p *Pool) Sessions() (sessions, conns int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := map[[2]string]bool{}
	for k := range p.conns {
		seen[[2]string{k.agent, k.session}] = true
	}
	return len(seen), len(p.conns)
}

// Close closes every connection; the pool opens no more.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	cs := make([]*conn, 0, len(p.conns))
	for k, c := range p.conns {
		cs = append(cs, c)
		delete(p.conns, k)
	}
	p.mu.Unlock()
	closeAll(cs)
}

func closeAll(cs []*conn) {
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(c.close)
	}
	wg.Wait()
}

var errPoolClosed = errors.New("mcp: the pool is closed")

// conn returns the connection of a session to a server, making it.
func (p *Pool) conn(agent, session string, s policies.MCPServer, fp, workDir string) (*conn, error) {
	k := connKey{agent: agent, session: session, server: s.Name, fingerprint: fp}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errPoolClosed
	}
	if c, ok := p.conns[k]; ok {
		return c, nil
	}
	c := newConn(p, k, s, workDir)
	p.conns[k] = c
	return c, nil
}

// gate is the connect rate bound of a server address.
func (p *Pool) gate(addr string) *rate.Limiter {
	if p.opts.ConnectRate < 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	g, ok := p.gates[addr]
	if !ok {
		g = rate.NewLimiter(rate.Limit(p.opts.ConnectRate), p.opts.ConnectBurst)
		p.gates[addr] = g
	}
	return g
}

// fingerprint identifies a server declaration: the same name with another
// address, headers or catalog is another connection.
func fingerprint(s policies.MCPServer) string {
	b, _ := json.Marshal(s)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// address is what the connect rate bound is per: the URL, or the command.
func address(s policies.MCPServer) string {
	if s.URL != "" {
		return s.URL
	}
	return strings.Join(s.Command, "\x00")
}
