package ingest

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/admission"
	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/ingest/gate"
	"github.com/jetloop/jetloop/policies"
	"github.com/jetloop/jetloop/streams"
)

// Defaults of Config.
const (
	DefaultTimeout    = 8 * time.Second
	DefaultRetryAfter = 5 * time.Second
	// MaxRequestBody bounds the body of a user request.
	MaxRequestBody = 1 << 20
	// MaxIdempotencyKey bounds an Idempotency-Key header.
	MaxIdempotencyKey = 256
	// MaxHops bounds the delegation hops (events.ExtHops) an event sent
	// to POST /events may claim.
	MaxHops = 1000
)

// Config configures a Server.
type Config struct {
	Names streams.Names
	// GitHubSecret is the webhook secret. Empty: the GitHub receiver
	// answers 503 (not configured).
	GitHubSecret []byte
	// Token is the bearer token of /events and user requests. Empty: those
	// receivers answer 503 (not configured).
	Token string
	// Timeout bounds the handling of one request, so every sender is
	// answered well within GitHub's 10 seconds. Default 8 s.
	Timeout time.Duration
	// RetryAfter is the Retry-After of a 503. Default 5 s.
	RetryAfter time.Duration
	// Gate admits a request before its body is read and reads the body
	// at a minimum rate within the request's deadline. Bearer-token
	// receivers check the token first and draw from its verified pool;
	// the GitHub receiver, whose signature covers the body, draws from
	// its unverified pool. Share one gate among every receiver of a
	// listener. Nil: a gate of its own, with package gate's defaults.
	Gate *gate.Gate
	// GitHubNetworks, when set, are the only source networks the GitHub
	// receiver accepts (GitHub's published hook ranges); any other
	// address is answered 403 before anything else. Zero: every address.
	GitHubNetworks gate.Networks
	// MaxEventSize is the most data of one event published in its
	// message, in bytes: what NATS can carry (the connection's max
	// payload, less room for headers). Larger data, up to a receiver's
	// body limit (GitHub: MaxGitHubBody), goes to jl_blobs and the event
	// carries a claim check (ExtBlob, BlobRef). 0: events.MaxEventSize.
	MaxEventSize int
	// Shares bound what one agent and one source may take of JL_IN's
	// room (streams.Shares). Zero: the defaults.
	Shares  streams.Shares
	Log     *slog.Logger
	Metrics *Metrics
	// Now is the clock of event times. Default time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = DefaultRetryAfter
	}
	if c.MaxEventSize == 0 || c.MaxEventSize > events.MaxEventSize {
		c.MaxEventSize = events.MaxEventSize
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports a config that cannot work.
func (c Config) Validate() error {
	if c.Timeout < 0 || c.RetryAfter < 0 || c.MaxEventSize < 0 {
		return errors.New("ingest: negative limit in config")
	}
	if c.Gate != nil {
		if l := c.Gate.Unverified().Limits(); l.Bytes < MaxGitHubBody || l.PerAddrBytes > 0 && l.PerAddrBytes < MaxGitHubBody {
			return fmt.Errorf("ingest: the gate's unverified pool must fit one GitHub body of %d bytes, in total and per address", MaxGitHubBody)
		}
		if l := c.Gate.Verified().Limits(); l.Bytes < int64(c.MaxEventSize)+64<<10 {
			return fmt.Errorf("ingest: the gate's verified pool must fit one event of %d bytes", c.MaxEventSize+64<<10)
		}
	}
	return nil
}

// Server holds the receivers and the pipeline behind them.
type Server struct {
	adm *admission.Admitter
	// paths caches the paths of a webhook's body decoded for the rules
	// of the moment (githubDecodePaths).
	paths  atomic.Pointer[decodePaths]
	cfg    Config
	log    *slog.Logger
	m      *Metrics
	handle Handler
	// readmit is the pipeline of a redriven dead letter of admission.
	readmit Handler
	gate    *gate.Gate
	// macs verify the GitHub receiver's signatures.
	macs signatureMACs
}

// New assembles the receivers over the pipeline.
func New(cfg Config, js jetstream.JetStream, store *dedupe.Store, adm *admission.Admitter) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := cfg.Gate
	if g == nil {
		var err error
		if g, err = gate.New(gate.Config{}); err != nil {
			return nil, fmt.Errorf("ingest: %w", err)
		}
	}
	s := &Server{cfg: cfg, log: cfg.Log, m: cfg.Metrics, gate: g, adm: adm}
	s.handle = s.pipeline(js, store, adm)
	s.readmit = Chain(
		Publish(js, adm, s.cfg.Names, s.m, WithClaimCheck(s.cfg.MaxEventSize)),
		Admit(adm),
	)
	return s, nil
}

// Readmit runs e, an event admission could not decide for agent (a dead
// letter being redriven), through admission again for that agent alone
// and publishes what it admits, with the Nats-Msg-Id the first admission
// would have used, so the other agents the event reached get nothing
// twice. It returns the sessions it went to, as "agent/session" (none
// when the agent's triggers now reject it, which the audit records). It
// skips the jl_dedupe layer, which remembers the event as handled; the
// redrive is deduplicated by the dead letter instead (dlq.Redriver).
func (s *Server) Readmit(ctx context.Context, e event.Event, agent string) ([]string, error) {
	d := &Delivery{Event: e, Receiver: "redrive", Only: agent}
	res, err := s.readmit(ctx, d)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(res.Admitted))
	for _, t := range res.Admitted {
		out = append(out, t.Agent+"/"+t.Session)
	}
	return out, nil
}

// pipeline is the whole path of an event once its receiver has verified
// the sender and built the CloudEvent: dedupe, then admission, then the
// room left in JL_IN, then publish. Read it top to bottom.
func (s *Server) pipeline(js jetstream.JetStream, store *dedupe.Store, adm *admission.Admitter) Handler {
	return Pipeline(js, store, adm, s.cfg.Names, s.m, s.cfg.MaxEventSize, s.cfg.Shares)
}

// Pipeline is the path of every event once it is built: dedupe, then
// admission, then the room left in JL_IN, then publish, with the claim check for data larger than
// maxEventSize bytes (0: events.MaxEventSize). The receivers run it, and
// so does a process that makes events of its own that must be admitted
// like any other: a worker starting a delegated session.
//
// shares bound each agent's and source's part of JL_IN's room
// (streams.Shares); one value, or none for the defaults. The decision
// records adm writes count in m (Admitter.ObserveRecords): give one
// Admitter to one pipeline.
func Pipeline(js jetstream.JetStream, store *dedupe.Store, adm *admission.Admitter, names streams.Names, m *Metrics, maxEventSize int, shares ...streams.Shares) Handler {
	if maxEventSize <= 0 || maxEventSize > events.MaxEventSize {
		maxEventSize = events.MaxEventSize
	}
	if m == nil {
		m = NewMetrics()
	}
	adm.ObserveRecords(m)
	var sh streams.Shares
	if len(shares) > 0 {
		sh = shares[0]
	}
	return Chain(
		Publish(js, adm, names, m, WithClaimCheck(maxEventSize)),
		Deduplicate(store, adm, js, m),
		RefuseUnadmitted(),
		Admit(adm),
		Room(streams.NewInRoom(js, names, sh), m, auditNoRoom(js, names, m), maxEventSize),
	)
}

// auditNoRoom records in JL_AUDIT, for each agent refused, that JL_IN had
// no room for the event (decision no_room, with the reason): the sender is
// answered 503, and the audit trail shows whose flood it was.
func auditNoRoom(js jetstream.JetStream, names streams.Names, m *Metrics) func(context.Context, *Delivery, map[string]error) {
	return func(ctx context.Context, d *Delivery, refused map[string]error) {
		var msgs []*nats.Msg
		for _, dec := range d.Decisions {
			err := refused[dec.Agent]
			if err == nil {
				continue
			}
			switch dec.Outcome {
			case admission.Admitted, admission.Debounced, admission.Throttled:
			default:
				continue
			}
			dec.Outcome, dec.Reason = admission.NoRoom, err.Error()
			if m, err := admission.DecisionMessage(names, d.Event, dec, time.Now()); err == nil {
				msgs = append(msgs, m)
			}
		}
		// JL_AUDIT drops its oldest when full: a failure here is NATS's,
		// and the 503 that follows says why already.
		_ = writeRecords(ctx, js, m, msgs)
	}
}

// Request runs a user's request through the pipeline, exactly as POST
// /v1/agents/{agent}/sessions/{session}/messages does: the same event
// (events.RequestEvent), dedupe (an id reused for another text is
// ErrConflict), admission, limits, publish and records. receiver names
// the way it came (api, slack) in metrics and logs. A request admitted
// nowhere is ErrNotAdmitted, naming why.
func (s *Server) Request(ctx context.Context, r events.Request, receiver string) (*Result, error) {
	e, err := events.RequestEvent(r, s.cfg.Now())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	s.m.received.WithLabelValues(receiver).Inc()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	d := &Delivery{Event: e, Receiver: receiver, Digest: requestDigest(e)}
	res, err := s.handle(ctx, d)
	if err != nil {
		s.m.refused.WithLabelValues(receiver, strconv.Itoa(Status(err))).Inc()
		return nil, err
	}
	logAccepted(s.log, receiver, e, res)
	return res, nil
}

// logAccepted logs that the event e that came through receiver was
// handled, with res: the attributes built as slog.Attr, not boxed in a
// slice of any and converted again, and not at all when the level is
// off. As Logger.Info, it logs without a context.
func logAccepted(log *slog.Logger, receiver string, e event.Event, res *Result) {
	ctx := context.Background()
	if !log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	log.LogAttrs(ctx, slog.LevelInfo, "event accepted", slog.String("receiver", receiver), slog.String("id", e.ID()),
		slog.String("type", e.Type()), slog.String("source", e.Source()),
		slog.Bool("duplicate", res.Duplicate), slog.Int("admitted", len(res.Admitted)))
}

// requestDigest names what a sender sent with an id it may reuse.
func requestDigest(e event.Event) string {
	return dedupe.Digest([]byte(e.Type()), []byte(e.Subject()), []byte(e.DataContentType()), e.Data())
}

// Mount registers the receivers on mux:
//
//	POST /webhooks/github                                  source networks → unverified pool → verify HMAC → CloudEvent → pipeline
//	POST /events                                           bearer token → verified pool → CloudEvent (sdk-go HTTP) → pipeline
//	POST /v1/agents/{agent}/sessions/{session}/messages    bearer token → verified pool → request CloudEvent → pipeline
func (s *Server) Mount(mux *http.ServeMux) {
	mux.Handle("POST /webhooks/github", s.receiver("github", MaxGitHubBody, s.gate.Unverified(), s.githubHeaders, s.github))
	mux.Handle("POST /events", s.receiver("events", s.cfg.MaxEventSize+64<<10, s.gate.Verified(), s.bearer, s.cloudEvent))
	mux.Handle("POST /v1/agents/{agent}/sessions/{session}/messages", s.receiver("request", MaxRequestBody, s.gate.Verified(), s.bearer, s.request))
}

// admit checks what a request's headers alone can tell, before its body
// is read: an unauthenticated sender must not hold memory or a slot for
// the time it takes to send a large body.
type admit func(r *http.Request) error

// receive turns a request into an event (or an immediate answer).
type receive func(r *http.Request, body []byte) (d *Delivery, answer *answer, err error)

// answer is a response given without the pipeline (a ping).
type answer struct {
	status int
	body   any
}

// receiver wraps a receive function with what every receiver shares: the
// header checks before the body, a slot and room for the body from pool,
// the body read at the gate's minimum rate within the request's deadline,
// the body limit, metrics, and the mapping of errors to statuses.
func (s *Server) receiver(name string, maxBody int, pool *gate.Pool, pre admit, recv receive) http.Handler {
	// The receiver's own series, looked up once rather than per request
	// (each lookup hashes the label and takes the vector's lock).
	received, seconds := s.m.received.WithLabelValues(name), s.m.seconds.WithLabelValues(name)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := s.cfg.Now()
		received.Inc()
		defer func() { seconds.Observe(s.cfg.Now().Sub(start).Seconds()) }()
		if err := pre(r); err != nil {
			gate.Unread(w)
			s.fail(w, name, err)
			return
		}
		adm, err := s.gate.Admit(pool, r, int64(maxBody))
		if err != nil {
			gate.Unread(w)
			s.fail(w, name, err)
			return
		}
		defer adm.Release()
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
		defer cancel()
		deadline, _ := ctx.Deadline()
		body, err := adm.ReadBody(w, r, int64(maxBody), deadline)
		if err != nil {
			s.fail(w, name, err)
			return
		}
		d, ans, err := recv(r, body)
		if err != nil {
			s.fail(w, name, err)
			return
		}
		if ans != nil {
			writeJSON(w, ans.status, ans.body)
			adm.Recycle() // answered from the body alone
			return
		}
		d.Receiver = name
		e := d.Event
		if name != "github" {
			// A sender that reuses an id (an Idempotency-Key) must mean
			// the same request. GitHub's redeliveries are its own.
			d.Digest = requestDigest(e)
		}
		res, err := s.handle(ctx, d)
		if err != nil {
			s.fail(w, name, err)
			return
		}
		logAccepted(s.log, name, e, res)
		writeJSON(w, http.StatusAccepted, res)
		// Every message that shares the body is acknowledged: its memory
		// can hold the next request's.
		adm.Recycle()
	})
}

// githubHeaders refuses, before the body is read, a delivery that cannot
// be verified: no secret configured, or no signature.
func (s *Server) githubHeaders(r *http.Request) error {
	if err := s.cfg.GitHubNetworks.Check(r); err != nil {
		return err
	}
	if len(s.cfg.GitHubSecret) == 0 {
		return fmt.Errorf("%w: GitHub webhook secret not configured (JETLOOP_GITHUB_SECRET)", errNotConfigured)
	}
	if r.Header.Get(HeaderGitHubSignature) == "" {
		return fmt.Errorf("%w: missing %s header", ErrUnauthorized, HeaderGitHubSignature)
	}
	return nil
}

// decodePaths are the paths decoded of a webhook's body for one set of
// rules' paths.
type decodePaths struct{ rules, union *policies.DataPaths }

// githubDecodePaths are the paths decoded of a webhook's body: the
// receiver's and the rules' (nil, all of it, without an admitter).
func (s *Server) githubDecodePaths() *policies.DataPaths {
	if s.adm == nil {
		return nil // no rules known: all of it
	}
	rules := s.adm.DataPaths()
	if c := s.paths.Load(); c != nil && c.rules == rules {
		return c.union
	}
	union := githubPaths.Union(rules)
	s.paths.Store(&decodePaths{rules: rules, union: union})
	return union
}

func (s *Server) github(r *http.Request, body []byte) (*Delivery, *answer, error) {
	sig := r.Header.Get(HeaderGitHubSignature)
	if !s.macs.verify(s.cfg.GitHubSecret, body, sig) {
		return nil, nil, fmt.Errorf("%w: %s does not match the body", ErrUnauthorized, HeaderGitHubSignature)
	}
	paths := s.githubDecodePaths()
	e, data, ping, err := githubEvent(r.Header, body, s.cfg.Now(), paths)
	if err != nil {
		return nil, nil, err
	}
	if ping {
		return nil, &answer{status: http.StatusOK, body: map[string]any{"ping": true, "delivery": r.Header.Get(HeaderGitHubDelivery)}}, nil
	}
	return &Delivery{Event: e, Data: policies.PartlyDecodedEventData(e, data, paths)}, nil, nil
}

// bearer checks the Authorization header against the configured token in
// constant time, before the body is read.
func (s *Server) bearer(r *http.Request) error {
	if s.cfg.Token == "" {
		return fmt.Errorf("%w: ingest token not configured (JETLOOP_INGEST_TOKEN)", errNotConfigured)
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.Token)) != 1 {
		return fmt.Errorf("%w: missing or wrong bearer token", ErrUnauthorized)
	}
	return nil
}

func (s *Server) cloudEvent(r *http.Request, body []byte) (*Delivery, *answer, error) {
	r.Body = io.NopCloser(bytes.NewReader(body))
	ep, err := cehttp.NewEventFromHTTPRequest(r)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: not a CloudEvent (binary or structured mode): %w", ErrBadRequest, err)
	}
	e := *ep
	if err := e.Validate(); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	// Data that claims to be JSON must be one JSON value and nothing
	// else, or rules would read what the sender did not mean (structured
	// mode's envelope is held to that by its parser).
	if isJSON(e.DataContentType()) && len(e.DataEncoded) > 0 && !json.Valid(e.DataEncoded) {
		return nil, nil, fmt.Errorf("%w: data of event %s is declared %s but is not one JSON value", ErrBadRequest, e.ID(), e.DataContentType())
	}
	// Delegations and their answers are the runtime's own events: a
	// sender cannot start a child session or answer for one.
	if t := e.Type(); t == events.TypeDelegate || t == events.TypeDelegateResult {
		return nil, nil, fmt.Errorf("%w: event type %s is the runtime's own: sessions delegate with the delegate tool", ErrBadRequest, t)
	}
	// The chat thread a run answers in is named by the receiver that read
	// the message (Slack's): a sender naming one would have the answer, an
	// approval request or a question posted where it chose.
	if _, ok := e.Extensions()[events.ExtThread]; ok {
		return nil, nil, fmt.Errorf("%w: extension %s is the runtime's own: chat threads are named by the chat receivers", ErrBadRequest, events.ExtThread)
	}
	// The worker caps delegation depth by this count: it must be one.
	if v, ok := e.Extensions()[events.ExtHops]; ok {
		if n, err := strconv.Atoi(fmt.Sprint(v)); err != nil || n < 0 || n > MaxHops {
			return nil, nil, fmt.Errorf("%w: extension %s %q: want a whole number from 0 to %d", ErrBadRequest, events.ExtHops, fmt.Sprint(v), MaxHops)
		}
	}
	// What ToMsg refuses could never be published: refuse it now.
	if _, err := events.ToMsg("ingest.check", e); err != nil {
		if errors.Is(err, events.ErrTooLarge) {
			return nil, nil, fmt.Errorf("%w: %w", ErrTooLarge, err)
		}
		return nil, nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return &Delivery{Event: e}, nil, nil
}

// isJSON reports whether a media type is JSON: application/json, or a
// +json suffix.
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

// requestBody is the body of a user request.
type requestBody struct {
	Text string `json:"text"`
}

func (s *Server) request(r *http.Request, body []byte) (*Delivery, *answer, error) {
	agent, session := r.PathValue("agent"), r.PathValue("session")
	if _, err := streams.NewSessionRef(agent, session); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	var req requestBody
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, nil, fmt.Errorf(`%w: body must be {"text": "..."}: %w`, ErrBadRequest, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf(`%w: body must be one JSON object {"text": "..."}, with nothing after it`, ErrBadRequest)
	}
	id := r.Header.Get("Idempotency-Key")
	if len(id) > MaxIdempotencyKey || strings.ContainsFunc(id, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return nil, nil, fmt.Errorf("%w: Idempotency-Key: at most %d printable characters", ErrBadRequest, MaxIdempotencyKey)
	}
	// The event every way in builds for a request; its source scopes
	// the Idempotency-Key to the session.
	e, err := events.RequestEvent(events.Request{Agent: agent, Session: session, Text: req.Text, ID: id}, s.cfg.Now())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return &Delivery{Event: e}, nil, nil
}

var errNotConfigured = errors.New("ingest: receiver not configured")

// Status is the HTTP status the receivers answer err with: 503 for
// anything not the sender's fault, so that no event is ever lost behind
// a 2xx or a 4xx.
func Status(err error) int {
	switch {
	case gate.Status(err) != 0:
		return gate.Status(err)
	case errors.Is(err, ErrUnauthorized):
		return http.StatusUnauthorized
	case errors.Is(err, ErrBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrConflict):
		return http.StatusConflict
	case errors.Is(err, ErrRateLimited):
		return http.StatusTooManyRequests
	case errors.Is(err, ErrNotAdmitted):
		return http.StatusUnprocessableEntity
	}
	return http.StatusServiceUnavailable
}

// fail answers err with its status: 503 with Retry-After for anything not
// the sender's fault, so that no event is ever lost behind a 2xx or a 4xx.
func (s *Server) fail(w http.ResponseWriter, receiver string, err error) {
	status := Status(err)
	s.m.refused.WithLabelValues(receiver, strconv.Itoa(status)).Inc()
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(int(max(1, s.cfg.RetryAfter.Round(time.Second)/time.Second))))
		s.log.Warn("request not handled; sender will retry", "receiver", receiver, "err", err)
	} else {
		s.log.Info("request refused", "receiver", receiver, "status", status, "err", err)
	}
	writeJSON(w, status, map[string]string{"error": err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if r, ok := body.(*Result); ok && r.encoded != nil {
		// What Encode would write: the same bytes and a newline.
		_, _ = w.Write(r.encoded)
		_, _ = w.Write([]byte{'\n'})
		return
	}
	_ = json.NewEncoder(w).Encode(body)
}
