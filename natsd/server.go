package natsd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ErrNotReady reports that a server did not accept connections in time.
var ErrNotReady = errors.New("server did not become ready")

// readyTimeout bounds how long Start waits for the listeners.
const readyTimeout = 30 * time.Second

// Server is a running embedded NATS server with JetStream.
type Server struct {
	cfg  Config
	ns   *server.Server
	lock *dirLock
}

// Start starts a server and returns once it accepts client connections.
// It fails with ErrLocked when another process runs on the same Dir.
func Start(cfg Config) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lock, err := lockDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	opts, err := cfg.options()
	if err != nil {
		lock.release()
		return nil, err
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		lock.release()
		return nil, fmt.Errorf("natsd: configure server %s on %s: %w", cfg.Name, cfg.Dir, err)
	}
	// The server reports a failed listener or JetStream only through its
	// logger; keep the first fatal message to fail Start with it at once.
	lg := &logger{logf: cfg.Logf, fatal: make(chan string, 1)}
	ns.SetLoggerV2(lg, cfg.Debug && cfg.Logf != nil, false, false)
	ns.Start()
	addr := net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))
	fail := func(err error) (*Server, error) {
		ns.Shutdown()
		ns.WaitForShutdown()
		lock.release()
		return nil, err
	}
	deadline := time.Now().Add(readyTimeout)
	for !ns.ReadyForConnections(50 * time.Millisecond) {
		select {
		case msg := <-lg.fatal:
			return fail(fmt.Errorf("natsd: start %s on %s: %s", cfg.Name, addr, msg))
		default:
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("natsd: %w: %s on %s within %s", ErrNotReady, cfg.Name, addr, readyTimeout))
		}
	}
	if !ns.JetStreamEnabled() {
		msg := "JetStream is not enabled"
		select {
		case m := <-lg.fatal:
			msg = m
		default:
		}
		return fail(fmt.Errorf("natsd: start %s on %s: %s", cfg.Name, addr, msg))
	}
	return &Server{cfg: cfg, ns: ns, lock: lock}, nil
}

func (c Config) options() (*server.Options, error) {
	interval, always, err := parseSync(c.Sync)
	if err != nil {
		return nil, err
	}
	routes, err := parseRoutes(c.Cluster.Routes)
	if err != nil {
		return nil, err
	}
	port := c.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		ServerName:   c.Name,
		Host:         c.Host,
		Port:         port,
		JetStream:    true,
		StoreDir:     c.Dir,
		SyncInterval: interval,
		SyncAlways:   always,
		MaxPayload:   c.MaxPayload,
		NoSigs:       true,
		// Monitoring stays off; the process exposes its own metrics.
		HTTPPort: 0,
	}
	if c.Auth != nil {
		opts.Users, opts.Nkeys = c.Auth.Users, c.Auth.Nkeys
	}
	if c.Clustered() {
		cport := c.Cluster.Port
		if cport == 0 {
			cport = server.RANDOM_PORT
		}
		opts.Cluster = server.ClusterOpts{
			Name: c.Cluster.Name,
			Host: c.Cluster.Host,
			Port: cport,
		}
		opts.Routes = routes
	}
	return opts, nil
}

// ClientURL is the nats:// URL clients connect to.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// ClusterURL is the nats-route:// URL other members route to, or "" for a
// single node.
func (s *Server) ClusterURL() string {
	addr := s.ns.ClusterAddr()
	if addr == nil {
		return ""
	}
	return "nats-route://" + addr.String()
}

// Name is the server's name.
func (s *Server) Name() string { return s.cfg.Name }

// Config is the config the server runs with, defaults applied.
func (s *Server) Config() Config { return s.cfg }

// Server exposes the underlying nats-server, for tests and diagnostics.
func (s *Server) Server() *server.Server { return s.ns }

// JetStreamReady reports whether JetStream can serve API requests: always
// once started for a single node; for a cluster member, once a meta leader
// is known and this member is current with it.
func (s *Server) JetStreamReady() bool {
	if !s.ns.JetStreamEnabled() {
		return false
	}
	if !s.cfg.Clustered() {
		return true
	}
	return s.ns.JetStreamIsCurrent()
}

// Shutdown stops the server and releases the store folder. It returns when
// the server has stopped or ctx is done, whichever comes first; the lock is
// released only once the server has stopped.
func (s *Server) Shutdown(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
		s.lock.release()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("natsd: shut down %s: %w", s.cfg.Name, ctx.Err())
	}
}

// logger adapts the server's logger interface to a func, and keeps the
// first fatal message for Start.
type logger struct {
	logf  func(level, msg string)
	fatal chan string
}

func (l *logger) log(level, format string, v ...any) {
	if l.logf != nil {
		l.logf(level, fmt.Sprintf(format, v...))
	}
}

func (l *logger) Noticef(format string, v ...any) { l.log("info", format, v...) }
func (l *logger) Warnf(format string, v ...any)   { l.log("warn", format, v...) }
func (l *logger) Errorf(format string, v ...any)  { l.log("error", format, v...) }
func (l *logger) Debugf(format string, v ...any)  { l.log("debug", format, v...) }
func (l *logger) Tracef(format string, v ...any)  { l.log("debug", format, v...) }

func (l *logger) Fatalf(format string, v ...any) {
	l.log("error", format, v...)
	select {
	case l.fatal <- fmt.Sprintf(format, v...):
	default:
	}
}
