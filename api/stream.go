package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetloop/jetloop/ingest/gate"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/worker"
)

// Bounds of status streams.
const (
	// DefaultMaxStreams bounds the status streams one process serves at
	// once.
	DefaultMaxStreams = 64
	// DefaultMaxStreamsPerSignIn bounds the status streams of one
	// sign-in at once (a dashboard tab holds one).
	DefaultMaxStreamsPerSignIn = 8
	// streamBuffer bounds the changes waiting for a slow client; past it
	// the client is told to read the list again (event resync).
	streamBuffer = 256
	// streamHeartbeat is how often an idle stream sends a comment, so
	// proxies keep it open and a client notices a dead one.
	streamHeartbeat = 15 * time.Second
	// streamWrite bounds one write to a stream's client.
	streamWrite = 10 * time.Second
)

// streamRoute serves GET /v1/sessions/stream: the status changes workers
// announce on jl.status.> as server-sent events ("event: status", the
// worker.StatusChange as data), of every session or those the agent,
// session and status parameters select. A client too slow for the
// changes gets "event: resync" and should read the list again. The
// stream ends when the client goes or cfg.Stop closes; at most
// cfg.MaxStreams run at once (503 beyond), and at most
// cfg.MaxStreamsPerSignIn of one sign-in (429 beyond), apart from the
// gate's pools, which bound requests, not streams.
func (s *Service) streamRoute(cfg HTTPConfig) http.Handler {
	slots := make(chan struct{}, cfg.MaxStreams)
	var mu sync.Mutex
	held := map[string]int{} // streams open by sign-in
	signIns, _ := cfg.Sessions.(SignIns)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		fail := func(err error) {
			e := classify(err)
			if e.Code == http.StatusServiceUnavailable {
				w.Header().Set("Retry-After", "5")
			}
			s.logFailure("stream", "http", e)
			s.observe("stream", "http", e.Code, start)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(e.Code)
			_ = json.NewEncoder(w).Encode(e)
		}
		if err := authenticate(cfg, r); err != nil {
			gate.Unread(w)
			fail(err)
			return
		}
		q, err := query(r, "agent", "session", "status")
		if err != nil {
			fail(err)
			return
		}
		agent, status := q.Get("agent"), q.Get("status")
		if err := checkAgentFilter(agent); err != nil {
			fail(err)
			return
		}
		if status != "" && !record.Status(status).Known() {
			fail(errorf(http.StatusBadRequest, "status %q: not a session status", status))
			return
		}
		ref, err := sessionOf(agent, q.Get("session"))
		if err != nil {
			fail(err)
			return
		}
		if key := ""; signIns != nil && r.Header.Get("Authorization") == "" {
			if key = signIns.SignIn(r); key != "" {
				mu.Lock()
				if held[key] >= cfg.MaxStreamsPerSignIn {
					mu.Unlock()
					w.Header().Set("Retry-After", "5")
					fail(errorf(http.StatusTooManyRequests, "status streams: this sign-in holds %d open already, the most at once; close a tab", cfg.MaxStreamsPerSignIn))
					return
				}
				held[key]++
				mu.Unlock()
				defer func() {
					mu.Lock()
					if held[key]--; held[key] == 0 {
						delete(held, key)
					}
					mu.Unlock()
				}()
			}
		}
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		default:
			fail(errorf(http.StatusServiceUnavailable, "status streams: %d are served already, the most at once", cap(slots)))
			return
		}
		subject := s.names.StatusAll()
		if ref.Agent != "" {
			subject = s.names.Status(ref)
		}
		changes := make(chan worker.StatusChange, streamBuffer)
		lost := make(chan struct{}, 1)
		sub, err := s.nc.Subscribe(subject, func(m *nats.Msg) {
			var c worker.StatusChange
			if json.Unmarshal(m.Data, &c) != nil || agent != "" && c.Agent != agent || status != "" && string(c.Status) != status {
				return
			}
			select {
			case changes <- c:
			default:
				select {
				case lost <- struct{}{}:
				default:
				}
			}
		})
		if err != nil {
			fail(fmt.Errorf("api: subscribe to %s: %w", subject, err))
			return
		}
		defer func() { _ = sub.Unsubscribe() }()
		s.observe("stream", "http", http.StatusOK, start)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		send := func(event string) bool {
			_ = rc.SetWriteDeadline(time.Now().Add(streamWrite))
			if _, err := w.Write([]byte(event)); err != nil {
				return false
			}
			return rc.Flush() == nil
		}
		// The retry hint, and a first event, so the client knows the
		// subscription is in place before it reads the list.
		if !send("retry: 2000\nevent: ready\ndata: {}\n\n") {
			return
		}
		beat := time.NewTicker(streamHeartbeat)
		defer beat.Stop()
		for {
			var event string
			select {
			case <-r.Context().Done():
				return
			case <-cfg.Stop:
				return
			case <-beat.C:
				event = ": keepalive\n\n"
			case <-lost:
				event = "event: resync\ndata: {}\n\n"
			case c := <-changes:
				b, err := json.Marshal(c)
				if err != nil {
					continue
				}
				// JSON has no raw newlines: one data line.
				event = "event: status\ndata: " + strings.TrimSpace(string(b)) + "\n\n"
			}
			if !send(event) {
				return
			}
		}
	})
}
