package slack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetloop/jetloop/control"
	"github.com/jetloop/jetloop/dedupe"
	"github.com/jetloop/jetloop/events"
	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/ingest/gate"
	"github.com/jetloop/jetloop/streams"
)

// Defaults and bounds.
const (
	// DefaultWindow is how far a request's timestamp may be from the clock.
	DefaultWindow = 5 * time.Minute
	// DefaultTimeout bounds the handling of a request, well within the
	// 3 seconds Slack waits.
	DefaultTimeout = 2500 * time.Millisecond
	// MaxBody bounds a request body, in bytes.
	MaxBody = 256 << 10
	// retryTTL is how long a handled event id is remembered: longer than
	// Slack's last retry, about five minutes after the first delivery.
	retryTTL = time.Hour
)

// Dedupe sources in jl_dedupe.
const (
	sourceSignature = "slack-signature"
	sourceEvent     = "slack-event"
	sourceMessage   = "slack-message"
)

// Config configures a Receiver.
type Config struct {
	Names streams.Names
	// SigningSecret is the Slack app's signing secret. Empty: the receiver
	// answers 503 (not configured).
	SigningSecret []byte
	// Channels maps channel ids to the sessions they control.
	Channels Channels
	// Window is how far a timestamp may be from the clock. Default 5 min.
	Window time.Duration
	// Timeout bounds one request. Default 2.5 s.
	Timeout time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Check, when set, is asked before a command is published whether it
	// can apply to its session as it stands (the runtime API's check): a
	// refusal (no such session, a call id that is not pending) is answered
	// to the sender and nothing is published; an error is a failure Slack
	// retries.
	Check func(ctx context.Context, ref streams.SessionRef, m control.Message) (refusal string, err error)
	// Send, when set, makes a message of a mapped channel that is not a
	// command a user request to the channel's session, once per message
	// (id is the channel and the message's ts), whose answer goes to the
	// thread it came from (thread: events.SlackThread of the channel and
	// the thread's first ts). jetloop dev and jetloop ingest set it to the
	// path of every user request; an error it answers with a status below
	// 500 (ingest.Status: the agent does not take the request) is told
	// to the sender, and Slack is not asked to retry. Nil: such messages
	// are ignored.
	Send func(ctx context.Context, ref streams.SessionRef, text, id, source, thread string) (seq uint64, err error)
	Log  *slog.Logger
	// Gate admits a request before its body is read, from its unverified
	// pool (a Slack signature covers the body), and reads the body at its
	// minimum rate within the request's deadline. Share the listener's
	// gate. Nil: a gate of its own, with package gate's defaults.
	Gate *gate.Gate
}

func (c *Config) setDefaults() {
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Gate == nil {
		c.Gate, _ = gate.New(gate.Config{})
	}
}

// Validate reports a config that cannot work.
func (c Config) Validate() error {
	if c.Window < 0 || c.Timeout < 0 {
		return errors.New("slack: negative window or timeout")
	}
	return nil
}

// Receiver is the http.Handler of POST /chat/slack.
type Receiver struct {
	cfg   Config
	js    jetstream.JetStream
	kv    jetstream.KeyValue
	seen  *dedupe.Store
	names streams.Names
	log   *slog.Logger
}

// New binds a receiver to the deployment's jl_dedupe bucket and JL_CTL.
func New(ctx context.Context, js jetstream.JetStream, cfg Config) (*Receiver, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, cfg.Names.BucketDedupe())
	if err != nil {
		return nil, fmt.Errorf("slack: open bucket %s: %w", cfg.Names.BucketDedupe(), err)
	}
	seen, err := dedupe.New(ctx, js, dedupe.Config{Names: cfg.Names, TTL: retryTTL})
	if err != nil {
		return nil, fmt.Errorf("slack: %w", err)
	}
	return &Receiver{cfg: cfg, js: js, kv: kv, seen: seen, names: cfg.Names, log: cfg.Log}, nil
}

// Mount registers the receiver on mux at POST /chat/slack and POST
// /chat/slack/interactions.
func (r *Receiver) Mount(mux *http.ServeMux) {
	mux.Handle("POST /chat/slack", r)
	mux.HandleFunc("POST /chat/slack/interactions", r.ServeInteraction)
}

// httpError is an answer with a status.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func refuse(status int, format string, args ...any) error {
	return &httpError{status: status, msg: fmt.Sprintf(format, args...)}
}

// ServeHTTP verifies the request, then publishes the command it carries.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	ctx, cancel := context.WithTimeout(req.Context(), r.cfg.Timeout)
	defer cancel()
	resp, err := r.handle(ctx, req, w)
	if err != nil {
		status := http.StatusServiceUnavailable
		var he *httpError
		if errors.As(err, &he) {
			status = he.status
		}
		if status >= 500 {
			w.Header().Set("Retry-After", "1")
			r.log.Warn("slack request not handled; Slack will retry", "err", err)
		} else {
			r.log.Info("slack request refused", "status", status, "err", err)
		}
		writeJSON(w, status, map[string]any{"ok": false, "error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// checkHeaders refuses, before the body is read, a request that cannot
// verify: no secret configured, no signature, or a timestamp outside the
// window.
func (r *Receiver) checkHeaders(h http.Header) error {
	if len(r.cfg.SigningSecret) == 0 {
		return refuse(http.StatusServiceUnavailable, "slack signing secret not configured (JETLOOP_SLACK_SIGNING_SECRET)")
	}
	ts, sig := h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if ts == "" || sig == "" {
		return refuse(http.StatusUnauthorized, "missing %s or %s header", HeaderSignature, HeaderTimestamp)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return refuse(http.StatusUnauthorized, "%s %q is not Unix seconds", HeaderTimestamp, ts)
	}
	if age := r.cfg.Now().Sub(time.Unix(sec, 0)); age > r.cfg.Window || age < -r.cfg.Window {
		return refuse(http.StatusUnauthorized, "%s is %s from now, more than %s", HeaderTimestamp, age.Round(time.Second), r.cfg.Window)
	}
	return nil
}

// verify checks the signature and that it was not used before, in that
// order: nothing unauthenticated reaches the bucket. checkHeaders has
// passed. It returns the key that remembers the signature.
func (r *Receiver) verify(ctx context.Context, h http.Header, body []byte) (string, error) {
	ts, sig := h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if !Verify(r.cfg.SigningSecret, ts, body, sig) {
		return "", refuse(http.StatusUnauthorized, "%s does not match the body", HeaderSignature)
	}
	// A signature verifies only within the window either side of its
	// timestamp: remembering it for twice the window covers every moment
	// it could be replayed.
	h2 := sha256.Sum256([]byte(sig))
	key := r.names.DedupeKey(sourceSignature, hex.EncodeToString(h2[:]))
	_, err := r.kv.Create(ctx, key, []byte(ts), jetstream.KeyTTL(2*r.cfg.Window))
	switch {
	case errors.Is(err, jetstream.ErrKeyExists):
		return "", refuse(http.StatusUnauthorized, "replayed request: this signature was used at %s", ts)
	case err != nil:
		return "", fmt.Errorf("slack: remember signature: %w", err)
	}
	return key, nil
}

// request is what a verified request asks.
type request struct {
	// challenge is set for the Events API's URL verification.
	challenge string
	slash     bool
	team      string
	channel   string
	user      string
	text      string
	// ts is the message's timestamp, threadTS its thread's first (empty
	// for a message that starts no thread yet).
	ts, threadTS string
	// id identifies the delivery across Slack's retries.
	id string
	// ignore says why a request carries no command.
	ignore string
}

func (r *Receiver) handle(ctx context.Context, req *http.Request, w http.ResponseWriter) (_ any, err error) {
	if err := r.checkHeaders(req.Header); err != nil {
		gate.Unread(w)
		return nil, err
	}
	adm, err := r.cfg.Gate.Admit(r.cfg.Gate.Unverified(), req, MaxBody)
	if err != nil {
		gate.Unread(w)
		return nil, refuse(gate.Status(err), "%v", err)
	}
	defer adm.Release()
	deadline, _ := ctx.Deadline()
	body, err := adm.ReadBody(w, req, MaxBody, deadline)
	if err != nil {
		if st := gate.Status(err); st != 0 {
			return nil, refuse(st, "%v", err)
		}
		return nil, refuse(http.StatusBadRequest, "%v", err)
	}
	key, err := r.verify(ctx, req.Header, body)
	if err != nil {
		return nil, err
	}
	defer func() {
		var refused *httpError
		if err == nil || errors.As(err, &refused) {
			return
		}
		// Not handled through no fault of the sender, who may retry the
		// very same request (a proxy, say): the signature was not used.
		if derr := r.kv.Delete(context.WithoutCancel(ctx), key); derr != nil {
			r.log.Warn("slack: forget signature of a request not handled", "err", derr)
		}
	}()
	in, err := parseRequest(req.Header.Get("Content-Type"), body)
	if err != nil {
		return nil, err
	}
	if in.challenge != "" {
		return map[string]string{"challenge": in.challenge}, nil
	}
	log := r.log.With("team", in.team, "channel", in.channel, "user", in.user, "id", in.id)
	if in.ignore != "" {
		log.Debug("slack request ignored", "why", in.ignore)
		return r.answer(in, false, "ignored: "+in.ignore), nil
	}
	m, ok, err := ParseCommand(in.text)
	if !ok && r.cfg.Send != nil && !in.slash && in.ts != "" {
		return r.request(ctx, log, in)
	}
	if !ok {
		return r.answer(in, false, "no command; try: stop, pause, resume [text], steer <text>, approve <id>, deny <id>"), nil
	}
	if err != nil {
		// The sender's mistake: answered, not retried.
		return r.answer(in, false, err.Error()), nil
	}
	ref, ok := r.cfg.Channels[in.channel]
	if !ok {
		log.Info("slack command from a channel that controls no session", "verb", m.Verb)
		return r.answer(in, false, fmt.Sprintf("channel %s controls no session (add it to JETLOOP_SLACK_CHANNELS)", in.channel)), nil
	}
	source := "/chat/slack/" + url.PathEscape(in.team)
	if prev, seen, err := r.seen.Seen(ctx, sourceEvent+"/"+in.team, in.id); err != nil {
		return nil, err
	} else if seen {
		log.Info("slack retry of a handled command", "verb", m.Verb)
		var out map[string]any
		_ = json.Unmarshal(prev.Outcome, &out)
		if out == nil {
			out = map[string]any{"ok": true, "duplicate": true}
		}
		return out, nil
	}
	m.ID, m.Source, m.Time = in.id, source, r.cfg.Now()
	if r.cfg.Check != nil {
		refusal, err := r.cfg.Check(ctx, ref, m)
		if err != nil {
			return nil, err
		}
		if refusal != "" {
			log.Info("slack command refused", "agent", ref.Agent, "session", ref.Session, "verb", m.Verb, "why", refusal)
			return r.answer(in, false, refusal), nil
		}
	}
	seq, err := control.Publish(ctx, r.js, r.names, ref, m)
	if errors.Is(err, control.ErrInvalid) {
		return r.answer(in, false, err.Error()), nil
	}
	if err != nil {
		return nil, err
	}
	log.Info("slack command published", "agent", ref.Agent, "session", ref.Session, "verb", m.Verb, "seq", seq)
	out := r.answer(in, true, fmt.Sprintf("%s sent to %s (seq %d)", m.Verb, ref, seq))
	if a, ok := out.(map[string]any); ok {
		a["verb"], a["seq"], a["agent"], a["session"] = m.Verb, seq, ref.Agent, ref.Session
	}
	b, _ := json.Marshal(out)
	if err := r.seen.Record(ctx, sourceEvent+"/"+in.team, in.id, b); err != nil {
		// Published already: a retry inside JL_CTL's window is still
		// dropped by its message id.
		log.Warn("slack: remember handled command", "err", err)
	}
	return out, nil
}

// request sends a message that is not a command to the channel's session
// as a user request, once: Slack delivers one message as both a message
// and an app_mention event, and retries each; the request's id is the
// channel and the message's ts, the same for all of them.
func (r *Receiver) request(ctx context.Context, log *slog.Logger, in request) (any, error) {
	ref, ok := r.cfg.Channels[in.channel]
	if !ok {
		log.Debug("slack message from a channel that is mapped to no session")
		return r.answer(in, false, fmt.Sprintf("channel %s is mapped to no session (add it to JETLOOP_SLACK_CHANNELS)", in.channel)), nil
	}
	text := strings.TrimSpace(stripMentions(in.text))
	if text == "" {
		return r.answer(in, false, "ignored: empty message"), nil
	}
	id := in.channel + ":" + in.ts
	if _, seen, err := r.seen.Seen(ctx, sourceMessage+"/"+in.team, id); err != nil {
		return nil, err
	} else if seen {
		log.Info("slack message already sent", "agent", ref.Agent, "session", ref.Session)
		return map[string]any{"ok": true, "duplicate": true}, nil
	}
	thread := in.threadTS
	if thread == "" {
		thread = in.ts
	}
	seq, err := r.cfg.Send(ctx, ref, text, id, "/chat/slack/"+url.PathEscape(in.team), events.SlackThread(in.channel, thread))
	if status := ingest.Status(err); err != nil && status < 500 {
		// The agent does not take it (requests: off, no trigger admits
		// it, a rate limit): the sender is told why; Slack must not
		// retry.
		log.Info("slack message not admitted", "agent", ref.Agent, "session", ref.Session, "status", status, "err", err)
		return r.answer(in, false, "not sent: "+err.Error()), nil
	}
	if err != nil {
		return nil, err
	}
	log.Info("slack message sent as a request", "agent", ref.Agent, "session", ref.Session, "seq", seq)
	out := map[string]any{"ok": true, "agent": ref.Agent, "session": ref.Session, "seq": seq}
	b, _ := json.Marshal(out)
	if err := r.seen.Record(ctx, sourceMessage+"/"+in.team, id, b); err != nil {
		// Published already: a retry inside JL_IN's window is still
		// dropped by its message id.
		log.Warn("slack: remember sent message", "err", err)
	}
	return out, nil
}

// answer is the response body: for a slash command, a message only its
// sender sees; for an event, a record Slack ignores.
func (r *Receiver) answer(in request, ok bool, text string) any {
	if in.slash {
		return map[string]any{"response_type": "ephemeral", "text": text}
	}
	return map[string]any{"ok": ok, "text": text}
}

// envelope is the part of an Events API body the receiver reads.
type envelope struct {
	Type      string `json:"type"`
	Challenge string `json:"challenge"`
	TeamID    string `json:"team_id"`
	EventID   string `json:"event_id"`
	Event     struct {
		Type     string `json:"type"`
		Subtype  string `json:"subtype"`
		User     string `json:"user"`
		BotID    string `json:"bot_id"`
		Text     string `json:"text"`
		Channel  string `json:"channel"`
		TS       string `json:"ts"`
		ThreadTS string `json:"thread_ts"`
	} `json:"event"`
}

func parseRequest(contentType string, body []byte) (request, error) {
	mt, _, _ := mime.ParseMediaType(contentType)
	switch mt {
	case "application/x-www-form-urlencoded":
		q, err := url.ParseQuery(string(body))
		if err != nil {
			return request{}, refuse(http.StatusBadRequest, "slash command: %v", err)
		}
		in := request{slash: true, team: q.Get("team_id"), channel: q.Get("channel_id"), user: q.Get("user_id"), text: q.Get("text"), id: q.Get("trigger_id")}
		if in.channel == "" || in.id == "" {
			return request{}, refuse(http.StatusBadRequest, "slash command without channel_id or trigger_id")
		}
		return in, nil
	case "application/json", "":
		var e envelope
		if err := json.Unmarshal(body, &e); err != nil {
			return request{}, refuse(http.StatusBadRequest, "events API body: %v", err)
		}
		switch e.Type {
		case "url_verification":
			if e.Challenge == "" {
				return request{}, refuse(http.StatusBadRequest, "url_verification without a challenge")
			}
			return request{challenge: e.Challenge}, nil
		case "event_callback":
		default:
			return request{ignore: fmt.Sprintf("request type %q", e.Type)}, nil
		}
		in := request{team: e.TeamID, channel: e.Event.Channel, user: e.Event.User, text: e.Event.Text, id: e.EventID,
			ts: e.Event.TS, threadTS: e.Event.ThreadTS}
		switch {
		case e.EventID == "":
			return request{}, refuse(http.StatusBadRequest, "event_callback without event_id")
		case e.Event.Type != "app_mention" && e.Event.Type != "message":
			in.ignore = fmt.Sprintf("event type %q", e.Event.Type)
		case e.Event.BotID != "" || e.Event.Subtype != "":
			// Bots (this one included) and edits, joins and the like.
			in.ignore = "bot message or message subtype " + strconv.Quote(e.Event.Subtype)
		}
		return in, nil
	}
	return request{}, refuse(http.StatusUnsupportedMediaType, "content type %q: want application/json (Events API) or a form (slash command)", contentType)
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
