package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/dlq"
	"github.com/jetloop/jetloop/ledger"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/schedule"
	"github.com/jetloop/jetloop/streams"
	"github.com/jetloop/jetloop/tools/mcp"
)

// Name is the micro service's name, as `nats micro ls` shows it.
const Name = "jetloop"

// Version is the version of the API contract (the request and response
// types), which micro announces.
const Version = "1.0.0"

// Defaults of Config.
const (
	DefaultTimeout = 15 * time.Second
	// maxErrorHeader bounds the error message in micro's header; the whole
	// error is in the response body.
	maxErrorHeader = 2 << 10
)

// Config configures a Service.
type Config struct {
	Names streams.Names
	// Build is the build version of the process, announced in the
	// service's metadata.
	Build string
	// Timeout bounds the handling of one request. Default 15 s.
	Timeout time.Duration
	// MaxResponse bounds a response, in bytes. Default: the connection's
	// max payload less 16 KiB for headers.
	MaxResponse int
	Log         *slog.Logger
	Metrics     *Metrics
	// Shares bound an agent's part of JL_IN's room (streams.Shares) for
	// the ticks a schedule trigger or backfill writes; zero: the defaults.
	Shares streams.Shares
	// Readmit redrives dead letters of admission through the ingest's
	// admission; nil (a process without the ingest) refuses them with
	// 503.
	Readmit dlq.Readmit
	// Requests runs user requests (send) through the ingest's pipeline,
	// as POST …/messages does; nil (a process without the ingest) refuses
	// them with 503.
	Requests Requests
	// Catalogs records, at apply, what a definition's MCP servers offer
	// (their admitted tools' descriptions and schemas); default an
	// mcp.Pool with default options, which connects to each server from
	// this process.
	Catalogs CatalogAdmitter
}

// CatalogAdmitter records the catalogs of a definition's MCP servers in
// it before it is stored; mcp.Pool implements it.
type CatalogAdmitter interface {
	Admit(ctx context.Context, c *policies.Compiled, file string) error
}

func (c *Config) setDefaults(nc *nats.Conn) {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxResponse == 0 {
		c.MaxResponse = int(nc.MaxPayload()) - 16<<10
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
	if c.Catalogs == nil {
		if p, err := mcp.NewPool(mcp.Options{Logger: c.Log}); err == nil {
			c.Catalogs = p
		}
	}
}

// Validate reports a config that cannot work.
func (c Config) Validate() error {
	if c.Timeout < 0 {
		return fmt.Errorf("api: timeout %s is negative", c.Timeout)
	}
	if c.MaxResponse < 64<<10 {
		return fmt.Errorf("api: max response %d bytes: want at least 64 KiB", c.MaxResponse)
	}
	return nil
}

// Service serves the runtime API on NATS (Run) and HTTP (MountHTTP).
type Service struct {
	cfg       Config
	nc        *nats.Conn
	js        jetstream.JetStream
	names     streams.Names
	log       *slog.Logger
	m         *Metrics
	agents    *policies.Store
	schedules *schedule.HealthStore
	sessions  jetstream.KeyValue
	ctl       jetstream.Stream
	in        jetstream.Stream
	redriver  *dlq.Redriver
	// seen is jl_dedupe: ticks fired by hand, and control requests by
	// their id (an Idempotency-Key) with a digest of what they asked.
	seen *dedupe.Store
	// ledger is jl_ledger: the accounts of delegation trees.
	ledger *ledger.Store
	// room is JL_IN's, checked before a schedule's ticks fired by hand
	// are written.
	room *streams.Room
}

// New binds a service to the deployment's streams and buckets, which
// streams.Provision creates.
func New(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, cfg Config) (*Service, error) {
	cfg.setDefaults(nc)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	agents, err := policies.NewStore(ctx, js, cfg.Names, policies.WithLogger(cfg.Log))
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	health, err := schedule.NewHealthStore(ctx, js, cfg.Names)
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	sessions, err := js.KeyValue(ctx, cfg.Names.BucketSessions())
	if err != nil {
		return nil, fmt.Errorf("api: open bucket %s: %w", cfg.Names.BucketSessions(), err)
	}
	ctl, err := js.Stream(ctx, cfg.Names.StreamCtl())
	if err != nil {
		return nil, fmt.Errorf("api: open stream %s: %w", cfg.Names.StreamCtl(), err)
	}
	in, err := js.Stream(ctx, cfg.Names.StreamIn())
	if err != nil {
		return nil, fmt.Errorf("api: open stream %s: %w", cfg.Names.StreamIn(), err)
	}
	redriver, err := dlq.NewRedriver(ctx, js, cfg.Names, cfg.Readmit)
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	seen, err := dedupe.New(ctx, js, dedupe.Config{Names: cfg.Names})
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	lg, err := ledger.Open(ctx, js, cfg.Names)
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	return &Service{cfg: cfg, nc: nc, js: js, names: cfg.Names, log: cfg.Log, m: cfg.Metrics,
		agents: agents, schedules: health, sessions: sessions, ctl: ctl, in: in, redriver: redriver, seen: seen, ledger: lg,
		room: streams.NewInRoom(js, cfg.Names, cfg.Shares)}, nil
}

// Run serves the micro service until ctx ends, then stops it: its
// subscriptions drain, and requests still in flight are cancelled.
func (s *Service) Run(ctx context.Context) error {
	svc, err := micro.AddService(s.nc, micro.Config{
		Name:        Name,
		Version:     Version,
		Description: "jetloop runtime API: every verb of the jetloop CLI",
		Metadata:    map[string]string{"prefix": s.names.Prefix(), "build": s.cfg.Build},
	})
	if err != nil {
		return fmt.Errorf("api: add service %s: %w", Name, err)
	}
	for name, op := range s.ops() {
		subject := s.names.API(name)
		if err := svc.AddEndpoint(name, s.natsHandler(ctx, name, op), micro.WithEndpointSubject(subject)); err != nil {
			_ = svc.Stop()
			return fmt.Errorf("api: add endpoint %s on %s: %w", name, subject, err)
		}
	}
	s.log.Info("api serving", "service", Name, "subjects", s.names.API("*"))
	<-ctx.Done()
	if err := svc.Stop(); err != nil {
		return fmt.Errorf("api: stop service: %w", err)
	}
	return nil
}

// op serves one endpoint: it decodes the request body and does the work.
type op func(ctx context.Context, body []byte) (any, error)

// natsHandler adapts op to micro: a deadline per request, errors as
// micro's error headers plus the *Error as the body, metrics and logs.
func (s *Service) natsHandler(base context.Context, name string, fn op) micro.Handler {
	return micro.HandlerFunc(func(req micro.Request) {
		start := time.Now()
		ctx, cancel := context.WithTimeout(base, s.cfg.Timeout)
		defer cancel()
		resp, err := fn(ctx, req.Data())
		var body []byte
		if err == nil {
			body, err = s.encode(resp)
		}
		code := http.StatusOK
		if err != nil {
			e := classify(err)
			code = e.Code
			data, _ := json.Marshal(e)
			if rerr := req.Error(codeString(e.Code), headerValue(e.Message), data); rerr != nil {
				s.log.Warn("api: answer error", "endpoint", name, "err", rerr)
			}
			s.logFailure(name, "nats", e)
		} else if rerr := req.Respond(body); rerr != nil {
			s.log.Warn("api: answer", "endpoint", name, "err", rerr)
		}
		s.observe(name, "nats", code, start)
	})
}

func (s *Service) observe(endpoint, transport string, code int, start time.Time) {
	s.m.requests.WithLabelValues(endpoint, transport, strconv.Itoa(code)).Inc()
	s.m.seconds.WithLabelValues(endpoint).Observe(time.Since(start).Seconds())
}

func (s *Service) logFailure(endpoint, transport string, e *Error) {
	if e.Code >= 500 {
		s.log.Warn("api request failed", "endpoint", endpoint, "transport", transport, "code", e.Code, "err", e.Message)
	} else {
		s.log.Info("api request refused", "endpoint", endpoint, "transport", transport, "code", e.Code, "err", e.Message)
	}
}

// encode renders a response, refusing one over MaxResponse.
func (s *Service) encode(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("api: encode response: %w", err)
	}
	if b.Len() > s.cfg.MaxResponse {
		return nil, errorf(http.StatusInternalServerError, "api: response of %d bytes exceeds the limit of %d", b.Len(), s.cfg.MaxResponse)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// headerValue makes an error message fit one header line.
func headerValue(msg string) string {
	msg = strings.Join(strings.FieldsFunc(msg, func(r rune) bool { return r == '\r' || r == '\n' }), "; ")
	if len(msg) > maxErrorHeader {
		msg = msg[:maxErrorHeader-3] + "..."
	}
	if msg == "" {
		msg = "error"
	}
	return msg
}

// decode reads a request body strictly: one JSON object of type T with no
// unknown fields; an empty body is T's zero value.
func decode[T any](body []byte) (T, error) {
	var v T
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return v, nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return v, errorf(http.StatusBadRequest, "request body: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return v, errorf(http.StatusBadRequest, "request body: more than one JSON value")
	}
	return v, nil
}

// fit returns how many of items, from the first, encode within budget
// bytes as a JSON array.
func fit[T any](items []T, budget int) int {
	total := 2
	for i, it := range items {
		b, err := json.Marshal(it)
		if err != nil {
			return i
		}
		total += len(b) + 1
		if total > budget {
			return i
		}
	}
	return len(items)
}
