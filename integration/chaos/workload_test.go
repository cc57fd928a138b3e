package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/jetloop/jetloop/ingest"
	"github.com/jetloop/jetloop/record"
	"github.com/jetloop/jetloop/streams"
)

// Kinds of what the workload sends.
const (
	sendGitHub  = "github"
	sendRequest = "request"
	sendControl = "control"
)

// sent is one delivery of the workload and how it was answered. A
// delivery is retried with the same id, across ingests, until it is
// answered 2xx or its attempts run out, as GitHub and careful clients do.
type sent struct {
	kind           string
	id             string // delivery GUID, Idempotency-Key, control message id
	agent, session string
	verb           string // control
	repeat         bool   // a redelivery of an earlier id
	body           []byte
	status         int    // the last answer's status; 0 for none
	answer         string // the last answer
	ok             bool   // answered 2xx
	seq            uint64 // control: its sequence in JL_CTL
	attempts       int
	at             time.Time // when it was first sent
}

// ref is a session.
type ref struct{ agent, session string }

func (r ref) String() string { return r.agent + "/" + r.session }

// pr is an open pull request of the workload.
type pr struct {
	number int
	events int
}

// workload sends GitHub webhooks, user requests and control messages to
// the ingests, and records every answer.
type workload struct {
	s       *system
	ingests []*process
	client  *http.Client

	mu          sync.Mutex
	rng         *rand.Rand
	sent        []*sent
	prs         []*pr
	nextPR      int
	live        map[ref]bool // sessions with an event answered 2xx
	interrupted map[ref]bool // to resume once the faults end
	cancelled   map[ref]bool
	nextDoomed  int
}

// maxPREvents bounds the events of one pull request, so its session's
// script does not run out of tool calls.
const maxPREvents = scriptPairs / 2

func newWorkload(s *system, seed int64) *workload {
	return &workload{
		s: s, ingests: s.ofKind(kindIngest),
		client:      &http.Client{Timeout: 10 * time.Second},
		rng:         rand.New(rand.NewPCG(uint64(seed), 0x5eed)),
		live:        map[ref]bool{},
		interrupted: map[ref]bool{},
		cancelled:   map[ref]bool{},
	}
}

func (w *workload) intn(n int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rng.IntN(n)
}

func (w *workload) chance(p float64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rng.Float64() < p
}

// jitter returns d ± 50 %.
func (w *workload) jitter(d time.Duration) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return d/2 + time.Duration(w.rng.Int64N(int64(d)))
}

// run sends until ctx ends, from one goroutine per kind.
func (w *workload) run(ctx context.Context) {
	var wg sync.WaitGroup
	loop := func(every time.Duration, fn func(ctx context.Context)) {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(w.jitter(every)):
				}
				fn(ctx)
			}
		})
	}
	// Each loop gets two goroutines, so one delivery stuck in its retries
	// does not stop its kind.
	for range 2 {
		loop(500*time.Millisecond, w.github)
		loop(600*time.Millisecond, w.request)
		loop(900*time.Millisecond, w.control)
		loop(400*time.Millisecond, w.limited)
	}
	loop(2*time.Second, w.burst)
	loop(6*time.Second, w.doomed)
	wg.Wait()
}

// github sends a pull request event: a new PR, a push to an open one, or
// a redelivery of an earlier delivery.
func (w *workload) github(ctx context.Context) {
	w.mu.Lock()
	var d *sent
	switch r := w.rng.Float64(); {
	case r < 0.1 && len(w.sent) > 0:
		// GitHub redelivers with the same GUID and body.
		for range 10 {
			prev := w.sent[w.rng.IntN(len(w.sent))]
			if prev.kind == sendGitHub && !prev.repeat {
				d = &sent{kind: sendGitHub, id: prev.id, agent: prev.agent, session: prev.session, body: prev.body, repeat: true}
				break
			}
		}
	case r < 0.35 || len(w.prs) == 0:
		w.nextPR++
		p := &pr{number: w.nextPR, events: 1}
		w.prs = append(w.prs, p)
		d = w.prEvent(p, "opened")
	default:
		p := w.prs[w.rng.IntN(len(w.prs))]
		if p.events >= maxPREvents {
			break
		}
		p.events++
		d = w.prEvent(p, "synchronize")
	}
	if d != nil {
		w.sent = append(w.sent, d)
	}
	w.mu.Unlock()
	if d == nil {
		return
	}
	h := http.Header{}
	h.Set(ingest.HeaderGitHubEvent, "pull_request")
	h.Set(ingest.HeaderGitHubDelivery, d.id)
	h.Set(ingest.HeaderGitHubSignature, ingest.Sign([]byte(githubSecret), d.body))
	h.Set("Content-Type", "application/json")
	w.deliver(ctx, d, "/webhooks/github", h)
}

// prEvent builds a pull request delivery; w.mu is held.
func (w *workload) prEvent(p *pr, action string) *sent {
	body, _ := json.Marshal(map[string]any{
		"action": action, "number": p.number,
		"pull_request": map[string]any{"number": p.number, "draft": false, "head": map[string]any{"sha": fmt.Sprintf("%040x", w.rng.Uint64())}},
		"repository":   map[string]any{"full_name": repo},
	})
	return &sent{kind: sendGitHub, id: uuid.NewString(), agent: agentReviewer, session: fmt.Sprintf("%s#%d", repo, p.number), body: body}
}

// request sends a user request to one of a few sessions, or repeats an
// earlier request with its Idempotency-Key.
func (w *workload) request(ctx context.Context) {
	w.mu.Lock()
	var d *sent
	if w.rng.Float64() < 0.1 && len(w.sent) > 0 {
		for range 10 {
			prev := w.sent[w.rng.IntN(len(w.sent))]
			if prev.kind == sendRequest && !prev.repeat && !w.cancelled[ref{prev.agent, prev.session}] {
				d = &sent{kind: sendRequest, id: prev.id, agent: prev.agent, session: prev.session, body: prev.body, repeat: true}
				break
			}
		}
	}
	if d == nil {
		agent, session := agentRequests, fmt.Sprintf("user-%d", w.rng.IntN(12))
		if w.rng.Float64() < 0.25 {
			// A request the lead delegates to two helpers.
			agent, session = agentLead, fmt.Sprintf("lead-%d", w.rng.IntN(4))
		}
		body, _ := json.Marshal(map[string]string{"text": "request " + uuid.NewString()[:8]})
		d = &sent{kind: sendRequest, id: uuid.NewString(), agent: agent, session: session, body: body}
	}
	w.sent = append(w.sent, d)
	w.mu.Unlock()
	w.sendRequest(ctx, d)
}

func (w *workload) sendRequest(ctx context.Context, d *sent) {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+ingestToken)
	h.Set("Content-Type", "application/json")
	h.Set("Idempotency-Key", d.id)
	w.deliver(ctx, d, "/v1/agents/"+url.PathEscape(d.agent)+"/sessions/"+url.PathEscape(d.session)+"/messages", h)
}

// limited sends a user request to one of the sessions of the agent whose
// runs are limited, more of them than it may run at once.
func (w *workload) limited(ctx context.Context) {
	w.mu.Lock()
	body, _ := json.Marshal(map[string]string{"text": "limited " + uuid.NewString()[:8]})
	d := &sent{kind: sendRequest, id: uuid.NewString(), agent: agentLimited, session: fmt.Sprintf("lim-%d", w.rng.IntN(3*limitedRuns)), body: body}
	w.sent = append(w.sent, d)
	w.mu.Unlock()
	w.sendRequest(ctx, d)
}

// burst sends a burst of three to five user requests, 250 ms apart, to
// one session of the debounced agent: each is answered 2xx, and the
// session gets one event for the burst (or more, split by the window's
// end or max_wait).
func (w *workload) burst(ctx context.Context) {
	n := 3 + w.intn(3)
	session := fmt.Sprintf("burst-%d", w.intn(4))
	for i := range n {
		if i > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
		w.mu.Lock()
		body, _ := json.Marshal(map[string]string{"text": fmt.Sprintf("burst %d of %d", i+1, n)})
		d := &sent{kind: sendRequest, id: uuid.NewString(), agent: agentBurst, session: session, body: body}
		w.sent = append(w.sent, d)
		w.mu.Unlock()
		w.sendRequest(ctx, d)
	}
}

// control steers, interrupts or resumes a session that has had an event,
// or repeats an earlier control message with its Idempotency-Key.
func (w *workload) control(ctx context.Context) {
	w.mu.Lock()
	var d *sent
	if w.rng.Float64() < 0.05 && len(w.sent) > 0 {
		// A control message is deduplicated by JL_CTL's window alone
		// (streams.DefaultDedupeWindow): repeat only recent ones.
		for range 10 {
			prev := w.sent[w.rng.IntN(len(w.sent))]
			if prev.kind == sendControl && !prev.repeat && prev.verb == "steer" && time.Since(prev.at) < streams.DefaultDedupeWindow/2 {
				d = &sent{kind: sendControl, id: prev.id, agent: prev.agent, session: prev.session, verb: prev.verb, body: prev.body, repeat: true}
				break
			}
		}
	}
	if d == nil {
		var live []ref
		for r := range w.live {
			if !w.cancelled[r] {
				live = append(live, r)
			}
		}
		if len(live) == 0 {
			w.mu.Unlock()
			return
		}
		r := live[w.rng.IntN(len(live))]
		verb, text := "steer", "chaos steer "+uuid.NewString()[:8]
		switch x := w.rng.Float64(); {
		case x < 0.15:
			verb, text = "interrupt", "chaos interrupt"
			w.interrupted[r] = true
		case x < 0.25 && w.interrupted[r]:
			verb, text = "resume", "chaos resume"
		}
		d = w.controlMsg(r, verb, text)
	}
	w.sent = append(w.sent, d)
	w.mu.Unlock()
	w.sendControl(ctx, d)
}

// controlMsg builds a control delivery; w.mu is held.
func (w *workload) controlMsg(r ref, verb, text string) *sent {
	body, _ := json.Marshal(map[string]string{"verb": verb, "text": text})
	return &sent{kind: sendControl, id: uuid.NewString(), agent: r.agent, session: r.session, verb: verb, body: body}
}

func (w *workload) sendControl(ctx context.Context, d *sent) {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+apiToken)
	h.Set("Content-Type", "application/json")
	h.Set("Idempotency-Key", d.id)
	w.deliver(ctx, d, "/v1/agents/"+url.PathEscape(d.agent)+"/sessions/"+url.PathEscape(d.session)+"/control", h)
}

// doomed sends a request to a session of its own and, once the request is
// in the session's transcript, cancels the session: a cancelled session is
// final, and the workload sends it nothing more.
func (w *workload) doomed(ctx context.Context) {
	w.mu.Lock()
	w.nextDoomed++
	r := ref{agentRequests, fmt.Sprintf("doomed-%d", w.nextDoomed)}
	w.cancelled[r] = true
	body, _ := json.Marshal(map[string]string{"text": "a request before the cancel"})
	d := &sent{kind: sendRequest, id: uuid.NewString(), agent: r.agent, session: r.session, body: body}
	w.sent = append(w.sent, d)
	w.mu.Unlock()
	w.sendRequest(ctx, d)
	if !d.ok {
		return
	}
	sr, err := streams.NewSessionRef(r.agent, r.session)
	if err != nil {
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		tr, err := record.Show(sctx, w.s.js, w.s.names, sr)
		cancel()
		if err == nil && hasEvent(tr, d.id) {
			w.mu.Lock()
			c := w.controlMsg(r, "cancel", "chaos cancel")
			w.sent = append(w.sent, c)
			w.mu.Unlock()
			w.sendControl(ctx, c)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// resumeAll resumes every session the workload interrupted, once the
// faults have ended, so that none stays paused for want of a resume.
func (w *workload) resumeAll(ctx context.Context) {
	w.mu.Lock()
	var ds []*sent
	for r := range w.interrupted {
		d := w.controlMsg(r, "resume", "chaos resume at the end")
		w.sent = append(w.sent, d)
		ds = append(ds, d)
	}
	w.mu.Unlock()
	for _, d := range ds {
		w.sendControl(ctx, d)
	}
}

// maxAttempts bounds the deliveries of one id; with the back-off they span
// about half a minute.
const maxAttempts = 20

// deliver posts d to the ingests, round robin from a random one, until one
// answers 2xx, a 4xx says the request itself is wrong, or the attempts run
// out. Every answer is recorded on d.
func (w *workload) deliver(ctx context.Context, d *sent, path string, h http.Header) {
	w.mu.Lock()
	d.at = time.Now()
	w.mu.Unlock()
	start := w.intn(len(w.ingests))
	backoff := 100 * time.Millisecond
	for attempt := range maxAttempts {
		// Even as the workload ends, a delivery under way is finished:
		// the retry is what makes a 2xx likely.
		p := w.ingests[(start+attempt)%len(w.ingests)]
		req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, "http://"+p.addr+path, bytes.NewReader(d.body))
		if err != nil {
			panic(err)
		}
		req.Header = h.Clone()
		resp, err := w.client.Do(req)
		status, answer := 0, ""
		if err != nil {
			answer = err.Error()
		} else {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			status, answer = resp.StatusCode, string(b)
		}
		w.mu.Lock()
		d.attempts++
		d.status, d.answer = status, answer
		if status/100 == 2 {
			d.ok = true
			if d.kind == sendControl {
				var cr struct {
					Seq uint64 `json:"seq"`
				}
				_ = json.Unmarshal([]byte(answer), &cr)
				d.seq = cr.Seq
			} else {
				w.live[ref{d.agent, d.session}] = true
			}
		}
		w.mu.Unlock()
		if status/100 == 2 || (status/100 == 4 && status != http.StatusTooManyRequests) {
			return
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, 2*time.Second)
	}
}

// deliveries returns a copy of what was sent.
func (w *workload) deliveries() []sent {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]sent, len(w.sent))
	for i, d := range w.sent {
		out[i] = *d
	}
	return out
}

// hasEvent reports whether a transcript records the event with id.
func hasEvent(tr record.Transcript, id string) bool {
	for _, e := range tr.Transcript {
		if (e.Kind == record.KindEvent || e.Kind == record.KindUser) && e.Event != nil && e.Event.ID == id {
			return true
		}
	}
	return false
}
